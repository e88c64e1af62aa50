"""Developer helper (issue 43): the course kernel factories of ``utilities.ozaki2.simt`` with their loops over the
moduli unrolled, two ways, for the probes to time beside the course's.

A factory's kernel loops ``for t in range(N)`` and reads each modulus's constants from tables indexed by ``t``
(``P[t]``, ``INV[t]``...): a constant-memory load and its address arithmetic each, at run time. With the loop
unrolled over a tuple of literals, each ``t`` is a compile-time constant and each table entry an immediate in the
code (read from the PTX of a CPU build). The same operations otherwise, so the same results bit for bit.

    variants = unrolled_simt()            # numba unrolls: the loops over numba.cuda.literal_unroll
    kernel = variants["make_reconstruct_kernel"](15, True)
    variants = written_out_simt(15)       # the source unrolled: each loop's body once a modulus, t a literal
    kernel = variants["make_reconstruct_kernel"](15, True)   # (the same count, or it raises)

    python tools/unrolled_variants.py make_reconstruct_kernel --count 15   # the written-out source, printed

On an H200 (2026-11-29) numba's way made the kernels 2.9-3.3x slower; the probe's own written-out reconstruction
(``ozaki2_reconstruct_probe.unrolled_factory``) 1.27x faster: ``written_out_simt`` does that to any factory.
"""

from __future__ import annotations

import ast
import copy
import inspect
import re
import textwrap
from typing import Any

# the factories whose kernels loop over the moduli, and the line of each that binds N (the count)
FACTORIES = ("make_store_row_words", "make_residue_cols_kernel", "make_reconstruct_kernel")
REBUILT = ("make_residue_known_rows_kernel", "make_residue_rows_kernel")  # they call make_store_row_words
_BINDS_N = re.compile(r"^(?P<indent>    )N\b[^=\n]*=\s*count\b.*$", re.M)
_LOOP = "for t in range(N):"


def unrolled_source(source: str) -> str:
    """A factory's source with ``TS = tuple(range(count))`` bound beside N and every ``for t in range(N):`` over
    ``literal_unroll(TS)``; raises where either is missing (the course's code changed: the probe would time the
    course's kernel twice)."""
    match = _BINDS_N.search(source)
    if match is None or _LOOP not in source:
        raise ValueError("no 'N = count' binding or no 'for t in range(N):' loop to unroll")
    source = source[: match.end()] + f"\n{match['indent']}TS = tuple(range(count))" + source[match.end() :]
    return source.replace(_LOOP, "for t in literal_unroll(TS):")


def unrolled_simt() -> dict[str, Any]:
    """A copy of ``utilities.ozaki2.simt``'s namespace in which :data:`FACTORIES` unroll their loops over the moduli
    and :data:`REBUILT` use them."""
    from numba import cuda

    from utilities.ozaki2 import simt

    names = dict(vars(simt))
    names["literal_unroll"] = cuda.literal_unroll
    for name in (*FACTORIES, *REBUILT):
        source = inspect.getsource(getattr(simt, name))
        if name in FACTORIES:
            source = unrolled_source(source)
        if name == "make_reconstruct_kernel":  # its argument a is rebound to a double after the loop, which the
            # unrolled loop's typing cannot unify with the array: a name of its own (the same operations)
            source = source.replace("a = s1 - q", "a0 = s1 - q").replace("h = a + s2", "h = a0 + s2")
            source = source.replace("back = h - a\n", "back = h - a0\n").replace(
                "((a - (h - back))", "((a0 - (h - back))"
            )
        exec(compile(source, f"<{name}, unrolled>", "exec"), names)  # noqa: S102
    return names


class _Literal(ast.NodeTransformer):
    """Every read of the name ``t`` becomes the constant ``value``."""

    def __init__(self, value: int) -> None:
        self.value = value

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id == "t" and isinstance(node.ctx, ast.Load):
            return ast.copy_location(ast.Constant(self.value), node)
        return node


class _WriteOut(ast.NodeTransformer):
    """``for t in range(N): body`` becomes ``count`` copies of body, t a literal in each."""

    def __init__(self, count: int) -> None:
        self.count, self.loops = count, 0

    def visit_For(self, node: ast.For) -> Any:
        self.generic_visit(node)
        loop = node.iter
        if not (
            isinstance(node.target, ast.Name)
            and node.target.id == "t"
            and isinstance(loop, ast.Call)
            and isinstance(loop.func, ast.Name)
            and loop.func.id == "range"
            and len(loop.args) == 1
            and isinstance(loop.args[0], ast.Name)
            and loop.args[0].id == "N"
            and not node.orelse
        ):
            return node
        if any(isinstance(n, ast.Break | ast.Continue) for n in ast.walk(node)):
            raise ValueError("a loop over the moduli with break or continue cannot be written out")
        self.loops += 1
        return [_Literal(t).visit(copy.deepcopy(stmt)) for t in range(self.count) for stmt in node.body]


def written_out_source(source: str, count: int) -> str:
    """A factory's source with each ``for t in range(N)`` written out for ``count`` moduli, and a check that the
    factory is called with that count; raises where there is no such loop."""
    tree = ast.parse(textwrap.dedent(source))
    writer = _WriteOut(count)
    tree = writer.visit(tree)
    if writer.loops == 0:
        raise ValueError("no 'for t in range(N)' loop to write out")
    factory = tree.body[0]
    guard = ast.parse(f"assert count == {count}, 'written out for {count} moduli'").body[0]
    factory.body.insert(1 if ast.get_docstring(factory) else 0, guard)
    factory.decorator_list = []  # functools.cache: each call builds, as the probes want
    return ast.unparse(ast.fix_missing_locations(tree))


def written_out_simt(count: int) -> dict[str, Any]:
    """A copy of ``utilities.ozaki2.simt``'s namespace in which :data:`FACTORIES` write their loops over the moduli
    out for ``count`` moduli, and :data:`REBUILT` use them."""
    from utilities.ozaki2 import simt

    names = dict(vars(simt))
    for name in (*FACTORIES, *REBUILT):
        source = inspect.getsource(getattr(simt, name))
        if name in FACTORIES:
            source = written_out_source(source, count)
        exec(compile(source, f"<{name}, written out>", "exec"), names)  # noqa: S102
    return names


def main() -> None:
    import argparse
    import sys
    from pathlib import Path

    parser = argparse.ArgumentParser(description="Print a factory's source with its loops over the moduli written out.")
    parser.add_argument("factory", choices=FACTORIES, help="a factory of utilities.ozaki2.simt")
    parser.add_argument("--count", type=int, default=15, help="moduli (default 15)")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from utilities.ozaki2 import simt

    print(written_out_source(inspect.getsource(getattr(simt, args.factory)), args.count))


if __name__ == "__main__":
    main()

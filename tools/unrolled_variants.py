"""Developer helper (issue 43): the kernel factories of ``utilities.ozaki2.simt`` with their loops over the moduli
treated otherwise than the course treats them, for the probes to time beside the course's kernels.

The course writes out the loops of the reconstruction, of the rows' residues and of the columns' (``utilities.
written_out``: the body once a modulus, ``t`` a literal in each, every table entry a constant in the code; the
column kernel kept its loops until its rewrite, when they were faster). Each variant is the course's own source,
edited, so it computes the same thing:

    looped_simt()         every loop kept (the course's kernels before 2026-11-30)
    written_out_simt()    every loop written out (a column kernel that keeps its loops too)
    unrolled_simt()       every loop over ``numba.cuda.literal_unroll`` (numba unrolls by type)
    kernel = written_out_simt()["make_residue_cols_kernel"](15)

    python tools/unrolled_variants.py make_residue_cols_kernel --count 15   # a kernel's written-out source
"""

from __future__ import annotations

import inspect
import linecache
import re
from collections.abc import Callable
from typing import Any

# the factories whose kernels loop over the moduli, and those that call one of them (rebuilt to use the variant)
FACTORIES = ("make_store_word_group", "make_residue_cols_kernel", "make_reconstruct_kernel")
REBUILT = ("make_residue_known_rows_kernel", "make_residue_rows_kernel")
_MARK = re.compile(r"^ *@written_out\(N\).*\n", re.M)  # the course's decorator, as its factories write it
_BINDS_N = re.compile(r"^(?P<indent>    )N\b[^=\n]*=\s*count\b.*$", re.M)
_LOOP = "for t in range(N):"
_COLUMNS = "    @cuda.jit\n    def residue_cols_kernel("


def looped_source(source: str) -> str:
    """A factory's source without the course's ``@written_out(N)``: its loops stay loops."""
    return _MARK.sub("", source)


def written_out_factory_source(source: str) -> str:
    """A factory's source with every kernel that loops over the moduli under ``@written_out(N)``."""
    if _COLUMNS in source:
        return source.replace(_COLUMNS, "    @cuda.jit\n    @written_out(N)\n    def residue_cols_kernel(")
    if not _MARK.search(source):
        raise ValueError("a factory with a loop over the moduli that neither the course nor this tool writes out")
    return source


def unrolled_source(source: str) -> str:
    """A factory's source with ``TS = tuple(range(count))`` bound beside N and every ``for t in range(N):`` over
    ``literal_unroll(TS)``; raises where either is missing (the course's code changed: the probe would time the
    course's kernel twice)."""
    source = looped_source(source)
    match = _BINDS_N.search(source)
    if match is None or _LOOP not in source:
        raise ValueError("no 'N = count' binding or no 'for t in range(N):' loop to unroll")
    source = source[: match.end()] + f"\n{match['indent']}TS = tuple(range(count))" + source[match.end() :]
    return source.replace(_LOOP, "for t in literal_unroll(TS):")


def _namespace(edit: Callable[[str], str], mode: str) -> dict[str, Any]:
    """A copy of ``utilities.ozaki2.simt``'s namespace with :data:`FACTORIES` edited and :data:`REBUILT` using them;
    each source is kept where ``inspect`` finds it (``written_out`` reads its kernel's)."""
    from utilities.ozaki2 import simt

    names = dict(vars(simt))
    for name in (*FACTORIES, *REBUILT):
        source = inspect.getsource(getattr(simt, name))
        if name in FACTORIES:
            source = edit(source)
        file = f"<{name}, {mode}>"
        linecache.cache[file] = (len(source), None, source.splitlines(True), file)
        exec(compile(source, file, "exec"), names)  # noqa: S102 - the course's own source, edited
    return names


def looped_simt() -> dict[str, Any]:
    """The factories with every loop over the moduli kept."""
    return _namespace(looped_source, "looped")


def written_out_simt() -> dict[str, Any]:
    """The factories with every loop over the moduli written out (the count is each factory's own)."""
    return _namespace(written_out_factory_source, "written out")


def unrolled_simt() -> dict[str, Any]:
    """The factories with every loop over the moduli unrolled by numba (on a GPU: numba's simulator has none)."""
    from numba import cuda

    names = _namespace(unrolled_source, "unrolled")
    names["literal_unroll"] = cuda.literal_unroll
    return names


def main() -> None:
    import argparse
    import sys
    from pathlib import Path

    parser = argparse.ArgumentParser(description="Print a kernel's source with its loops over the moduli written out.")
    parser.add_argument("factory", choices=("make_residue_cols_kernel", "make_reconstruct_kernel"))
    parser.add_argument("--count", type=int, default=15, help="moduli (default 15)")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from utilities.written_out import written_out_source

    kernel = written_out_simt()[args.factory](args.count)
    print(written_out_source(kernel.py_func.__wrapped__, args.count))


if __name__ == "__main__":
    main()

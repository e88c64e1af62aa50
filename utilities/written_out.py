"""Loops written out before numba sees them: :func:`written_out`, a decorator for a kernel's Python function.

A kernel that loops ``for t in range(N)`` over N moduli reads each modulus's constants from tables indexed by t
(``P[t]``, ``C1[t]``...): a load and its address arithmetic each, at run time, and values that cannot stay in
registers across iterations. Written out (the loop's body once for each t, t a literal in each), every table entry
is a constant in the code and the compiler schedules the whole sequence at once. ``numba.cuda.literal_unroll``
unrolls at the type level instead, and gave slower kernels here (``instructor-notes/ozaki2.md``).

The rewrite works on the function's source (``inspect.getsource``): a function whose source cannot be read (typed
at a prompt) keeps its loop, with a warning; the results are the same either way, only the speed differs.
"""

from __future__ import annotations

import ast
import copy
import inspect
import textwrap
import types
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class _Literal(ast.NodeTransformer):
    """Every read of the name ``index`` becomes the constant ``value``."""

    def __init__(self, index: str, value: int) -> None:
        self.index, self.value = index, value

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id == self.index and isinstance(node.ctx, ast.Load):
            return ast.copy_location(ast.Constant(self.value), node)
        return node


class _WriteOut(ast.NodeTransformer):
    """Each ``for <name> in range(<bound>):`` becomes ``count`` copies of its body, the name a literal in each."""

    def __init__(self, bound: str, count: int) -> None:
        self.bound, self.count, self.loops = bound, count, 0

    def visit_For(self, node: ast.For) -> Any:
        self.generic_visit(node)
        it = node.iter
        if not (
            isinstance(node.target, ast.Name)
            and isinstance(it, ast.Call)
            and isinstance(it.func, ast.Name)
            and it.func.id == "range"
            and len(it.args) == 1
            and isinstance(it.args[0], ast.Name)
            and it.args[0].id == self.bound
        ):
            return node
        if node.orelse or any(isinstance(n, ast.Break | ast.Continue) for n in ast.walk(node)):
            raise ValueError(f"a loop over range({self.bound}) with break, continue or else cannot be written out")
        self.loops += 1
        index = node.target.id
        return [_Literal(index, t).visit(copy.deepcopy(stmt)) for t in range(self.count) for stmt in node.body]


def _check_bound(fn: types.FunctionType, count: int, bound: str) -> None:
    """``bound`` is a name ``fn`` closes over, and it holds ``count``."""
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True))
    held = cells[bound].cell_contents if bound in cells else None
    if held != count:
        raise ValueError(
            f"written_out({count}, bound={bound!r}): {fn.__qualname__} must close over {bound} = {count}, the bound of "
            f"its loops ('for t in range({bound})'); it holds {held!r}"
        )


def _written_out_tree(fn: types.FunctionType, count: int, bound: str) -> ast.Module:
    """``fn``'s definition, without its decorators, at its own lines, with every loop over ``range(bound)`` written
    out ``count`` times; raises ``ValueError`` where there is no such loop (the decorator would change nothing)."""
    _check_bound(fn, count, bound)
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    ast.increment_lineno(tree, fn.__code__.co_firstlineno - 1)
    definition = tree.body[0]
    if not isinstance(definition, ast.FunctionDef):
        raise ValueError(f"written_out: {fn.__qualname__} is not a plain function definition")
    definition.decorator_list = []
    writer = _WriteOut(bound, count)
    tree = writer.visit(tree)
    if writer.loops == 0:
        raise ValueError(f"written_out: {fn.__qualname__} has no 'for ... in range({bound})' loop to write out")
    return ast.fix_missing_locations(tree)


def written_out_source(fn: types.FunctionType, count: int, bound: str = "N") -> str:
    """The source :func:`written_out` compiles for ``fn`` (``fn`` undecorated: ``kernel.py_func.__wrapped__``)."""
    return ast.unparse(_written_out_tree(fn, count, bound))


def written_out(count: int, bound: str = "N") -> Callable[[F], F]:
    """A decorator: the function with its loops over ``range(N)`` written out, N (``bound``) a variable it closes
    over that holds ``count``. Put it under ``cuda.jit``, which then compiles the written-out function::

        @cuda.jit
        @written_out(N)
        def kernel(...):
            for t in range(N):
                ...

    The new function keeps the old one's name, module, file, lines and constants (its closure becomes its
    globals): build caches, tracebacks and the simulator's errors name the same kernel at the same lines. It keeps
    the old function as ``__wrapped__``.
    """

    def write_out(fn: F) -> F:
        if not isinstance(fn, types.FunctionType):
            raise TypeError(f"written_out wraps a Python function (put it under cuda.jit), got {type(fn).__name__}")
        try:
            tree = _written_out_tree(fn, count, bound)
        except (OSError, TypeError) as error:  # no source to read: the loop stays, as fast as it was
            warnings.warn(f"{fn.__qualname__}: its loops stay loops ({error})", stacklevel=2)
            return fn
        scope = dict(fn.__globals__)
        scope.update(zip(fn.__code__.co_freevars, (c.cell_contents for c in fn.__closure__ or ()), strict=True))
        exec(compile(tree, fn.__code__.co_filename, "exec"), scope)  # noqa: S102 - its own source, rewritten
        new = scope[fn.__name__]
        new.__module__, new.__qualname__, new.__doc__ = fn.__module__, fn.__qualname__, fn.__doc__
        new.__wrapped__ = fn
        return new

    return write_out

"""Mutants of an exercise's solution: how the course proves that a checker rejects wrong code.

A mutant changes one thing inside a solution region (``# BEGIN SOLUTION`` ... ``# END SOLUTION``): an arithmetic,
bitwise or comparison operator, a constant by one (or a float by a factor of two), a sign, ``and``/``or``, two
indices of a subscript or two arguments of a call swapped, or a statement dropped. :func:`mutants` lists them
(plain ``ast``, no imports of the code), :func:`evaluate` sorts each into

- **rejected**: the checker raised ``CheckFailure`` (which names the stage);
- **survived**: the checker passed, and some valid input gives a different result: a hole in the checker;
- **equivalent**: the checker passed, and no valid input tried gives a different result (not counted).

The score is rejected / (rejected + survived). ``tools/mutation_test.py`` runs every CPU exercise.
"""

from __future__ import annotations

import ast
import copy
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

_BEGIN = re.compile(r"^\s*# BEGIN SOLUTION\s*$")
_END = re.compile(r"^\s*# END SOLUTION\s*$")

_BINOPS: dict[type, tuple[type, ...]] = {
    ast.Add: (ast.Sub,), ast.Sub: (ast.Add,), ast.Mult: (ast.Div, ast.Add), ast.Div: (ast.Mult,),
    ast.FloorDiv: (ast.Div, ast.Mod), ast.Mod: (ast.FloorDiv,), ast.LShift: (ast.RShift,), ast.RShift: (ast.LShift,),
    ast.BitAnd: (ast.BitOr,), ast.BitOr: (ast.BitAnd,), ast.Pow: (ast.Mult,),
}  # fmt: skip
_CMPOPS: dict[type, tuple[type, ...]] = {
    ast.Lt: (ast.LtE, ast.Gt), ast.LtE: (ast.Lt, ast.GtE), ast.Gt: (ast.GtE, ast.Lt), ast.GtE: (ast.Gt, ast.LtE),
    ast.Eq: (ast.NotEq,), ast.NotEq: (ast.Eq,),
}  # fmt: skip


def solution_lines(source: str) -> set[int]:
    """1-based line numbers inside solution regions of ``source``."""
    inside, lines = False, set()
    for number, line in enumerate(source.split("\n"), start=1):
        if _BEGIN.match(line):
            inside = True
        elif _END.match(line):
            inside = False
        elif inside:
            lines.add(number)
    return lines


@dataclass(frozen=True)
class Mutant:
    """One change: where (line), what (a description), and the whole mutated source."""

    line: int
    what: str
    source: str


def _sites(tree: ast.AST, lines: set[int]) -> Iterator[tuple[ast.AST, str, Callable[[ast.AST], Any], int]]:
    """(node, description, apply, line) for every mutation on one of ``lines``; ``apply`` edits ``node`` (of a
    copy)."""
    for node in ast.walk(tree):
        line = getattr(node, "lineno", None)
        if line not in lines:
            continue
        for what, apply in _node_changes(node):
            yield node, what, apply, line
    for node in ast.walk(tree):
        for name in ("body", "orelse"):
            body = getattr(node, name, None)
            if not isinstance(body, list):
                continue
            for i, stmt in enumerate(body):
                if isinstance(stmt, ast.stmt) and stmt.lineno in lines and not isinstance(stmt, ast.Pass):
                    yield node, f"statement dropped: {ast.unparse(stmt).splitlines()[0][:60]}", (
                        lambda n, name=name, i=i: getattr(n, name).__setitem__(i, ast.Pass())), stmt.lineno  # fmt: skip


def _node_changes(node: ast.AST) -> Iterator[tuple[str, Callable[[ast.AST], Any]]]:
    """(description, apply) for every change of one node (not counting dropped statements)."""
    if isinstance(node, ast.BinOp | ast.AugAssign) and type(node.op) in _BINOPS:
        for new in _BINOPS[type(node.op)]:
            yield f"{type(node.op).__name__} -> {new.__name__}", lambda n, new=new: setattr(n, "op", new())
    elif isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            for new in _CMPOPS.get(type(op), ()):
                what = f"{type(op).__name__} -> {new.__name__}"
                yield what, lambda n, i=i, new=new: n.ops.__setitem__(i, new())
    elif isinstance(node, ast.Constant) and type(node.value) in (int, float) and not isinstance(node.value, bool):
        v = node.value
        changes = [v + 1, v - 1] if isinstance(v, int) else ([v * 2, v / 2] if v else [1.0])
        for new in changes:
            yield f"constant {v!r} -> {new!r}", lambda n, new=new: setattr(n, "value", new)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        yield "sign dropped", lambda n: setattr(n, "op", ast.UAdd())
    elif isinstance(node, ast.BoolOp):
        new = ast.Or if isinstance(node.op, ast.And) else ast.And
        yield f"{type(node.op).__name__} -> {new.__name__}", lambda n, new=new: setattr(n, "op", new())
    elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple) and len(node.slice.elts) >= 2:
        yield "first two indices swapped", lambda n: n.slice.elts.__setitem__(
            slice(0, 2), [n.slice.elts[1], n.slice.elts[0]])  # fmt: skip
    elif isinstance(node, ast.Call) and len(node.args) >= 2 and not any(isinstance(a, ast.Starred) for a in node.args):
        yield "first two arguments swapped", lambda n: n.args.__setitem__(slice(0, 2), [n.args[1], n.args[0]])


def mutants(source: str, lines: set[int] | None = None) -> list[Mutant]:
    """Every single-change mutant of ``source`` on ``lines`` (default: its solution regions)."""
    tree = ast.parse(source)
    lines = solution_lines(source) if lines is None else lines
    found = []
    for index, (_, what, _, line) in enumerate(_sites(tree, lines)):
        clone = copy.deepcopy(tree)
        target, _, apply, _ = list(_sites(clone, lines))[index]
        apply(target)
        ast.fix_missing_locations(clone)
        try:
            text = ast.unparse(clone)
        except Exception:  # a change that leaves no valid program
            continue
        found.append(Mutant(line, what, text))
    return found


@dataclass
class Score:
    """What the mutants of one exercise did."""

    exercise: str
    rejected: list[Mutant] = field(default_factory=list)
    survived: list[Mutant] = field(default_factory=list)
    equivalent: list[Mutant] = field(default_factory=list)

    @property
    def score(self) -> float:
        counted = len(self.rejected) + len(self.survived)
        return len(self.rejected) / counted if counted else 1.0

    def line(self) -> str:
        return (f"{self.exercise}: {len(self.rejected)} rejected, {len(self.survived)} survived, "
                f"{len(self.equivalent)} equivalent: score {100 * self.score:.0f}%")  # fmt: skip


def evaluate(
    exercise: str,
    source: str,
    build: Callable[[str], Any],
    check: Callable[[Any], Any],
    differs: Callable[[Any], bool],
) -> Score:
    """Run every mutant of ``source``: ``build(text)`` makes the attendee's object from a source text,
    ``check(obj)`` runs the checker on it, ``differs(obj)`` says whether some valid input gives another result than
    the solution's (an exception counts as a difference)."""
    from .checker import CheckFailure

    score = Score(exercise)
    for mutant in mutants(source):
        try:
            obj = build(mutant.source)
        except Exception:
            score.rejected.append(mutant)  # it does not even build: the attendee sees the error at once
            continue
        try:
            check(obj)
        except CheckFailure:
            score.rejected.append(mutant)
            continue
        try:
            different = differs(obj)
        except Exception:
            different = True
        (score.survived if different else score.equivalent).append(mutant)
    return score

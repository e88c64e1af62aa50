"""Mutants of an exercise's solution: how the course proves that a checker rejects wrong code.

Two kinds. A **syntactic** mutant changes one thing inside a solution region (``# BEGIN SOLUTION`` ...
``# END SOLUTION``): an arithmetic, bitwise or comparison operator, a constant by one (or a float by a factor of
two), a sign, ``and``/``or``, two indices of a subscript or two arguments of a call swapped (not of a call whose
first two arguments commute, :data:`COMMUTATIVE`: that swap cannot change a result), or a statement dropped.
:func:`mutants` lists them (plain ``ast``, no imports of the code), :func:`evaluate` sorts each into

- **rejected**: the checker raised ``CheckFailure`` (which names the stage);
- **survived**: the checker passed, and some valid input gives a different result: a hole in the checker;
- **equivalent**: the checker passed, and no valid input tried gives a different result (not counted).

The score is rejected / (rejected + survived).

A **semantic** mutant is a realistic wrong implementation, written as data (:class:`Mistake`: a textual replacement
in the exercise's solution source, and what goes wrong); a correct alternative implementation likewise
(:class:`Alternative`), which the checker must accept. ``tools/mistakes/<track>.py`` hold them as ``MISTAKES`` and
``CORRECT`` lists (:func:`load_mistakes`); ``tools/mutation_test.py`` runs every CPU exercise's mutants of both
kinds (a mistake counts as rejected only when every seed rejects it, by the checker's own verdict for the stage the
mistake breaks, with a message that names it), and ``tools/mutation_gpu.py`` the GPU exercises'.

The checker's own verdict: a :class:`~utilities.checker.CheckFailure` of the mistake's ``stage`` (by default any
stage but "running your code"). An exception in the attendee's code that the checker only passes on (NumPy 2
refusing ``np.int8(128.0)`` in a test's harness, say) is not a verdict: a mistake whose only symptom it is counts as
"wrong stage", not as rejected. A mistake that really does raise (a power of two that overflows) says so with
``stage=RUNNING``.
"""

from __future__ import annotations

import ast
import copy
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RUNNING = "running your code"  # the stage of an exception in the attendee's code (``utilities.checker``)

_BEGIN = re.compile(r"^\s*# BEGIN SOLUTION\s*$")
_END = re.compile(r"^\s*# END SOLUTION\s*$")

_BINOPS: dict[type, tuple[type, ...]] = {
    ast.Add: (ast.Sub,),
    ast.Sub: (ast.Add,),
    ast.Mult: (ast.Div, ast.Add),
    ast.Div: (ast.Mult,),
    ast.FloorDiv: (ast.Div, ast.Mod),
    ast.Mod: (ast.FloorDiv,),
    ast.LShift: (ast.RShift,),
    ast.RShift: (ast.LShift,),
    ast.BitAnd: (ast.BitOr,),
    ast.BitOr: (ast.BitAnd,),
    ast.Pow: (ast.Mult,),
}
_CMPOPS: dict[type, tuple[type, ...]] = {
    ast.Lt: (ast.LtE, ast.Gt),
    ast.LtE: (ast.Lt, ast.GtE),
    ast.Gt: (ast.GtE, ast.Lt),
    ast.GtE: (ast.Gt, ast.LtE),
    ast.Eq: (ast.NotEq,),
    ast.NotEq: (ast.Eq,),
}

# Calls whose first two arguments commute, by the called name (``fma``, ``math.fma``, ``cuda.fma``, ``np.maximum``):
# a product's two factors (exact: one rounding of the same product), the two operands of a minimum, a maximum or a
# hypotenuse (only a NaN operand, or zeros of two signs, could tell the orders apart). Swapping them gives a mutant
# equivalent by construction, so none is made.
COMMUTATIVE = frozenset({"fma", "min", "max", "fmin", "fmax", "minimum", "maximum", "hypot"})


def called_name(call: ast.Call) -> str:
    """The last name of what ``call`` calls: ``fma`` for ``fma(...)``, ``math.fma(...)`` and ``cuda.fma(...)``."""
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


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
                    yield (
                        node,
                        f"statement dropped: {ast.unparse(stmt).splitlines()[0][:60]}",
                        (lambda n, name=name, i=i: getattr(n, name).__setitem__(i, ast.Pass())),
                        stmt.lineno,
                    )


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
        yield (
            "first two indices swapped",
            lambda n: n.slice.elts.__setitem__(slice(0, 2), [n.slice.elts[1], n.slice.elts[0]]),
        )
    elif (
        isinstance(node, ast.Call)
        and len(node.args) >= 2
        and not any(isinstance(a, ast.Starred) for a in node.args)
        and called_name(node) not in COMMUTATIVE
    ):
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


@dataclass(frozen=True)
class Mistake:
    """A realistic wrong implementation of an exercise: ``old`` replaced once by ``new`` in its solution source.

    ``exercise`` names it as the mutation tools do (``"3a slice_number"``; a name without the tool's parenthesised
    suffix matches too), ``kind`` sorts it (``edge``, ``hard-coded count``, ``swapped axes``, ``rounding order``,
    ``beta = 0``, ...), ``what`` says what goes wrong. ``message``, when given, is a piece of text the checker's
    message must hold: the rejection must name the mistake, not only happen. ``stage``, when given, is the stage
    the rejection must name (:func:`counts_as_verdict`); without it any stage but :data:`RUNNING` counts.
    """

    exercise: str
    kind: str
    what: str
    old: str
    new: str
    message: str = ""
    stage: str = ""

    def apply(self, source: str) -> str:
        return replace_once(source, self.old, self.new, f"{self.exercise}: {self.what}")


@dataclass(frozen=True)
class Alternative:
    """A correct implementation other than the solution (``old`` replaced once by ``new``): the checker must pass it."""

    exercise: str
    what: str
    old: str
    new: str

    def apply(self, source: str) -> str:
        return replace_once(source, self.old, self.new, f"{self.exercise}: {self.what}")


def replace_once(source: str, old: str, new: str, label: str = "") -> str:
    """``source`` with ``old`` replaced by ``new``; ``old`` must occur exactly once."""
    found = source.count(old)
    if found != 1:
        raise ValueError(
            f"{label}: the text to replace occurs {found} times in the solution source, not once: {old[:80]!r}"
        )
    return source.replace(old, new)


def exercise_key(name: str) -> str:
    """The name an exercise goes by in ``tools/mistakes``: without the tools' parenthesised suffix."""
    return name.split(" (")[0].strip()


def load_mistakes(folder: Path) -> tuple[list[Mistake], list[Alternative]]:
    """Every ``MISTAKES`` and ``CORRECT`` entry of the ``*.py`` files in ``folder`` (each file run on its own)."""
    import importlib.util

    mistakes: list[Mistake] = []
    alternatives: list[Alternative] = []
    for path in sorted(Path(folder).glob("*.py")):
        if path.name.startswith("_"):
            continue
        spec = importlib.util.spec_from_file_location(f"mistakes_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        mistakes += list(getattr(module, "MISTAKES", []))
        alternatives += list(getattr(module, "CORRECT", []))
    return mistakes, alternatives


def for_exercise(items: list[Any], exercise: str) -> list[Any]:
    """The entries of ``items`` (mistakes or alternatives) that belong to ``exercise``."""
    return [item for item in items if exercise_key(item.exercise) == exercise_key(exercise)]


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
        return (
            f"{self.exercise}: {len(self.rejected)} rejected, {len(self.survived)} survived, "
            f"{len(self.equivalent)} equivalent: score {100 * self.score:.0f}%"
        )


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


# ------------------------------------------------------------------------------------------------------------
# Semantic mutants: mistakes and alternatives, over several seeds
# ------------------------------------------------------------------------------------------------------------


def stage_name(stage: str) -> str:
    """A failure's stage without its detail: ``"d1"`` for ``"d1 (batch 2)"``."""
    return stage.split(" (")[0].strip()


def counts_as_verdict(stage: str, want: str = "") -> bool:
    """Whether a CheckFailure of ``stage`` is the checker's verdict on a mistake that breaks stage ``want`` ("":
    any stage but :data:`RUNNING`, whose failures only pass an exception on)."""
    return stage_name(stage) == want if want else stage_name(stage) != RUNNING


@dataclass
class Verdict:
    """What a checker did with one semantic mutant over the seeds.

    Mistakes: ``rejected`` (every seed, by a verdict of the right stage, with the mistake's message text),
    ``misnamed`` (every seed, the right stage, but a message without that text), ``wrong stage`` (every seed, but
    by a failure of another stage: an exception passed on, say), ``some seeds``, ``missed``, ``does not build`` or
    ``error`` (the check itself raised something other than CheckFailure). Alternatives: ``accepted`` (every seed)
    or ``false alarm``.
    """

    exercise: str
    kind: str
    what: str
    status: str
    message: str = ""

    def line(self) -> str:
        return f"{self.status}: {self.kind}: {self.what}" + (
            f" ({self.message.splitlines()[0]})" if self.message else ""
        )


def run_check(check: Callable[..., Any], obj: Any, seed: int) -> None:
    """``check(obj, seed=seed)``, or ``check(obj)`` when the check takes no seed."""
    import inspect

    try:
        takes_seed = "seed" in inspect.signature(check).parameters
    except (TypeError, ValueError):
        takes_seed = False
    if takes_seed:
        check(obj, seed=seed)
    else:
        check(obj)


def _seeds_for(check: Callable[..., Any], seeds: tuple[int, ...]) -> tuple[int, ...]:
    import inspect

    try:
        return seeds if "seed" in inspect.signature(check).parameters else seeds[:1]
    except (TypeError, ValueError):
        return seeds[:1]


def judge(
    item: Mistake | Alternative,
    source: str,
    build: Callable[[str], Any],
    check: Callable[..., Any],
    seeds: tuple[int, ...],
) -> Verdict:
    """Build ``item`` from the exercise's ``source`` and run the check on every seed (see :class:`Verdict`)."""
    from .checker import CheckFailure

    kind = item.kind if isinstance(item, Mistake) else "alternative"
    try:
        obj = build(item.apply(source))
    except Exception as error:
        return Verdict(item.exercise, kind, item.what, "does not build", f"{type(error).__name__}: {error}")
    failures: list[CheckFailure] = []
    for seed in _seeds_for(check, seeds):
        try:
            run_check(check, obj, seed)
        except CheckFailure as failure:
            failures.append(failure)
        except Exception as error:
            return Verdict(item.exercise, kind, item.what, "error", f"{type(error).__name__}: {error}")
    tried = len(_seeds_for(check, seeds))
    if isinstance(item, Alternative):
        return Verdict(
            item.exercise,
            kind,
            item.what,
            "false alarm" if failures else "accepted",
            str(failures[0]) if failures else "",
        )
    if not failures:
        return Verdict(item.exercise, kind, item.what, "missed")
    if len(failures) < tried:
        return Verdict(item.exercise, kind, item.what, "some seeds", f"{len(failures)} of {tried}: {failures[0]}")
    return Verdict(item.exercise, kind, item.what, sort_rejection(item, failures), str(failures[0]))


def sort_rejection(item: Mistake, failures: list[Any]) -> str:
    """``rejected``, ``wrong stage`` or ``misnamed`` for a mistake that every seed rejected with ``failures``
    (CheckFailures, or ``(stage, message)`` pairs from the GPU tool)."""
    pairs = [(f.stage, str(f)) if hasattr(f, "stage") else (f[0], f[1]) for f in failures]
    if not all(counts_as_verdict(stage, getattr(item, "stage", "")) for stage, _ in pairs):
        return "wrong stage"
    return "rejected" if all(item.message in text for _, text in pairs) else "misnamed"


@dataclass
class SemanticScore:
    """The semantic mutants of one exercise: its mistakes' and its alternatives' verdicts."""

    exercise: str
    mistakes: list[Verdict] = field(default_factory=list)
    alternatives: list[Verdict] = field(default_factory=list)

    @property
    def score(self) -> float | None:
        """Mistakes rejected on every seed with their message, of all mistakes (None without any)."""
        return sum(v.status == "rejected" for v in self.mistakes) / len(self.mistakes) if self.mistakes else None

    @property
    def holes(self) -> list[Verdict]:
        """Mistakes not rejected with their message, and alternatives not accepted."""
        return [v for v in self.mistakes if v.status != "rejected"] + [
            v for v in self.alternatives if v.status != "accepted"
        ]

    def line(self) -> str:
        rejected = sum(v.status == "rejected" for v in self.mistakes)
        accepted = sum(v.status == "accepted" for v in self.alternatives)
        return (
            f"{self.exercise}: {rejected} of {len(self.mistakes)} mistakes rejected on every seed, "
            f"{accepted} of {len(self.alternatives)} alternatives accepted"
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "mistakes": len(self.mistakes),
            "rejected": sum(v.status == "rejected" for v in self.mistakes),
            "score": self.score,
            "holes": [v.line() for v in self.mistakes if v.status != "rejected"],
            "alternatives": len(self.alternatives),
            "accepted": sum(v.status == "accepted" for v in self.alternatives),
            "false_alarms": [v.line() for v in self.alternatives if v.status != "accepted"],
            "verdicts": [
                {"kind": v.kind, "what": v.what, "status": v.status} for v in self.mistakes + self.alternatives
            ],
        }


def evaluate_semantic(
    exercise: str,
    source: str,
    build: Callable[[str], Any],
    check: Callable[..., Any],
    mistakes: list[Mistake],
    alternatives: list[Alternative],
    seeds: tuple[int, ...],
) -> SemanticScore:
    """Judge every mistake and alternative of ``exercise`` (those of the lists that name it)."""
    return SemanticScore(
        exercise,
        [judge(m, source, build, check, seeds) for m in for_exercise(mistakes, exercise)],
        [judge(a, source, build, check, seeds) for a in for_exercise(alternatives, exercise)],
    )


def syntactic_json(score: Score) -> dict[str, Any]:
    """A syntactic score as ``results/mutation-*.json`` holds it."""
    return {
        "rejected": len(score.rejected),
        "survived": len(score.survived),
        "equivalent": len(score.equivalent),
        "score": score.score,
        "survivors": [f"line {m.line}: {m.what}" for m in score.survived],
        "equivalents": [f"line {m.line}: {m.what}" for m in score.equivalent],
    }

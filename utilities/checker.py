"""The checker core: how every exercise's checker compares, reports and tells unfinished from wrong.

NumPy only (importable with the course's base dependencies). The checkers themselves live with their track
(``utilities.<track>.check``); each runs the attendee's code on fresh random inputs (the seed is printed, so a
failure can be replayed with ``seed=``) and on adversarial ones, compares every stage it can see with the
NumPy reference, and then either

- prints one pass line (:func:`passed`),
- prints "not implemented yet" for an untouched skeleton (:func:`not_yet`), so that an exercise notebook still
  runs to the end, or
- raises :class:`CheckFailure` (an AssertionError, so nbval and pytest see it) naming the stage, the first
  mismatching indices with got/expected values (printed as plain numbers), and a hint (:func:`compare`).

Each checker states its domain (what it feeds: counts, layouts, shapes, ranges, special values) and feeds the
corners of that domain on every run beside the random inputs, so that its verdict does not depend on the seed. A
failure is diagnosed by its cause where the cause can be told from the symptom: an output that is NaN only because
the C handed in was NaN says "C was read although beta = 0" (:func:`c_read_when_beta_is_zero`); a CUDA error raised
while running the attendee's kernel says what in a kernel causes it (:func:`explain_error`).

A result handed back inside a guard band (``utilities.guard``: the output allocated in the middle of a poisoned
canvas) is read with :func:`output`, which fails the stage, naming the place, when the code wrote outside it.

A checker declared with :func:`checker` takes ``exercise=``: the attendee's functions (kernel factories) whose
source an exercise notebook marked with :data:`PLACEHOLDER` lines. A failure is reported as unfinished only
while a TODO region that the failing stage depends on still holds its placeholder: a wrong first stage is
reported as wrong even while later regions are untouched. A GPU checker declared with a ``driver`` also takes
``sanitize=True``: after a pass it runs the exercise functions through the driver under compute-sanitizer
(``utilities.sanitizer``) and fails naming the race or the bad access it reports. A checker declared with
``shared=True`` (its exercise is a kernel whose threads share memory) looks for races without being asked: its
driver's smallest case runs under racecheck and synccheck on every check on a GPU, beside the check itself
(:class:`RaceCheck`), and a missing or misplaced barrier fails the stage "sanitizer".

A hint is a tested hypothesis: a checker names a cause only when it re-ran the reference with the suspected
mistake and got the attendee's result, or classified the failing entry (an integer or a float overflow, a tap
inside the image or in its padding); otherwise its message names the stage and the first wrong entries alone.
"""

from __future__ import annotations

import atexit
import functools
import inspect
import os
import re
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .beside_checks import kernels_off_gpu, switched_off
from .guard import Written

# The marker that ends every skeleton line of an exercise notebook (``utilities.notebooks`` writes it).
PLACEHOLDER = "# placeholder: your code replaces this line"

MAX_SHOWN = 5


class CheckFailure(AssertionError):
    """A stage of the attendee's code disagrees with the reference."""

    def __init__(self, stage: str, message: str):
        super().__init__(message)
        self.stage = stage


@dataclass
class CheckResult:
    name: str
    status: str  # "passed" or "not implemented"
    cases: int = 0
    seed: int | None = None
    why: str = ""  # for "not implemented": what looked untouched

    def __bool__(self) -> bool:
        return self.status == "passed"

    def _ipython_display_(self) -> None:
        """Nothing: the check printed its one-line verdict; an ``Out`` value under it would only repeat it."""


def fresh_seed(seed: int | None = None) -> int:
    return secrets.randbelow(2**31) if seed is None else int(seed)


# ------------------------------------------------------------------------------------------------------------
# Generic comparison
# ------------------------------------------------------------------------------------------------------------


def plain(value: Any) -> str:
    """A value as an attendee reads it: ``2`` and ``0.348``, not ``np.int64(2)`` and ``np.float16(0.348)``."""
    if isinstance(value, np.bool_ | bool):
        return str(bool(value))
    if isinstance(value, np.integer):
        return str(int(value))
    if isinstance(value, np.floating):
        return str(value)  # NumPy's shortest repr for the value's own precision (0.348 for an FP16 0.348)
    if isinstance(value, np.ndarray | list | tuple):
        items = ", ".join(plain(v) for v in value)
        return f"({items})" if isinstance(value, tuple) else f"[{items}]"
    return repr(value)


def _format_index(index: tuple[int, ...], names: Sequence[str] | None) -> str:
    if names and len(names) == len(index):
        return ", ".join(f"{n} {i}" for n, i in zip(names, index, strict=True))
    return ", ".join(str(i) for i in index)


def mismatch_report(
    stage: str,
    got: np.ndarray,
    expected: np.ndarray,
    bad: np.ndarray,
    *,
    names: Sequence[str] | None = None,
    hint: str = "",
    case: str = "",
    bound: np.ndarray | None = None,
) -> str:
    where = np.argwhere(bad)
    lines = [
        f"stage '{stage}'" + (f" on input '{case}'" if case else "") + f": {len(where)} of {bad.size} entries wrong"
    ]
    for idx in where[:MAX_SHOWN]:
        t = tuple(int(i) for i in idx)
        line = f"  at ({_format_index(t, names)}): got {plain(got[t])}, expected {plain(expected[t])}"
        if bound is not None:
            line += f" (allowed difference {float(bound[t]):.3g})"
        lines.append(line)
    if len(where) > MAX_SHOWN:
        lines.append(f"  ... and {len(where) - MAX_SHOWN} more")
    if hint:
        lines.append(f"hint: {hint}")
    return "\n".join(lines)


def compare(
    stage: str,
    got: Any,
    expected: np.ndarray,
    *,
    bound: np.ndarray | float | None = None,
    names: Sequence[str] | None = None,
    hint: str = "",
    case: str = "",
) -> None:
    """Raise :class:`CheckFailure` unless ``got`` equals ``expected`` (or is within ``bound``, elementwise).

    NaN matches NaN and an infinity only the same infinity (a bound never excuses a non-finite entry); shapes and
    dtypes are checked first.
    """
    got = np.asarray(got)
    expected = np.asarray(expected)
    if got.shape != expected.shape:
        raise CheckFailure(stage, f"stage '{stage}': shape {got.shape}, expected {expected.shape}" + _hint(hint))
    if got.dtype.kind != expected.dtype.kind or (expected.dtype.kind in "iu" and got.dtype != expected.dtype):
        raise CheckFailure(stage, f"stage '{stage}': dtype {got.dtype}, expected {expected.dtype}" + _hint(hint))
    floating = expected.dtype.kind == "f"
    both_nan = np.isnan(got) & np.isnan(expected) if floating else np.zeros(got.shape, bool)
    if bound is None:
        bad = (got != expected) & ~both_nan
    else:
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.abs(got.astype(np.float64) - expected.astype(np.float64))
        bound = np.broadcast_to(np.asarray(bound, dtype=np.float64), got.shape)
        bad = ~((diff <= bound) | (got == expected)) & ~both_nan
        if floating:
            special = ~np.isfinite(expected) | ~np.isfinite(got)
            bad = np.where(special, (got != expected) & ~both_nan, bad)
    if bad.any():
        raise CheckFailure(
            stage,
            mismatch_report(
                stage, got, expected, bad, names=names, hint=hint, case=case, bound=None if bound is None else bound
            ),
        )


def _hint(hint: str) -> str:
    return f"\nhint: {hint}" if hint else ""


OUTSIDE_HINT = (
    "a store that nothing bounds: check `if row < m and col < n` (the output's own shape, not a tile's) before "
    "each write, take each tile's offset from the right block index, and store a partial last tile entry by entry; "
    "a write past the output lands in memory that belongs to something else (on a GPU: often the next row's first "
    "entries, which the block that owns them may or may not overwrite later)"
)


def output(value: Any, stage: str, case: str = "") -> np.ndarray:
    """The attendee's result as an array. A :class:`~utilities.guard.Written` (an output that lived in a guard
    band) fails ``stage`` with the place of every entry written outside it."""
    if isinstance(value, tuple):
        return tuple(output(v, stage, case) for v in value)  # type: ignore[return-value]
    if isinstance(value, Written):
        outside = value.outside()
        if outside:
            on = f" on input '{case}'" if case else ""
            raise CheckFailure(
                stage, f"stage '{stage}'{on}: your code wrote outside its output: {outside}\nhint: {OUTSIDE_HINT}"
            )
        return value.value
    return np.asarray(value)


def untouched(got: Any, poison: float | int = 0) -> bool:
    """True when every entry still holds ``poison`` (what an unfinished skeleton leaves behind)."""
    got = np.asarray(got)
    if got.dtype.kind == "f" and isinstance(poison, float) and np.isnan(poison):
        return bool(np.isnan(got).all())
    return bool((got == poison).all())


def passed(name: str, cases: int, seed: int, domain: str = "") -> CheckResult:
    """Print the pass line of checker ``name`` (and the domain it covered, when given) and return its result."""
    print(f"✓ {name}: passed on {cases} inputs (seed {seed})" + (f"\n  checked: {domain}" if domain else ""))
    return CheckResult(name, "passed", cases, seed)


def not_yet(name: str, what: str) -> CheckResult:
    """Print the "not implemented yet" line of checker ``name`` (``what`` says why) and return its result."""
    print(f"… {name}: not implemented yet ({what})")
    return CheckResult(name, "not implemented", why=what)


# ------------------------------------------------------------------------------------------------------------
# Diagnosis by cause
# ------------------------------------------------------------------------------------------------------------

C_READ = "C was read although beta = 0"


def c_read_when_beta_is_zero(
    stage: str,
    got: Any,
    expected: np.ndarray,
    rerun: Callable[[], Any],
    *,
    c_name: str = "C",
    beta_name: str = "beta",
    names: Sequence[str] | None = None,
    case: str = "",
) -> None:
    """Raise :class:`CheckFailure` saying that C was read, when that is why ``got`` is wrong.

    ``got`` was computed with beta = 0 and a C full of NaN, which must not be read (BLAS: with beta = 0, C is never
    read, so NaN or garbage in it cannot show). ``rerun()`` computes the same with a C of zeros. When ``got`` holds
    NaN where ``expected`` is finite and the rerun does not, the NaN came from C: the message says so, whatever else
    is wrong. Returns quietly otherwise (the caller then compares as usual).
    """
    got = np.asarray(got)
    if got.shape != np.shape(expected) or got.dtype.kind != "f":
        return
    nan = np.isnan(got) & np.isfinite(expected)
    if not nan.any():
        return
    again = np.asarray(rerun())
    if again.shape != got.shape or np.isnan(again[nan]).any():
        return
    what = C_READ.replace("C", c_name, 1).replace("beta", beta_name)
    first = tuple(int(i) for i in np.argwhere(nan)[0])
    raise CheckFailure(
        stage,
        f"stage '{stage}'" + (f" on input '{case}'" if case else "") + f": {what}: {int(nan.sum())} of {nan.size} "
        f"entries are NaN with a {c_name} full of NaN and are not with a {c_name} of zeros (the first at "
        f"({_format_index(first, names)}))\nhint: with {beta_name} = 0 the result is alpha * (the product) alone: "
        f"do not load {c_name} at all (0 * NaN is NaN, so multiplying it by {beta_name} = 0 does not help); read it "
        f"only under `if {beta_name} != 0`",
    )


ALPHA_ZERO = (
    "alpha = 0 (any beta): C = beta C (0 when beta = 0), A and B unread as reference BLAS's quick return leaves them, "
    "or read: where a line of A or B holds a NaN or an Inf (or alpha's product overflows), C may be NaN, as alpha "
    "(A B) makes it, or beta C; an early exit that leaves C unwritten or drops beta C is wrong"
)


def quick_return(got: Any, want: np.ndarray, alpha: float, beta: float, c: np.ndarray | None) -> np.ndarray:
    """``want`` with reference BLAS's quick return accepted where alpha = 0 (:data:`ALPHA_ZERO`): an entry that alpha
    (A B) makes NaN may hold beta C instead (0 when beta = 0), as it is where BLAS reads neither A nor B. Elsewhere,
    and for any other alpha, ``want`` as it is."""
    got = np.asarray(got)
    if alpha != 0.0 or got.shape != np.shape(want) or got.dtype.kind != "f":
        return want
    quick = np.zeros(np.shape(want)) if beta == 0.0 or c is None else float(beta) * np.asarray(c, np.float64)
    return np.where(np.isnan(want) & (got == quick), quick, want)


def alpha_zero_hint(got: Any, want: np.ndarray, alpha: float, beta: float, written: float = np.nan) -> str:
    """The hint of an alpha = 0 mistake, recomputed: C left unwritten (every entry still ``written``, the poison) or
    beta C dropped (every entry 0 where beta C is not); "" for any other result, or alpha != 0."""
    got = np.asarray(got, np.float64)
    if alpha != 0.0 or got.shape != np.shape(want):
        return ""
    finite = np.isfinite(want)
    unwritten = np.isnan(got) if np.isnan(written) else got == written
    if finite.any() and unwritten[finite].all():
        return "with alpha = 0 C was left unwritten: C = beta C then (0 when beta = 0); write it, do not return early"
    if beta != 0.0 and finite.any() and (got[finite] == 0).all() and (want[finite] != 0).any():
        return "with alpha = 0 C came out 0: C = beta C then; an early exit must still scale C by beta"
    return ""


# What in a kernel causes each CUDA error (the driver's name; the runtime's cudaErrorXxx maps to the same).
CUDA_CAUSES = {
    "ILLEGAL_ADDRESS": "an access outside an array: an index past its end (a missing `if i < m` bound check, a row "
    "and column index swapped, a tile offset computed from the wrong block index), or a pointer into freed memory",
    "MISALIGNED_ADDRESS": "a vector access (a 16-byte copy) from an address that is not a multiple of its size: a "
    "tile offset that is not a multiple of the tile, or a view that starts at an odd element",
    "LAUNCH_OUT_OF_RESOURCES": "the kernel needs more registers per thread (or shared memory) than its launch "
    "allows: a new local array, values kept alive across a long loop, int64 or float64 where int32 or float32 did, "
    "or a conversion with a slow path (float to int64 of a large value) raise the register count; with "
    "launch_bounds the compiler must fit the block, without it the block may be too large for what it compiled",
    "INVALID_VALUE": "a launch the GPU refuses: more than 1024 threads per block, more dynamic shared memory than "
    "the kernel was allowed (set its maximum first), or a grid dimension of 0",
    "ILLEGAL_INSTRUCTION": "an instruction the GPU cannot execute: most often a barrier (syncthreads, copy_wait) "
    "that not every thread of the block reaches, because it sits inside a branch or a loop with per-thread bounds",
    "ASSERT": "an assert in the kernel failed",
    "LAUNCH_TIMEOUT": "the kernel ran too long: a loop that never ends, or a barrier some threads never reach",
    "LAUNCH_FAILED": "the kernel faulted: see ILLEGAL_ADDRESS and ILLEGAL_INSTRUCTION",
}
_RUNTIME_NAMES = {
    "IllegalAddress": "ILLEGAL_ADDRESS",
    "MisalignedAddress": "MISALIGNED_ADDRESS",
    "LaunchOutOfResources": "LAUNCH_OUT_OF_RESOURCES",
    "InvalidValue": "INVALID_VALUE",
    "IllegalInstruction": "ILLEGAL_INSTRUCTION",
    "Assert": "ASSERT",
    "LaunchTimeout": "LAUNCH_TIMEOUT",
    "LaunchFailure": "LAUNCH_FAILED",
}
_CUDA_ERROR = re.compile(r"CUDA_ERROR_(?P<driver>[A-Z_]+)|cudaError(?P<runtime>[A-Za-z]+)")
STICKY_CUDA_ERRORS = ("ILLEGAL_ADDRESS", "MISALIGNED_ADDRESS", "ILLEGAL_INSTRUCTION", "ASSERT", "LAUNCH_FAILED")


def cuda_error_name(error: BaseException) -> str | None:
    """The CUDA error an exception reports (``ILLEGAL_ADDRESS``...), from its message, or None."""
    match = _CUDA_ERROR.search(f"{type(error).__name__}: {error}")
    if match is None:
        return None
    return match["driver"] or _RUNTIME_NAMES.get(match["runtime"], match["runtime"])


def explain_error(error: BaseException) -> str:
    """A hint naming what in a kernel causes ``error`` (a CUDA error or numba's typing errors), or a generic one."""
    name = cuda_error_name(error)
    if name is not None:
        cause = CUDA_CAUSES.get(name, "an error the GPU reported while running your kernel")
        hint = f"CUDA_ERROR_{name} while running your kernel: {cause}"
        if name in STICKY_CUDA_ERRORS:
            hint += ". The GPU context is now unusable: restart the notebook's kernel, then run the cells again"
        return hint
    kind = type(error).__name__
    if isinstance(error, OverflowError):
        return overflow_hint(error)
    if isinstance(error, ZeroDivisionError):
        return (
            "a division by zero: a divisor that underflowed to 0 (2.0 ** n is 0 for n < -1074; rows at the ends "
            "of the FP64 range need shifts from -1073 to 1025), or a count that is 0"
        )
    if isinstance(error, IndexError):
        return (
            "an index past the end of an array: a row and a column index swapped, or a loop bound that is not "
            "the array's own length (a hard-coded count)"
        )
    if kind in ("TypingError", "LoweringError", "UnsupportedError", "NumbaError"):
        return (
            "numba could not compile your kernel: the message names the line and the types it could not handle "
            "(a Python list or dict, a float used as an index: int() it, a variable given two types, a name "
            "that is not defined in the kernel)"
        )
    return "the traceback above this message ends in the line of your code that raised"


# What an OverflowError's message says about its cause: an integer that does not fit its type (NumPy refusing
# np.int8(200), a Python int past int64), or a double past DBL_MAX (2.0 ** 1100, math.ldexp, math.exp).
_INTEGER_OVERFLOW = re.compile(
    r"out of bounds for u?int\d+|too (large|big) to convert|int too big|Python int too large|"
    r"cannot fit 'int'|can't convert negative (int|value) to unsigned|overflow in (integer|int)",
    re.I,
)
_FLOAT_OVERFLOW = re.compile(r"math range error|Numerical result out of range|\(34,|float infinity", re.I)


def overflow_hint(error: OverflowError) -> str:
    """The hint of an OverflowError, by the kind its message names: an integer past its type's range, or a double
    past DBL_MAX; neither named, no guess."""
    text = str(error)
    match = _INTEGER_OVERFLOW.search(text)
    if match:
        return (
            f"an integer does not fit its type ({match.group(0)}): a value kept in too narrow an integer (an int8 "
            "or uint8 array for values beyond [-128, 127] or [0, 255], an int32 or int64 sum that outgrows it); "
            "keep the value in the type its range needs (int64, or Python ints / float64 for sums beyond 2^63), "
            "and narrow it only where it is known to fit"
        )
    if _FLOAT_OVERFLOW.search(text):
        return (
            "a value beyond DBL_MAX: a power of two such as 2.0 ** n overflows for n > 1023 (rows at the ends of "
            "the FP64 range need shifts from -1073 to 1025); math.ldexp(x, n) scales in one exact step"
        )
    return "a value that does not fit its type: the traceback above this message ends in the line that raised"


_TODO = re.compile(r"^\s*# TODO\b(?P<text>.*)$")


@dataclass(frozen=True)
class Region:
    """One TODO region of an exercise function: its TODO line and whether a placeholder line is still there."""

    function: str
    todo: str
    unfinished: bool


def todo_regions(fn: Any) -> list[Region]:
    """The TODO regions of ``fn``'s source in order; a region runs from its ``# TODO`` line to the next one.

    A region is unfinished while a line of it still ends with :data:`PLACEHOLDER`. A function whose source
    cannot be read has no regions.
    """
    try:
        source = inspect.getsource(inspect.unwrap(fn))
    except (OSError, TypeError):
        return []
    name = getattr(fn, "__name__", "the exercise")
    regions: list[Region] = []
    todo, unfinished = None, False
    for line in source.split("\n"):
        match = _TODO.match(line)
        if match:
            if todo is not None:
                regions.append(Region(name, todo, unfinished))
            todo, unfinished = match["text"].strip(" :"), False
        elif todo is not None and line.rstrip().endswith(PLACEHOLDER):
            unfinished = True
    if todo is not None:
        regions.append(Region(name, todo, unfinished))
    return regions


def untouched_exercise(*functions: Any) -> str | None:
    """The name of the first function whose source still holds a placeholder line, else None."""
    for fn in functions:
        if fn is None:
            continue
        try:
            source = inspect.getsource(inspect.unwrap(fn))
        except (OSError, TypeError):
            continue
        if PLACEHOLDER in source:
            return getattr(fn, "__name__", "the exercise")
    return None


def hard_coded_bounds(*functions: Any) -> list[str]:
    """The loops of ``functions`` whose bound is a number (``for i in range(64)``), each as "name: its line": in a
    kernel whose factory computes its sizes from the block (a fragment's F0, a tile's TK), such a bound is right at
    one block only, and past a fragment's end it writes nothing any result shows."""
    from .sanitizer import source_of

    found = []
    for fn in functions:
        if fn is None:
            continue
        try:
            source = source_of(fn)
        except (OSError, TypeError):
            continue
        name = getattr(fn, "__name__", "the exercise")
        found += [f"{name}: {line}" for line in literal_bounds(source)]
    return found


SIZE_FLOOR = 16  # the smallest size a block sets in the course's kernels (a fragment, a tile); below it, a loop's
# number is a word's width or the like (3b's four bytes of a word), the same at every block


def literal_bounds(source: str) -> list[str]:
    """The lines of ``source`` (Python) holding a ``range`` whose end is a number of :data:`SIZE_FLOOR` or more."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    lines = source.splitlines()
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range"):
            continue
        stop = node.args[1] if len(node.args) >= 2 else node.args[0] if node.args else None
        if isinstance(stop, ast.Constant) and isinstance(stop.value, int) and stop.value >= SIZE_FLOOR:
            found.append(lines[node.lineno - 1].strip())
    return found


def unfinished_for(stage: str, functions: Sequence[Any], needs: Mapping[str, Any] | None) -> str | None:
    """Why a failure of ``stage`` is an unfinished exercise, or None when it is a wrong one.

    ``needs[stage]`` says which TODO regions of ``functions`` the stage depends on: an int, that many regions
    counted in order across the functions; a tuple of function names, every region of those functions. A stage
    missing from ``needs`` depends on all of them. The answer names the first unfinished region it depends on.
    """
    functions = [fn for fn in functions if fn is not None]
    regions = [region for fn in functions for region in todo_regions(fn)]
    want = None if needs is None else needs.get(stage.split(" (")[0])
    if isinstance(want, int):
        regions = regions[:want]
    elif want is not None:
        regions = [region for region in regions if region.function in want]
    elif not regions:  # no TODO lines to go by: any placeholder left means unfinished
        name = untouched_exercise(*functions)
        return None if name is None else f"{name} still has its placeholder line"
    for region in regions:
        if region.unfinished:
            return f"{region.function}: TODO '{region.todo}' still has its placeholder line"
    return None


def _exercises(fn: Any, exercise: Any) -> list[Any]:
    return [fn, *(exercise if isinstance(exercise, list | tuple) else [exercise])]


Contract = Callable[[tuple, dict], Sequence[tuple[tuple, dict]]]


def checker(
    name: str,
    needs: Mapping[str, Any] | None = None,
    driver: Callable[..., str] | None = None,
    shared: bool = False,
    contract: Contract | None = None,
    bounds: bool = False,
) -> Callable[[Callable[..., CheckResult]], Callable[..., CheckResult]]:
    """Declare a checker: it gains an ``exercise=`` keyword (the attendee's functions, in pipeline order), and with a
    ``driver`` the keywords ``sanitize=`` and ``races=``.

    - A :class:`CheckFailure` of a stage whose TODO regions (``needs``, see :func:`unfinished_for`) still hold a
      placeholder is reported as "not implemented yet" instead of raised.
    - An exception from the attendee's code becomes a :class:`CheckFailure` of the stage "running your code",
      with the exception's type and message (the traceback stays chained to it).
    - "Not implemented yet" (an all-zero result, say) stands only while some exercise function still holds its
      placeholder: code without one that leaves its result unwritten is wrong, and is reported as such.
    - ``sanitize=True`` (checkers with a ``driver``): after a pass, ``driver(exercise, *args, **kwargs)`` gives the
      code that builds the plan with the exercise functions and runs it once at the check's shape; it runs under
      compute-sanitizer (:func:`sanitize_exercise`), and a race or a bad access fails the stage "sanitizer".
    - ``shared=True`` (the exercise is a kernel whose threads share memory; with a ``driver``): without being asked,
      ``driver(exercise, *args, small=True, **kwargs)``, the check's smallest case, runs under racecheck and
      synccheck beside the check (:class:`RaceCheck`); ``races=False`` skips it for one call. With ``bounds=True``
      memcheck runs beside them: a read past an operand that no result shows (a prefetch past the end of K) fails.
    - ``contract(args, kwargs)`` (with a ``driver``): the arguments of the driver at every block the notebook checks
      the exercise at, given one check's. A loop bound written as a number in the exercise fails the stage
      "parameters" at once (:func:`hard_coded_bounds`): past a fragment's end no result may show it. On a GPU, the
      first check of new code builds the others' kernels beside it (``utilities.contract_builds``) and starts their
      race runs (:class:`RacesAhead`); a later check of the same code waits for them and finds its kernel built.
    """
    if (shared or contract is not None) and driver is None:
        raise TypeError(f"{name}: shared=True or a contract needs a driver (the code that runs the exercise's kernel)")

    def wrap(body: Callable[..., CheckResult]) -> Callable[..., CheckResult]:
        @functools.wraps(body)
        def run(
            fn: Any, *args: Any, exercise: Any = None, sanitize: bool = False, races: bool = True, **kwargs: Any
        ) -> CheckResult:
            if sanitize and driver is None:
                raise TypeError(f"{name} has no sanitizer run: it checks no kernel of yours")
            given = [f for f in (exercise if isinstance(exercise, list | tuple) else [exercise]) if f is not None]
            race = None
            if shared and races and not sanitize and given:
                tools = sanitizer_tools(bounds)
                race = RaceCheck(name, lambda: driver(given, *args, small=True, **kwargs), given, tools)
            literal = hard_coded_bounds(*given) if contract is not None else []
            if literal:
                raise CheckFailure(
                    "parameters",
                    f"stage 'parameters' of {name}: a loop bound written as a number, in {literal[0]}\n"
                    "hint: this kernel is checked at blocks of other sizes (its contract), where a fragment or a tile "
                    "holds another count: loop to the size the factory computes (F0, F1, TK...), not to its value at "
                    "one block",
                )
            ahead = race.tools if race and not race_check_skipped()[0] else ()  # no race run: none ahead either
            ahead_of = contract and not sanitize
            code = _build_ahead(name, driver, contract, given, args, kwargs, ahead) if ahead_of else None
            try:
                if race:
                    race.begin()
                result = _run(fn, *args, exercise=exercise, **kwargs)
            except BaseException:
                if race:
                    race.cancel()
                _cancel_builds(code)
                raise
            finally:
                if ahead_of:
                    _warm_spares()  # after the check's own build: ready for the next edit
            if result.status != "passed":
                _cancel_builds(code)
                if race:
                    race.cancel()
            elif sanitize and given:
                sanitize_exercise(name, given, driver(given, *args, **kwargs))
            elif race:
                race.finish()
            return result

        def _run(fn: Any, *args: Any, exercise: Any = None, **kwargs: Any) -> CheckResult:
            functions = _exercises(fn, exercise)
            try:
                result = body(fn, *args, **kwargs)
            except CheckFailure as failure:
                why = unfinished_for(failure.stage, functions, needs)
                if why:
                    return not_yet(name, why)
                raise
            except Exception as error:  # the attendee's code raised: name it as a stage of its own
                why = unfinished_for("running your code", functions, needs)
                if why:
                    return not_yet(name, why)
                raise CheckFailure(
                    "running your code",
                    f"stage 'running your code': {type(error).__name__}: {error}\nhint: {explain_error(error)}",
                ) from error
            if result.status != "passed" and untouched_exercise(*functions) is None:
                raise CheckFailure(
                    "result",
                    f"stage 'result' of {name}: {result.why}, but your code has no placeholder line left: "
                    "it runs and does not write its result (or writes only zeros)",
                )
            return result

        run.driver, run.shared, run.contract, run.bounds = driver, shared, contract, bounds  # type: ignore[attr-defined]
        return run

    return wrap


def _build_ahead(
    name: str, driver: Any, contract: Contract, given: list[Any], args: tuple, kwargs: dict, tools: Sequence[str] = ()
) -> str | None:
    """The first check of new code starts the builds of the contract's other blocks, and with ``tools`` (the check's
    race run) their race runs too; a later one waits for the builds and takes over its race run. Returns the code's
    key (None: nothing built ahead here, or code still holding a placeholder)."""
    from . import contract_builds, sanitizer

    if not given or contract_builds.skipped():
        return None
    if untouched_exercise(*given) is not None:
        return None  # the skeleton's check: nothing to build (the spares warm after it)
    try:
        blocks = contract(args, kwargs)
        texts = [driver(given, *a, **kw) for a, kw in blocks]
        code, scripts = contract_builds.scripts_for(given, texts, driver(given, *args, **kwargs))
        smalls = [driver(given, *a, small=True, **kw) for a, kw in blocks] if tools else []
        own = driver(given, *args, small=True, **kwargs) if tools else ""
    except (sanitizer.NotRebuilt, OSError, TypeError):
        return None  # the race run says why, where it matters
    builds = contract_builds.BUILDS
    if code not in builds.by_code:
        builds.start(code, scripts)
        if tools:
            RACES_AHEAD.start(code, given, smalls, tools, own=own)
    elif builds.running(code):
        waited = builds.wait(code)
        if waited >= 1.0:
            print(f"… {name}: {waited:.0f} s waiting for your kernel at this block, built beside the first check")
    return code


def _warm_spares() -> None:
    """Interpreters ready for the next edit's builds, where builds run ahead (``contract_builds.Builds.warm``)."""
    from . import contract_builds

    if not contract_builds.skipped():
        contract_builds.BUILDS.warm()


def _cancel_builds(code: str | None) -> None:
    if code is not None:
        from . import contract_builds

        contract_builds.BUILDS.cancel(code)
        RACES_AHEAD.cancel(code)


# ------------------------------------------------------------------------------------------------------------
# Races by default
# ------------------------------------------------------------------------------------------------------------

# The verdict of every race run of this process, by its script (the attendee's sources and the smallest case): a
# check called again on the same code (3b's three plans, say) is not run again.
RACE_VERDICTS: dict[str, tuple[str, str]] = {}


class RacesAhead:
    """The race runs of a contract's other blocks, started with the first check of new code (beside the builds of
    those blocks, whose kernels their scripts wait for and load): a later check at one of those blocks takes its run
    over, half done or done, instead of starting it after the first check has passed. ``start`` is
    ``utilities.sanitizer.start``'s form (a test passes a stand-in)."""

    def __init__(self, start: Callable[..., Any] | None = None) -> None:
        self.starter = start
        self.by_text: dict[str, tuple[str, Any, tuple[str, ...]]] = {}  # a script's text: (its code, run, tools)

    def start(self, code: str, functions: Sequence[Any], drivers: Sequence[str], tools: Sequence[str], own: str) -> int:
        """Start the race run of every block's driver but ``own`` (the check's own run starts with it), once per
        script; runs of other code are stopped (an edit made them useless). Returns the runs started."""
        from . import sanitizer

        for text, (other, _, _) in list(self.by_text.items()):
            if other != code:
                self.by_text.pop(text)[1].cancel()
        starter = self.starter or sanitizer.start
        started = 0
        for driver in dict.fromkeys(d for d in drivers if d != own):
            try:
                text = sanitizer.script(functions, driver, sanitizer.PREAMBLE)
            except (sanitizer.NotRebuilt, OSError, TypeError):
                continue
            if text in RACE_VERDICTS or text in self.by_text:
                continue
            pending = starter(text, tools=tuple(tools))
            if pending is not None:
                self.by_text[text] = (code, pending, tuple(tools))
                started += 1
        return started

    def take(self, text: str, tools: Sequence[str]) -> Any:
        """The run of ``tools`` started ahead for the script ``text`` (None: none was), now the caller's: its time
        limit counts from now, as a run started now would."""
        entry = self.by_text.get(text)
        if entry is None or entry[2] != tuple(tools):
            return None
        del self.by_text[text]
        pending = entry[1]
        if hasattr(pending, "clock") and hasattr(pending, "timeout"):
            pending.timeout += pending.clock() - pending.started
        return pending

    def cancel(self, code: str | None = None) -> None:
        """Stop the runs of ``code`` (its check failed: the attendee edits again), or every run (None: the process
        ends)."""
        for text, (other, _, _) in list(self.by_text.items()):
            if code is None or other == code:
                self.by_text.pop(text)[1].cancel()


RACES_AHEAD = RacesAhead()
atexit.register(RACES_AHEAD.cancel)  # a block no check took: its run ends with the notebook's kernel


def race_check_skipped(
    environ: Mapping[str, str] | None = None, modules: Mapping[str, Any] | None = None
) -> tuple[str, bool]:
    """Why the default race run does not run here, and whether to say so; ("", False) when it runs: where the
    check's kernels ran on a GPU (:func:`kernels_off_gpu`; compute-sanitizer watches a GPU). ``COURSE_RACECHECK=off``
    turns it off, and the check says so."""
    from .sanitizer import RACE_ENV

    environ = os.environ if environ is None else environ
    if switched_off(RACE_ENV, environ):
        return f"{RACE_ENV}={environ[RACE_ENV]}", True
    return kernels_off_gpu(environ, modules), False


def race_wait(environ: Mapping[str, str] | None = None) -> float:
    """Seconds a passed check waits at most for its race run (``COURSE_RACECHECK_WAIT``, else
    ``utilities.sanitizer.RACE_WAIT``); past them the run is stopped and the check says races were not checked."""
    from .sanitizer import RACE_WAIT

    environ = os.environ if environ is None else environ
    try:
        return max(0.0, float(environ.get("COURSE_RACECHECK_WAIT", RACE_WAIT)))
    except ValueError:
        return RACE_WAIT


def sanitizer_tools(bounds: bool) -> tuple[str, ...]:
    """The tools of a check's default run: racecheck and synccheck, and memcheck with ``bounds``."""
    from .sanitizer import BOUNDS_TOOLS, RACE_TOOLS

    return BOUNDS_TOOLS if bounds else RACE_TOOLS


def _found_nothing(tools: Sequence[str]) -> str:
    """What a clean run of ``tools`` says it did not find."""
    if "memcheck" in tools:
        return "no race, no barrier error and no access outside an array"
    return "no race and no barrier error"


class RaceCheck:
    """The default race run of one check (:func:`checker` with ``shared=True``): racecheck and synccheck on the
    check's smallest case, started in the background with the check, and read when the check has passed. Its script
    builds the attendee's kernel as the check does: while the check's process builds it, the script's waits for that
    build and loads it from the build cache (``buildcache.dispatch``: a build claims the kernel's fingerprint), so
    its imports and start-up run beside the check's build instead of after it.

    ``script()`` gives the driver's code; ``functions`` are the attendee's (their sources go into the script)."""

    def __init__(
        self, name: str, script: Callable[[], str], functions: Sequence[Any], tools: Sequence[str] = ()
    ) -> None:
        self.name, self.script, self.functions = name, script, list(functions)
        self.tools = tuple(tools) or sanitizer_tools(False)
        self.pending: Any = None
        self.text = ""
        self.note = ""  # why nothing runs, when the check should say so
        self.started = False

    def begin(self) -> None:
        """Start the race run; a failure to start is never the attendee's (the check goes on, saying so)."""
        if self.started:
            return
        self.started = True
        try:
            self.start()
        except Exception as error:
            self.note = f"races not checked: {type(error).__name__}: {error}"

    def start(self) -> None:
        from . import sanitizer

        why, say = race_check_skipped()
        if why:
            self.note = f"races not checked ({why})" if say else ""
            return
        try:
            self.text = sanitizer.script(self.functions, self.script(), sanitizer.PREAMBLE)
        except (sanitizer.NotRebuilt, OSError, TypeError) as error:
            self.note = f"races not checked: {error}"
            return
        if self.text in RACE_VERDICTS:
            return
        self.pending = RACES_AHEAD.take(self.text, self.tools) or sanitizer.start(self.text, tools=self.tools)
        if self.pending is None:
            self.note = f"races not checked: {sanitizer.MISSING.split('; the sanitizer run')[0]}"

    def cancel(self) -> None:
        if self.pending is not None:
            self.pending.cancel()
            self.pending = None

    def finish(self) -> None:
        """After a pass: wait for the tools, fail the stage "sanitizer" on a race or a barrier error, else print one
        line (the seconds the run took, and those the check waited for it)."""
        from . import sanitizer

        if self.note:
            print(f"… {self.name}: {self.note}")
            return
        if not self.text:
            return
        before = RACE_VERDICTS.get(self.text)
        if before is None and self.pending is None:
            return
        if before is None:
            waited = time.monotonic()
            reports = self.pending.reports(wait=race_wait())
            waited = time.monotonic() - waited
            verdict, message = sanitizer.race_outcome(reports)
            if verdict != "not checked":  # a time-out or a failed script may pass another time
                RACE_VERDICTS[self.text] = (verdict, message)
            seconds = f"{self.pending.seconds:.0f} s, {waited:.0f} s of it after the check"
            self.pending = None
        else:
            (verdict, message), seconds = before, "checked before, same code"
        tools = ", ".join(self.tools[:-1]) + f" and {self.tools[-1]}" if len(self.tools) > 1 else self.tools[0]
        if verdict == "found":
            raise CheckFailure(
                "sanitizer",
                f"stage 'sanitizer' of {self.name}: compute-sanitizer ({tools}, on the check's smallest case) "
                f"reported\n{message}",
            )
        if verdict == "not checked":
            print(f"… {self.name}: races not checked: {message}")
            return
        print(f"✓ {self.name}: {_found_nothing(self.tools)} under compute-sanitizer {tools} ({seconds})")


def sanitize_exercise(name: str, functions: Sequence[Any], driver: str, **options: Any) -> None:
    """Run ``functions`` through ``driver`` under compute-sanitizer; raise :class:`CheckFailure` (stage
    "sanitizer") naming what it found, print one line otherwise (also when the tool is missing)."""
    from . import sanitizer

    clean, message = sanitizer.sanitize(name, functions, driver, **options)
    if not clean:
        raise CheckFailure("sanitizer", f"stage 'sanitizer' of {name}: compute-sanitizer reported\n{message}")
    print(message)

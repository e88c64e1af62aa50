"""The checkers that exercises call: which stage is wrong, at which indices, with which values, and a hint.

Every checker runs the attendee's code on fresh random inputs (the seed is printed, so a failure can be
replayed with ``seed=``) and on adversarial ones, compares each stage it can see with the NumPy reference,
and then either

- prints one pass line,
- prints "not implemented yet" for an untouched skeleton (so an exercise notebook still runs to the end), or
- raises :class:`CheckFailure` (an AssertionError, so nbval and pytest see it) naming the stage, the first
  mismatching indices with got/expected values, and a hint.

Every checker takes ``exercise=``: the attendee's functions (kernel factories) whose source an exercise
notebook marked with placeholder lines; a failure while one is still there is reported as unfinished.

Stages are compared exactly where the algorithm is exact (shifts, int8 digits, int32 products and diagonals)
and within a stated bound otherwise (the FP64 epilogue: the last bit may differ when the GPU fuses
``alpha * x + beta * c`` into one FMA).
"""

from __future__ import annotations

import functools
import inspect
import secrets
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import inputs, ozaki
from .notebooks import PLACEHOLDER

MAX_SHOWN = 5
U = 2.0**-53


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

    def __bool__(self) -> bool:
        return self.status == "passed"


def fresh_seed(seed: int | None = None) -> int:
    return secrets.randbelow(2**31) if seed is None else int(seed)


# ------------------------------------------------------------------------------------------------------------
# Generic comparison
# ------------------------------------------------------------------------------------------------------------


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
        line = f"  at ({_format_index(t, names)}): got {got[t]!r}, expected {expected[t]!r}"
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

    NaN matches NaN; shapes and dtypes are checked first.
    """
    got = np.asarray(got)
    expected = np.asarray(expected)
    if got.shape != expected.shape:
        raise CheckFailure(stage, f"stage '{stage}': shape {got.shape}, expected {expected.shape}" + _hint(hint))
    if got.dtype.kind != expected.dtype.kind or (expected.dtype.kind in "iu" and got.dtype != expected.dtype):
        raise CheckFailure(stage, f"stage '{stage}': dtype {got.dtype}, expected {expected.dtype}" + _hint(hint))
    both_nan = np.isnan(got) & np.isnan(expected) if expected.dtype.kind == "f" else np.zeros(got.shape, bool)
    if bound is None:
        bad = (got != expected) & ~both_nan
    else:
        with np.errstate(invalid="ignore"):
            diff = np.abs(got.astype(np.float64) - expected.astype(np.float64))
        bound = np.broadcast_to(np.asarray(bound, dtype=np.float64), got.shape)
        bad = ~(diff <= bound) & ~both_nan
    if bad.any():
        raise CheckFailure(
            stage,
            mismatch_report(
                stage, got, expected, bad, names=names, hint=hint, case=case, bound=None if bound is None else bound
            ),
        )


def _hint(hint: str) -> str:
    return f"\nhint: {hint}" if hint else ""


def untouched(got: Any, poison: float | int = 0) -> bool:
    """True when every entry still holds ``poison`` (what an unfinished skeleton leaves behind)."""
    got = np.asarray(got)
    if got.dtype.kind == "f" and isinstance(poison, float) and np.isnan(poison):
        return bool(np.isnan(got).all())
    return bool((got == poison).all())


def _done(name: str, cases: int, seed: int) -> CheckResult:
    print(f"✓ {name}: passed on {cases} inputs (seed {seed})")
    return CheckResult(name, "passed", cases, seed)


def _not_yet(name: str, what: str) -> CheckResult:
    print(f"… {name}: not implemented yet ({what})")
    return CheckResult(name, "not implemented")


def untouched_exercise(*functions: Any) -> str | None:
    """The name of the first function whose source still holds an exercise placeholder line, else None.

    Exercise notebooks mark every skeleton line with ``utilities.notebooks.PLACEHOLDER``: a wrong result from a
    function that still has one is an unfinished exercise, not a wrong one.
    """
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


class _Unfinished(Exception):
    pass


def _guard(name: str, fn: Any, exercise: Any, body: Callable[[], CheckResult]) -> CheckResult:
    """Run a checker's body; a failure of code that still holds a placeholder is reported as unfinished."""
    exercises = list(exercise) if isinstance(exercise, list | tuple) else [exercise]
    try:
        return body()
    except CheckFailure:
        unfinished = untouched_exercise(fn, *exercises)
        if unfinished:
            return _not_yet(name, f"{unfinished} still has its placeholder line")
        raise


def _unfinished_aware(name: str) -> Callable[[Callable[..., CheckResult]], Callable[..., CheckResult]]:
    """Give a checker an ``exercise=`` keyword: the attendee's functions whose placeholders mark it unfinished."""

    def wrap(body: Callable[..., CheckResult]) -> Callable[..., CheckResult]:
        @functools.wraps(body)
        def checker(fn: Any, *args: Any, exercise: Any = None, **kwargs: Any) -> CheckResult:
            return _guard(name, fn, exercise, lambda: body(fn, *args, **kwargs))

        return checker

    return wrap


def _cases(m: int, k: int, n: int, seed: int) -> Iterable[tuple[str, np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    yield "random normal", inputs.normal(m, k, int(rng.integers(2**31))), inputs.normal(k, n, int(rng.integers(2**31)))
    yield (
        "exponent spread phi=2",
        inputs.exponent_spread(m, k, 2.0, int(rng.integers(2**31))),
        inputs.exponent_spread(k, n, 2.0, int(rng.integers(2**31))),
    )
    yield from inputs.adversarial_pairs(m, k, n, seed)


# ------------------------------------------------------------------------------------------------------------
# Ozaki-I, stage by stage
# ------------------------------------------------------------------------------------------------------------

SLICE_NAMES = ("slice", "row", "col")


@_unfinished_aware("slice one number")
def check_slice_number(fn: Callable[[float, int, int], Sequence[int]], *, seed: int | None = None) -> CheckResult:
    """``fn(x, e, slices)`` returns the balanced base-256 digits of x (digit s weighs 2^(e - 7 - 8s))."""
    name, seed = "slice one number", fresh_seed(seed)
    rng = np.random.default_rng(seed)
    ties = [5 / 256, -5 / 256, 2.5 * 2.0**-23, 2.5 * 2.0**-55]  # the last digit of 1, 3 or 7 slices is a tie
    xs = [1.0, -1.0, 0.3, -0.3, 127 / 128, -(2.0**-55 + 2.0**-66), 2.0**-1074, *ties, *rng.standard_normal(20)]
    if all(not any(fn(float(x), 1, 7)) for x in xs[:4]):
        return _not_yet(name, "all digits are zero")
    for x in xs:
        for slices in (1, 3, 7, 9):
            e = int(ozaki.row_shifts(np.array([[x, 0.9]]))[0])
            got = np.asarray(list(fn(float(x), e, slices)), dtype=np.int64)
            want = ozaki.slice_rows(np.array([[x, 0.9]]), slices)[0][:, 0, 0].astype(np.int64)
            compare(
                "digits of one number", got, want, names=("digit",), case=f"x = {x!r}, e = {e}, {slices} slices",
                hint="t = ldexp(x, 7 - e); peel off integer parts toward zero, scale the rest by 256; round the last; "
                "then carry so that every digit lies in [-128, 127]",
            )  # fmt: skip
    return _done(name, len(xs) * 4, seed)


@_unfinished_aware("anti-diagonal terms")
def check_diagonal_terms(
    fn: Callable[[int, int], Sequence[tuple[int, int]]], *, seed: int | None = None
) -> CheckResult:
    """``fn(d, slices)`` lists the products (s, t) on anti-diagonal d, s ascending."""
    name = "anti-diagonal terms"
    if not list(fn(3, 7)):
        return _not_yet(name, "diagonal 3 has no terms")
    for slices in range(1, 11):
        for d in range(slices):
            got = [tuple(map(int, p)) for p in fn(d, slices)]
            want = [p for p in ozaki.product_terms(slices) if sum(p) == d]
            if got != want:
                raise CheckFailure(
                    name,
                    f"stage '{name}': diagonal {d} with {slices} slices gave {got}, expected {want}\n"
                    "hint: s runs from 0 to d and t = d - s; both stay below the number of slices",
                )
    return _done(name, 55, 0)


def _stage_fn_result(fn: Callable[..., Any], *args: Any) -> Any:
    out = fn(*args)
    return tuple(np.asarray(o) for o in out) if isinstance(out, tuple) else np.asarray(out)


@_unfinished_aware("slicing")
def check_slicing(
    fn: Callable[[np.ndarray, int], tuple[Any, Any]], slices: int = 7, *, seed: int | None = None
) -> CheckResult:
    """``fn(a, slices)`` returns ``(a_slices (S, m, k) int8, e (m,) int32)``: the row slicing of A."""
    name, seed = "slicing", fresh_seed(seed)
    count = 0
    for case, a, _ in _cases(37, 300, 5, seed):
        got_slices, got_e = _stage_fn_result(fn, a, slices)
        want_slices, want_e = ozaki.slice_rows(a, slices)
        if count == 0 and a.any() and untouched(got_slices):
            return _not_yet(name, "every digit is zero")
        compare(
            "exponent shifts", got_e, want_e, names=("row",), case=case,
            hint="e is the smallest integer with max|row| <= (127/128) 2^e; use frexp, bump e when the mantissa "
            "exceeds 127/128, and 0 for an all-zero row",
        )  # fmt: skip
        compare(
            "slices", got_slices, want_slices, names=SLICE_NAMES, case=case,
            hint="digit s of x weighs 2^(e - 7 - 8s); truncate toward zero (floor is not exact for negative x), "
            "round the last digit to nearest even, carry into [-128, 127]",
        )  # fmt: skip
        count += 1
    return _done(name, count, seed)


@_unfinished_aware("anti-diagonal sums")
def check_diagonals(
    fn: Callable[[np.ndarray, np.ndarray], Any], slices: int = 7, *, seed: int | None = None
) -> CheckResult:
    """``fn(a_slices, b_slices)`` returns the int32 anti-diagonal sums (S, m, n)."""
    name, seed = "anti-diagonal sums", fresh_seed(seed)
    count = 0
    for case, a, b in _cases(33, 96, 40, seed):
        st = ozaki.ozaki_stages(a, b, slices)
        got = _stage_fn_result(fn, st.a_slices, st.b_slices)
        if count == 0 and st.diagonals.any() and untouched(got):
            return _not_yet(name, "every diagonal is zero")
        compare(
            "anti-diagonal sums", got, st.diagonals, names=("diagonal", "row", "col"), case=case,
            hint="diagonal d sums A_s @ B_t over s + t == d (b_slices[t] is B_t transposed); accumulate in int32",
        )  # fmt: skip
        count += 1
    return _done(name, count, seed)


def epilogue_bound(x: np.ndarray, c: np.ndarray | None, alpha: float, beta: float) -> np.ndarray:
    """Allowed difference in the epilogue: none but the final alpha/beta rounding (a fused multiply-add)."""
    scale = np.abs(alpha * x) + (np.abs(beta * c) if beta != 0 and c is not None else 0.0)
    return 2 * U * scale + np.finfo(np.float64).smallest_subnormal


@_unfinished_aware("FP64 epilogue")
def check_epilogue(fn: Callable[..., Any], slices: int = 7, *, seed: int | None = None) -> CheckResult:
    """``fn(diagonals, e, f, alpha, beta, c)`` returns C (float64)."""
    name, seed = "FP64 epilogue", fresh_seed(seed)
    rng = np.random.default_rng(seed)
    count = 0
    for case, a, b in _cases(29, 64, 31, seed):
        st = ozaki.ozaki_stages(a, b, slices)
        c = rng.standard_normal((a.shape[0], b.shape[1]))
        for alpha, beta in ((1.0, 0.0), (-1.5, 0.75)):
            c_arg = c.copy()
            if beta == 0.0:
                c_arg[0, 0] = np.nan  # must not be read
            got = _stage_fn_result(fn, st.diagonals, st.e, st.f, alpha, beta, c_arg)
            want = ozaki.reconstruct(st.diagonals, st.e, st.f, alpha, beta, c)
            if count == 0 and want.any() and untouched(got):
                return _not_yet(name, "C is all zero")
            compare(
                "FP64 epilogue", got, want, bound=epilogue_bound(want - beta * c, c, alpha, beta),
                names=("row", "col"), case=f"{case}, alpha={alpha}, beta={beta}",
                hint="add the diagonals from d = S-1 down to 0, each times 2^(-8d); then alpha * ldexp(acc, e_i + f_j "
                "- 14), and beta * C only when beta != 0",
            )  # fmt: skip
            count += 1
    return _done(name, count, seed)


@_unfinished_aware("Ozaki-I GEMM")
def check_ozaki_gemm(
    run: Callable[..., Any],
    slices: int = 7,
    *,
    shapes: Sequence[tuple[int, int, int]] = ((256, 256, 384), (200, 136, 392)),
    stages: Callable[[], dict[str, Any]] | None = None,
    seed: int | None = None,
    adversarial: bool = True,
) -> CheckResult:
    """``run(a, b, c, alpha, beta)`` returns C; ``stages()`` (optional) returns the intermediate arrays it kept.

    Stage names understood: ``e``, ``f``, ``a_slices``, ``b_slices``, ``diagonals`` or ``products``. They are
    compared first, so that a wrong slice is reported as a wrong slice rather than as a wrong C.
    """
    name, seed = "Ozaki-I GEMM", fresh_seed(seed)
    rng = np.random.default_rng(seed)
    count = 0
    for m, n, k in shapes:
        cases = list(_cases(m, k, n, seed + count))
        for case, a, b in cases if adversarial else cases[:2]:
            c = rng.standard_normal((m, n))
            alpha, beta = (1.0, 0.0) if count % 2 == 0 else (0.5, -2.0)
            got = np.asarray(run(a, b, c.copy(), alpha, beta))
            ref = ozaki.ozaki_stages(a, b, slices)
            want = ozaki.reconstruct(ref.diagonals, ref.e, ref.f, alpha, beta, c)
            kept = stages() if stages is not None else {}
            if count == 0 and want.any():
                blank = [s for s, v in kept.items() if s in _STAGE_ORDER and untouched(v)]  # shifts may be 0
                if blank:
                    return _not_yet(name, f"stage '{min(blank, key=_STAGE_ORDER.index)}' is all zero")
                if untouched(got) or untouched(got, float("nan")):
                    return _not_yet(name, "C is all zero or was not written")
            if kept:
                _compare_stages(kept, ref, slices, case)
            compare(
                "C", got, want, bound=epilogue_bound(want - beta * c, c, alpha, beta), names=("row", "col"),
                case=f"{case} {m}x{n}x{k}, alpha={alpha}, beta={beta}",
                hint="the stages before C agree with the reference: look at the epilogue (weights, shifts, alpha/beta)",
            )  # fmt: skip
            count += 1
    return _done(name, count, seed)


_STAGE_ORDER = ["a_slices", "b_slices", "products", "diagonals"]


def _compare_stages(kept: dict[str, Any], ref: ozaki.OzakiStages, slices: int, case: str) -> None:
    S, m, k = ref.a_slices.shape
    n = ref.b_slices.shape[1]
    view = {name: np.asarray(value) for name, value in kept.items()}
    if "e" in view:
        compare("exponent shifts of A", view["e"][:m], ref.e, names=("row",), case=case)
    if "f" in view:
        compare("exponent shifts of B", view["f"][:n], ref.f, names=("col",), case=case)
    if "a_slices" in view:
        compare("slices of A", view["a_slices"][:S, :m, :k], ref.a_slices, names=SLICE_NAMES, case=case)
    if "b_slices" in view:
        compare("slices of B", view["b_slices"][:S, :n, :k], ref.b_slices, names=("slice", "col", "row"), case=case)
    if "diagonals" in view:
        compare(
            "anti-diagonal sums", view["diagonals"][:, :m, :n], ref.diagonals, names=("diagonal", "row", "col"),
            case=case, hint="each diagonal d accumulates A_s @ B_t for s + t == d: check the loop bounds and indices",
        )  # fmt: skip
    if "products" in view:
        want = ozaki.slice_products(ref.a_slices, ref.b_slices)
        compare("slice products", view["products"][:, :m, :n], want, names=("product", "row", "col"), case=case)

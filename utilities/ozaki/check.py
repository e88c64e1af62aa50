"""Checkers of the Ozaki-I exercises (notebooks 3a-3d), stage by stage against the NumPy reference.

Stages are compared exactly where the algorithm is exact (shifts, int8 digits, int32 products and diagonals)
and within a stated bound otherwise (the FP64 epilogue: the last bit may differ when the GPU fuses
``alpha * x + beta * c`` into one FMA). Inputs: fresh random ones and ``utilities.inputs.adversarial_pairs``,
plus what a kernel must not get wrong silently: lines holding NaN or Inf (NaN in the affected rows and columns
of C), a C full of NaN when beta = 0 (it must not be read), anti-diagonal sums above 2^24 (an FP32 detour loses
bits), and slice counts on both sides of 8 (the GPU slicing splits the integer beyond 8 slices).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from .. import inputs
from ..checker import CheckFailure, CheckResult, checker, compare, fresh_seed, not_yet, passed, untouched
from ..rounding import epilogue_bound
from . import products as _products
from . import reference as _reference
from . import slicing as _slicing
from .epilogue import reconstruct

U = 2.0**-53
SLICE_NAMES = ("slice", "row", "col")
# The exercise functions each stage depends on (``utilities.checker.unfinished_for``): the shifts are the
# course's code; the digits come from split_digits; products and diagonals from the products kernels.
GEMM_NEEDS = {
    "exponent shifts of A": (),
    "exponent shifts of B": (),
    "slices of A": ("make_split_digits",),
    "slices of B": ("make_split_digits",),
    "slice products": ("make_split_digits", "make_products_kernel"),
    "anti-diagonal sums": ("make_split_digits", "make_products_kernel", "make_diagonals_kernel"),
}


def _cases(m: int, k: int, n: int, seed: int, nonfinite: bool = False) -> Iterable[tuple[str, np.ndarray, np.ndarray]]:
    """Random, spread-out and adversarial (A, B) pairs; with ``nonfinite``, also a pair holding NaN and Inf."""
    rng = np.random.default_rng(seed)
    yield "random normal", inputs.normal(m, k, int(rng.integers(2**31))), inputs.normal(k, n, int(rng.integers(2**31)))
    yield (
        "exponent spread phi=2",
        inputs.exponent_spread(m, k, 2.0, int(rng.integers(2**31))),
        inputs.exponent_spread(k, n, 2.0, int(rng.integers(2**31))),
    )
    yield from inputs.adversarial_pairs(m, k, n, seed)
    if nonfinite:
        yield "an Inf in a row of A, a NaN in a column of B", *inputs.nonfinite_lines(m, k, n, seed)


def _stage_fn_result(fn: Callable[..., Any], *args: Any) -> Any:
    out = fn(*args)
    return tuple(np.asarray(o) for o in out) if isinstance(out, tuple) else np.asarray(out)


def _slice_number_inputs(rng: np.random.Generator) -> list[tuple[float, float]]:
    """(x, row maximum) pairs: the row maximum sets the shift, so x may sit far below it (leading zero digits)."""
    ties = [5 / 256, -5 / 256, 2.5 * 2.0**-23, 2.5 * 2.0**-55]  # the last digit of 1, 3 or 7 slices is a tie
    ripples = [1 - 2.0**-40, -(1 - 2.0**-52), 127 / 128 - 2.0**-53, 0.5 - 2.0**-60, -(2.0**-8 - 2.0**-61)]
    pairs = [(x, 0.9) for x in (1.0, -1.0, 0.3, -0.3, 127 / 128, -(2.0**-55 + 2.0**-66), 2.0**-1074, *ties)]
    pairs += [(x, 0.9) for x in ripples]  # truncated digits of 255: carries ripple over several digits
    for v in (127, 128, 129, -127, -128, -129, 255, -255):  # a lower digit exactly at the carry's limits
        for depth in (1, 2, 5):
            pairs.append(((5 + v * 2.0 ** (-8 * depth)) / 128, 0.9))
            pairs.append(((-5 + v * 2.0 ** (-8 * depth)) / 128, 0.9))
    pairs += [(1e300, 1e300), (-3.7e-300, 1e-290), (-1.0, 1.0), (2.0**-40, 1.0), (3.0, 2.0**60)]
    for _ in range(20):
        x = float(rng.standard_normal()) * 2.0 ** float(rng.integers(-1000, 1000))
        pairs.append((x, abs(x) * 2.0 ** float(rng.integers(0, 30))))  # x up to 2^30 below its row maximum
    return pairs


@checker("slice one number")
def check_slice_number(fn: Callable[[float, int, int], Sequence[int]], *, seed: int | None = None) -> CheckResult:
    """``fn(x, e, slices)`` returns the balanced base-256 digits of x (digit s weighs 2^(e - 7 - 8s))."""
    name, seed = "slice one number", fresh_seed(seed)
    pairs = _slice_number_inputs(np.random.default_rng(seed))
    if all(not any(fn(x, 1, 7)) for x in (1.0, -1.0, 0.3, -0.3)):
        return not_yet(name, "all digits are zero")
    for x, row_max in pairs:
        for slices in (1, 3, 7, 9):
            row = np.array([[x, row_max]])
            e = int(_slicing.row_shifts(row)[0])
            got = np.asarray(list(fn(float(x), e, slices)), dtype=np.int64)
            want = _slicing.slice_rows(row, slices)[0][:, 0, 0].astype(np.int64)
            compare(
                "digits of one number", got, want, names=("digit",), case=f"x = {x!r}, e = {e}, {slices} slices",
                hint="t = ldexp(x, 7 - e); peel off integer parts toward zero, scale the rest by 256; round the last; "
                "then carry from the last digit to the first so that every digit lies in [-128, 127]: a digit above "
                "127 gives 1 to the next more significant digit (256 of its own units), one below -128 takes 1",
            )  # fmt: skip
    return passed(name, len(pairs) * 4, seed)


@checker("anti-diagonal terms")
def check_diagonal_terms(
    fn: Callable[[int, int], Sequence[tuple[int, int]]], *, seed: int | None = None
) -> CheckResult:
    """``fn(d, slices)`` lists the products (s, t) on anti-diagonal d, s ascending."""
    name = "anti-diagonal terms"
    if not list(fn(3, 7)):
        return not_yet(name, "diagonal 3 has no terms")
    for slices in range(1, 13):
        for d in range(slices):  # the diagonals Ozaki-I keeps
            got = [tuple(map(int, p)) for p in fn(d, slices)]
            want = [p for p in _products.product_terms(slices) if sum(p) == d]
            if got != want:
                raise CheckFailure(
                    name,
                    f"stage '{name}': diagonal {d} with {slices} slices gave {got}, expected {want}\n"
                    "hint: s runs from 0 to d and t = d - s; both stay below the number of slices",
                )
    return passed(name, sum(range(1, 13)), 0)


@checker("slicing")
def check_slicing(
    fn: Callable[[np.ndarray, int], tuple[Any, Any]],
    slices: int | Sequence[int] = (7, 8, 9, 10),
    *,
    seed: int | None = None,
) -> CheckResult:
    """``fn(a, slices)`` returns ``(a_slices (S, m, k) int8, e (m,) int32)``: the row slicing of A.

    Checked at every slice count of ``slices``; the default takes 7 and 8 and, past them, 9 and 10, where the GPU
    slicing splits its integer in two.
    """
    name, seed = "slicing", fresh_seed(seed)
    counts = [slices] if isinstance(slices, int) else list(slices)
    count = 0
    for s in counts:
        for case, a, _ in _cases(37, 300, 5, seed, nonfinite=True):
            got_slices, got_e = _stage_fn_result(fn, a, s)
            want_slices, want_e = _slicing.slice_rows(a, s)
            if count == 0 and a.any() and untouched(got_slices):
                return not_yet(name, "every digit is zero")
            label = f"{case}, {s} slices"
            compare(
                "exponent shifts", got_e, want_e, names=("row",), case=label,
                hint="e is the smallest integer with max|row| <= (127/128) 2^e; use frexp, bump e when the mantissa "
                "exceeds 127/128, and 0 for an all-zero row",
            )  # fmt: skip
            compare(
                "slices", got_slices, want_slices, names=SLICE_NAMES, case=label,
                hint="digit s of x weighs 2^(e - 7 - 8s); truncate toward zero (floor is not exact for negative x), "
                "round the last digit to nearest even, carry into [-128, 127]; beyond 8 slices N = rint(x 2^(8S-1-e)) "
                "no longer fits an int64: split it",
            )  # fmt: skip
            count += 1
    return passed(name, count, seed)


@checker("anti-diagonal sums")
def check_diagonals(
    fn: Callable[[np.ndarray, np.ndarray], Any], slices: int = 7, *, seed: int | None = None
) -> CheckResult:
    """``fn(a_slices, b_slices)`` returns the int32 anti-diagonal sums (S, m, n)."""
    name, seed = "anti-diagonal sums", fresh_seed(seed)
    count = 0
    for case, a, b in _cases(33, 96, 40, seed):
        st = _reference.ozaki_stages(a, b, slices)
        got = _stage_fn_result(fn, st.a_slices, st.b_slices)
        if count == 0 and st.diagonals.any() and untouched(got):
            return not_yet(name, "every diagonal is zero")
        compare(
            "anti-diagonal sums", got, st.diagonals, names=("diagonal", "row", "col"), case=case,
            hint="diagonal d sums A_s @ B_t over s + t == d (b_slices[t] is B_t transposed); accumulate in int32",
        )  # fmt: skip
        count += 1
    return passed(name, count, seed)


def _large_odd_diagonals(slices: int, m: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """Diagonal sums as large as an int32 accumulator holds, all odd: none is exact in FP32."""
    return (rng.integers(-(2**30), 2**30, (slices, m, n), dtype=np.int64) | 1).astype(np.int32)


@checker("FP64 epilogue")
def check_epilogue(fn: Callable[..., Any], slices: int = 7, *, seed: int | None = None) -> CheckResult:
    """``fn(diagonals, e, f, alpha, beta, c)`` returns C (float64)."""
    name, seed = "FP64 epilogue", fresh_seed(seed)
    rng = np.random.default_rng(seed)
    count = 0
    cases = [(case, _reference.ozaki_stages(a, b, slices)) for case, a, b in _cases(29, 64, 31, seed, nonfinite=True)]
    normal = cases[0][1]
    cases.append(("odd diagonal sums near 2^30", _reference.OzakiStages(
        normal.e, normal.f, normal.a_slices, normal.b_slices, _large_odd_diagonals(slices, 29, 31, rng))))  # fmt: skip
    for case, st in cases:
        c = rng.standard_normal((st.e.shape[0], st.f.shape[0]))
        for alpha, beta in ((1.0, 0.0), (-1.5, 0.75)):
            c_arg = np.full_like(c, np.nan) if beta == 0.0 else c.copy()  # with beta = 0, C must not be read
            got = _stage_fn_result(fn, st.diagonals, st.e, st.f, alpha, beta, c_arg)
            want = reconstruct(st.diagonals, st.e, st.f, alpha, beta, c)
            if count == 0 and want.any() and untouched(got):
                return not_yet(name, "C is all zero")
            compare(
                "FP64 epilogue", got, want, bound=epilogue_bound(want - beta * c, c, alpha, beta),
                names=("row", "col"), case=f"{case}, alpha={alpha}, beta={beta}",
                hint="add the diagonals from d = S-1 down to 0, each converted to FP64 (int32 -> float64, not through "
                "float32) times 2^(-8d); then alpha * ldexp(acc, e_i + f_j - 14), beta * C only when beta != 0, and "
                "NaN where a row or column shift is the non-finite sentinel",
            )  # fmt: skip
            count += 1
    return passed(name, count, seed)


_STAGE_ORDER = ["a_slices", "b_slices", "products", "diagonals"]


@checker("Ozaki-I GEMM", needs=GEMM_NEEDS)
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
    compared first, so that a wrong slice is reported as a wrong slice rather than as a wrong C. With beta = 0
    the C handed to ``run`` is all NaN: it must not be read.
    """
    name, seed = "Ozaki-I GEMM", fresh_seed(seed)
    rng = np.random.default_rng(seed)
    count = 0
    for m, n, k in shapes:
        cases = list(_cases(m, k, n, seed + count, nonfinite=True))
        for case, a, b in cases if adversarial else cases[:2]:
            c = rng.standard_normal((m, n))
            alpha, beta = (1.0, 0.0) if count % 2 == 0 else (0.5, -2.0)
            got = np.asarray(run(a, b, np.full_like(c, np.nan) if beta == 0.0 else c.copy(), alpha, beta))
            ref = _reference.ozaki_stages(a, b, slices)
            want = reconstruct(ref.diagonals, ref.e, ref.f, alpha, beta, c)
            kept = stages() if stages is not None else {}
            if count == 0 and want.any():
                blank = [s for s, v in kept.items() if s in _STAGE_ORDER and untouched(v)]  # shifts may be 0
                if blank:
                    return not_yet(name, f"stage '{min(blank, key=_STAGE_ORDER.index)}' is all zero")
                if untouched(got) or untouched(got, float("nan")):
                    return not_yet(name, "C is all zero or was not written")
            if kept:
                _compare_stages(kept, ref, case)
            compare(
                "C", got, want, bound=epilogue_bound(want - beta * c, c, alpha, beta), names=("row", "col"),
                case=f"{case} {m}x{n}x{k}, alpha={alpha}, beta={beta}",
                hint="the stages before C agree with the reference: look at the epilogue (weights, shifts, alpha/beta; "
                "C unread when beta = 0; NaN where a shift is the non-finite sentinel)",
            )  # fmt: skip
            count += 1
    return passed(name, count, seed)


def _compare_stages(kept: dict[str, Any], ref: _reference.OzakiStages, case: str) -> None:
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
        want = _products.slice_products(ref.a_slices, ref.b_slices)
        compare("slice products", view["products"][:, :m, :n], want, names=("product", "row", "col"), case=case)

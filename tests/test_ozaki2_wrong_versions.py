"""Ozaki-II's checkers (4a, 4b) against wrong versions written for issue 35 (not the course's mutants in
``tools/mistakes``): each is rejected on every seed, by the stage it breaks, with a message that names the mistake;
the correct alternatives pass. One of each kind the issue names: code that works on one shape only where the contract
allows any; a CRT sum kept in int64 (an integer overflow, which must not be sent to ldexp); a tie of p = 256 left
unfixed where a byte store would hide it; a negative digit handled wrongly; a reconstruction right for the digits
read early and wrong for the products read late; C read although beta = 0; a write outside the output.

4a's functions and 4b's device functions are built from the solution's source as ``tools/mutation_test.py`` builds
them; 4b's reconstruction is a NumPy stand-in for the kernel (the checker takes any function of its contract).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from utilities import mutants
from utilities.guard import Canvas
from utilities.ozaki2 import check
from utilities.ozaki2 import reference as ref

ROOT = Path(__file__).resolve().parent.parent
SEEDS = (1, 2, 3, 4, 5)


RESIDUE, CRT = "4a symmetric_residue", "4a crt_reconstruct"
DEVICE_RESIDUE, DIGIT = "4b residue (device function)", "4b digit (device function)"
_DIGIT_FLOOR = (  # the solution's floor(u / p) and its digit, as the device function writes them
    "q = round_near(u * INV[t] - BELOW)  # floor(u / p) by FP64 adds, not a slower conversion\n"
    "        return u - q * P[t]"
)
_BODY = """    r = np.mod(x.astype(np.int64), p)  # in [0, p)
    r = np.where(r > hi, r - p, r)
    return r.astype(np.float64)"""
_CRT_SUMS = "    s1, s2, s3 = (np.zeros(digits.shape[1:]) for _ in range(3))"
_CRT_BODY = """    c = ozaki2.crt(count)
    s1, s2, s3 = (np.zeros(digits.shape[1:]) for _ in range(3))
    for t in range(count):
        u = digits[t].astype(np.float64)
        s1 = s1 + u * c.c1[t]
        s2 = s2 + u * c.c2[t]
        s3 = s3 + u * c.c3[t]
    q = np.floor(s1 + 0.5)
    return ((s1 - q) + s2 + s3) * c.product_float"""
_CRT_INT64 = """    c = ozaki2.crt(count)
    big = c.product
    total = np.zeros(digits.shape[1:], np.int64)
    for t, p in enumerate(c.moduli):
        weight = np.int64(big // p)  # the CRT weight of digit t (y_t is in the digit), in int64
        total = (total + digits[t].astype(np.int64) * weight) % np.int64(big)
    return np.where(total > big // 2, total - big, total).astype(np.float64)"""

WRONG = [
    mutants.Mistake(RESIDUE, "contract", "a loop over x itself: right for 1-D x only",
                    old=_BODY, new="    return np.array([(int(v) - lo) % p + lo for v in x], dtype=np.float64)",
                    message="depends on one shape", stage="residues"),
    mutants.Mistake(RESIDUE, "contract", "returns the residues flattened", old="return r.astype(np.float64)",
                    new="return r.astype(np.float64).ravel()", message="of any shape", stage="residues"),
    mutants.Mistake(RESIDUE, "rounding", "x - round(x / p) p in FP64: x / p rounds past 2^53",
                    old=_BODY, new="    r = x - np.round(x / p) * p\n    return np.where(r > hi, r - p, r)",
                    message="2^53", stage="residues"),
    mutants.Mistake(CRT, "integer overflow", "the CRT sum in int64: the weights P / p_t y_t pass 2^63 from 8 moduli",
                    old=_CRT_BODY, new=_CRT_INT64, message="does not fit its type", stage=mutants.RUNNING),
    mutants.Mistake(CRT, "contract", "sums shaped for two trailing axes only", old=_CRT_SUMS,
                    new="    s1, s2, s3 = (np.zeros((digits.shape[1], digits.shape[2])) for _ in range(3))",
                    message="depends on one shape", stage="integers"),
    mutants.Mistake(DEVICE_RESIDUE, "edge", "the tie of p = 256 fixed for negative w only",
                    old="if EVEN[t] and r > HI[t]:", new="if EVEN[t] and r > HI[t] and w < 0:", message="at a tie",
                    stage="residue(w, t)"),
    mutants.Mistake(DIGIT, "convention", "a negative u made positive by its absolute value instead of adding p",
                    old=_DIGIT_FLOOR, new="q = round_near(u * INV[t])\n        return abs(u - q * P[t])",
                    message="made positive by its magnitude", stage="digits"),
]  # fmt: skip

RIGHT = [
    mutants.Alternative(RESIDUE, "the float remainder, then the top half down",
                        old="np.mod(x.astype(np.int64), p)", new="np.remainder(x, float(p))"),
    mutants.Alternative(CRT, "rint of s1", old="q = np.floor(s1 + 0.5)", new="q = np.rint(s1)"),
    mutants.Alternative(DEVICE_RESIDUE, "w / p rounded by Python's round (half to even, as round_near)",
                        old="r = w - round_near(w * INV[t]) * P[t]", new="r = w - round(w / P[t]) * P[t]"),
    mutants.Alternative(DIGIT, "floor(u / p) by math.floor of the rounded quotient",
                        old="q = round_near(u * INV[t] - BELOW)", new="q = math.floor(u / P[t])"),
]  # fmt: skip


@pytest.mark.parametrize("mistake", WRONG, ids=lambda m: m.what)
def test_each_wrong_version_is_rejected_on_every_seed_with_its_name(mistake, judged):
    verdict = judged(mistake, SEEDS)
    assert verdict.status == "rejected", verdict.line() + "\n" + verdict.message
    if mistake.kind == "integer overflow":
        assert "DBL_MAX" not in verdict.message and "ldexp" not in verdict.message


@pytest.mark.parametrize("alternative", RIGHT, ids=lambda a: a.what)
def test_each_correct_alternative_passes_on_every_seed(alternative, judged):
    verdict = judged(alternative, SEEDS)
    assert verdict.status == "accepted", verdict.line() + "\n" + verdict.message


# --- 4b's reconstruction: a NumPy stand-in for the kernel, both paths --------------------------------------------


def reconstruction(raw_planes: bool = False, read_c: bool = False, stray: bool = False):
    """``fn(planes, mu, nu, a, b, alpha, beta, c)`` as the kernel computes C, with the chosen mistakes:
    ``raw_planes`` weights the int32 products themselves (right for uint8 digits, which are their own u)."""

    def fn(planes, mu, nu, a, b, alpha, beta, c):
        count = planes.shape[0]
        late = planes.dtype == np.int32
        u = planes.astype(np.float64) if raw_planes or not late else ref.reduce_products(planes, count)
        with np.errstate(invalid="ignore", over="ignore"):
            out = ref.reconstruct(u, mu, nu, count, alpha, 0.0, None, a, b)
            if beta != 0.0 or read_c:
                out = out + beta * c
        if not stray:
            return out
        canvas = Canvas(out.shape, np.float64, fill=np.nan)
        canvas.out[...] = out
        canvas.buffer[canvas.guard - 1] = 0.0  # the entry before the first: a row index of -1 somewhere
        return canvas.written()

    return fn


@pytest.mark.parametrize(
    ("what", "fn", "says"),
    [
        ("the raw products weighted on the late path", reconstruction(raw_planes=True), "not the plane's own value"),
        ("C read when beta = 0", reconstruction(read_c=True), "C was read although beta = 0"),
        ("a store before the output", reconstruction(stray=True), "entries before the output"),
    ],
)
@pytest.mark.parametrize("seed", SEEDS)
def test_each_wrong_reconstruction_is_rejected_on_every_seed_with_its_name(what, fn, says, seed):
    with pytest.raises(check.CheckFailure) as info:
        check.check_reconstruction(fn, seed=seed)
    assert mutants.stage_name(info.value.stage) == "C" and says in str(info.value), str(info.value)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_right_reconstruction_passes_both_paths_on_every_seed(seed):
    assert check.check_reconstruction(reconstruction(), seed=seed).status == "passed"


# --- issue 41: the edges of the contract, the precision it demands, hints that recompute their mistake ------------


def sums_reconstruction(s3_dtype=np.float64, drop_s3: bool = False, alpha_zero: str = ""):
    """A stand-in that sums u c1, u c2, u c3 as the kernel does, with s3 kept in ``s3_dtype`` (or left out), and an
    alpha = 0 shortcut: ``"return"`` leaves C unwritten, ``"zero"`` writes 0, ``"quick"`` writes beta C (BLAS's
    quick return, reading neither A nor B: right)."""

    def fn(planes, mu, nu, a, b, alpha, beta, c):
        count = planes.shape[0]
        if alpha == 0.0 and alpha_zero:
            out = np.full(c.shape, np.nan)
            if alpha_zero == "zero":
                out[...] = 0.0
            elif alpha_zero == "quick":
                out[...] = beta * c if beta != 0.0 else 0.0
            return out
        u = planes.astype(np.float64) if planes.dtype != np.int32 else ref.reduce_products(planes, count)
        cr = ref.crt(count)
        s1, s2, s3 = np.zeros(c.shape), np.zeros(c.shape), np.zeros(c.shape, s3_dtype)
        for t in range(count):
            s1, s2 = s1 + u[t] * cr.c1[t], s2 + u[t] * cr.c2[t]
            s3 = (s3 + u[t] * cr.c3[t]).astype(s3_dtype)
        frac = (s1 - np.floor(s1 + 0.5)) + s2 + (0.0 if drop_s3 else s3.astype(np.float64))
        bad = (mu[:, None] == ref.NONFINITE_SHIFT) | (nu[None, :] == ref.NONFINITE_SHIFT)
        shift = np.where(bad, 0, -(mu[:, None].astype(np.int64) + nu[None, :].astype(np.int64)))
        with np.errstate(invalid="ignore", over="ignore"):
            out = alpha * np.ldexp(frac * cr.product_float, shift)
            native = alpha * (a @ b)
            if beta != 0.0:
                out, native = out + beta * c, native + beta * c
        return np.where(bad, native, out)

    return fn


@pytest.mark.parametrize(
    ("fn", "says"),
    [
        (sums_reconstruction(s3_dtype=np.float32), "the third sum is kept in float32"),
        (sums_reconstruction(drop_s3=True), "the third sum (u_t times the low part of 1/p_t) is left out"),
        (sums_reconstruction(alpha_zero="return"), "with alpha = 0 C was left unwritten"),
        (sums_reconstruction(alpha_zero="zero"), "with alpha = 0 C came out 0"),
    ],
    ids=["s3 in FP32", "s3 left out", "alpha = 0: C unwritten", "alpha = 0: beta C dropped"],
)
@pytest.mark.parametrize("seed", SEEDS[:3])
def test_a_low_order_sum_in_fp32_and_an_alpha_zero_shortcut_are_rejected_and_named(fn, says, seed):
    """Issue 41: an FP32 third sum passed, A'B' near P hiding it; lines whose A'B' cancels far below P show it."""
    with pytest.raises(check.CheckFailure) as info:
        check.check_reconstruction(fn, seed=seed)
    assert mutants.stage_name(info.value.stage) == "C" and says in str(info.value), str(info.value)


@pytest.mark.parametrize("seed", SEEDS[:3])
def test_blas_quick_return_and_the_sums_as_the_kernel_adds_them_pass(seed):
    assert check.check_reconstruction(sums_reconstruction(alpha_zero="quick"), seed=seed).status == "passed"
    assert check.check_reconstruction(sums_reconstruction(), seed=seed).status == "passed"


def test_quick_return_accepts_beta_c_only_where_alpha_times_ab_is_nan():
    from utilities.checker import quick_return

    want = np.array([[np.nan, 1.5], [np.nan, np.nan]])
    c = np.array([[2.0, 2.0], [4.0, 4.0]])
    got = np.array([[1.0, 1.5], [3.0, 7.0]])
    assert np.array_equal(
        quick_return(got, want, 0.0, 0.5, c), np.array([[1.0, 1.5], [np.nan, np.nan]]), equal_nan=True
    )
    assert quick_return(got, want, 1.0, 0.5, c) is want, "alpha != 0: DGEMM's NaN stands"
    assert np.array_equal(quick_return(np.zeros((2, 2)), want, 0.0, 0.0, None), [[0, 1.5], [0, 0]])


EDGES = [
    mutants.Mistake(RESIDUE, "fast path", "x itself where every |x| is below p (issue 41: inputs never fed)",
                    old=_BODY, new="    if np.abs(x).max() < p:\n        return x.astype(np.float64)\n" + _BODY,
                    message="small integers only"),
    mutants.Mistake(RESIDUE, "shape", "a loop over the first axis: a 0-d array has none",
                    old=_BODY, new="    return np.array([((int(v) - lo) % p + lo) for v in x], np.float64)",
                    message="0-d", stage="residues"),
    mutants.Mistake(RESIDUE, "edge", "folded at -HI: residues in [-127, 128] (issue 41: told to subtract p past HI)",
                    old="r = np.where(r > hi, r - p, r)",
                    new="r = np.where(r > hi, r - p, r)\n    r = np.where(r < -hi, r + p, r)",
                    message="the residues lie in [-127, 128]"),
    mutants.Mistake(CRT, "precision", "s3 kept in float32", old="s3 = s3 + u * c.c3[t]",
                    new="s3 = (s3 + u * c.c3[t]).astype(np.float32)", message="the third sum is kept in float32"),
    mutants.Mistake(CRT, "shape", "loops over the first trailing axis: one integer (no axis) fails",
                    old="    q = np.floor(s1 + 0.5)",
                    new="    s1 = np.array([v for v in s1])\n    q = np.floor(s1 + 0.5)",
                    message="0-D trailing", stage="integers"),
    mutants.Mistake(DIGIT, "sign", "the digit of |v| (issue 41: told to add p where u < 0)",
                    old="u = v * Y[t]", new="u = abs(v) * Y[t]", message="the digits of |v|"),
]  # fmt: skip


@pytest.mark.parametrize("mistake", EDGES, ids=lambda m: m.what)
def test_each_edge_or_precision_mistake_is_rejected_on_every_seed_with_its_name(mistake, judged):
    verdict = judged(mistake, SEEDS)
    assert verdict.status == "rejected", verdict.line() + "\n" + verdict.message
    assert "subtract p where it passes" not in verdict.message and "add p where u < 0" not in verdict.message

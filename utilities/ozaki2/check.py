"""Checkers of the Ozaki-II exercises (notebooks 4a and 4b), stage by stage against the NumPy reference.

Exact where the algorithm is exact: exponents, residues, int32 products and CRT digits. The reconstruction is
compared within its roundings (``c_bound``): a GPU fuses multiply-adds, in the double-double reconstruction and in
``alpha x + beta C``, and an attendee may add the partial sums in another order. Each checker states its domain
below and feeds the domain's corners on every run, beside fresh random inputs (so that a verdict does not depend on
the seed):

- ``check_residue`` (4a): x of any shape (1-D, 2-D and 3-D fed), float64 integers below 2^62, every modulus;
  corners: 0, +-1, both ends of the range and one past them, multiples of p and their neighbours, integers just
  past 2^53 and near 2^61 (where ``x - lo`` already rounds in FP64), the largest double below 2^62;
- ``check_crt`` (4a): every count the plans accept (2..20), digits with 1, 2 and 3 trailing axes; integers 0, +-1,
  +-2^t (the scaling's limit) and near it, small ones;
- ``check_scaling`` (4b, the residue device function): its own values on w of its whole domain (|w| < 2^47, every
  tie of p = 256: a byte store would turn a wrong 128 into the right -128), then inside the course's row kernel at
  2 and 20 moduli (every modulus; the smallest and the largest scaling); rows of random, spread-out and adversarial
  inputs, a row whose largest entry is DBL_MAX, a row of subnormals only, rows holding NaN or Inf, a width that is
  no multiple of 16;
- ``check_digits`` (4b): every modulus; int32 products: random, 0, +-1, +-(2^31 - 1), -2^31, multiples of p
  and their neighbours;
- ``check_reconstruction`` (4b): both paths the plan serves, digits read early (uint8) and late (the int32
  products, reduced in the kernel); 2 and 6 moduli (P below 2^53), 7 (the first whose P is a double-double), 15 and
  20; a NaN in B, an Inf in A, zero columns, row maxima near DBL_MAX and subnormal; alpha negative and not, beta 0
  with an all-NaN C (it must not be read) and not, a C that cancels alpha A'B' to 2^-30 of it;
- ``check_ozaki2_gemm`` (4b, the plan end to end, each variant the notebook builds): exponents, residues, products,
  digits, then C.

Results handed back inside a guard band (``utilities.guard``) fail the stage when the code wrote outside them.
Messages name the stage and the first wrong indices and values; a hint names a cause only where the checker tested
it (the tie of p = 256 on the device function's own values, each digit mistake on the wrong digits themselves, the
raw products weighted instead of their digits by a second run).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from .. import inputs, sanitizer
from ..checker import (
    ALPHA_ZERO,
    CheckFailure,
    CheckResult,
    alpha_zero_hint,
    checker,
    compare,
    fresh_seed,
    not_yet,
    output,
    passed,
    quick_return,
    untouched,
)
from ..rounding import epilogue_bound, fma
from . import reference as ref

U = 2.0**-53
SCALING_COUNTS = (2, 20)  # every modulus; the smallest and the largest scaling
RECONSTRUCTION_COUNTS = (2, 6, 7, 15, 20)  # P below 2^53 up to 6 moduli; a double-double from 7 on


def _integers(rng: np.random.Generator, p: int, size: int = 4000, bits: int = 62) -> np.ndarray:
    """Integer-valued doubles that stress a residue: random magnitudes up to 2^bits, multiples of p and their
    neighbours, and the fixed corners (the ends of the range, integers where FP64 stops being exact)."""
    lo, hi = ref.residue_range(p)
    x = np.trunc(np.ldexp(rng.standard_normal(size), rng.integers(0, bits - 2, size)))
    multiples = float(p) * np.trunc(np.ldexp(rng.standard_normal(200), rng.integers(0, bits - 10, 200)))
    specials = [0.0, 1.0, -1.0, float(lo), float(hi), float(lo - 1), float(hi + 1), float(p), -float(p),
                2.0 ** (bits - 1), -(2.0 ** (bits - 1)), 2.0**53 - 1, -(2.0**53) - 2, 2.0**53 + 2, 2.0**53 + 6,
                2.0**61 - 512, 2.0**61 + 512, -(2.0**61) + 512, 2.0**60 + 256, 2.0**62 - 512, -(2.0**62) + 512,
                float(p) * 2.0**52 + 2.0 * p, float(hi) + 2.0**54]  # fmt: skip
    return np.concatenate([x, multiples, multiples + 1, multiples - 1, multiples + hi, multiples + lo, specials])


def residue_mistakes(x: np.ndarray, p: int) -> dict[str, np.ndarray]:
    """The residues of x modulo p as each usual mistake computes them, by the hint that names it (each tested
    against the attendee's residues, :func:`_residue_hint`). Computed with Python ints where a mistake is exact, and
    in FP64 where its mistake is FP64's rounding."""
    lo, hi = ref.residue_range(p)
    x = np.asarray(x, np.float64)
    ints = np.array([int(v) for v in x.ravel()], object).reshape(x.shape)
    exact = np.vectorize(lambda v, top: float((int(v) - (top - p + 1)) % p + (top - p + 1)), otypes=[np.float64])
    with np.errstate(invalid="ignore", over="ignore"):
        fp64 = (x - lo) % p + lo
        by_division = x - p * np.round(x / p)
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        narrow = x.astype(np.int32).astype(np.int64)  # as NumPy casts what int32 cannot hold
    fmod = np.fmod(x.astype(np.int64), p)
    return {
        f"every wrong residue is the one an FP64 operation on x gives: (x - {lo}) % p or x % p on the float array "
        f"rounds x - {lo} once |x| passes 2^53, where a double holds only every other integer; take the remainder "
        "of x.astype(np.int64), which is exact": fp64,
        "every wrong residue is x - p round(x / p) in FP64: x / p rounds once |x| passes 2^53; take the remainder "
        "of x.astype(np.int64), which is exact": np.where(by_division > hi, by_division - p, by_division),
        f"the residues lie in [0, {p - 1}]: the remainder as np.mod gives it; subtract p where it passes {hi}": (
            np.array(np.vectorize(lambda v: float(int(v) % p), otypes=[np.float64])(ints)).reshape(x.shape)
        ),
        f"the residues lie in [{lo - 1}, {hi - 1}]: the top of the range moved down (r >= {hi} sends {hi} to "
        f"{hi - p}); subtract p only where r passes {hi}": exact(x, hi - 1),
        f"the residues lie in [{lo + 1}, {hi + 1}]: the range is [{lo}, {hi}] (reference.residue_range(p)), so for "
        f"p = 256 the residue 128 is -128; subtract p where r passes {hi}": exact(x, hi + 1),
        "np.fmod keeps the sign of x: a negative x's residue lies in (-p, 0], and the shift into the range misses "
        "those below lo; np.mod gives a residue in [0, p) for either sign": np.where(fmod > hi, fmod - p, fmod),
        "x went through an int32 array, which cannot hold integers past 2^31 (NumPy's cast gives -2^31 for them); "
        "use int64 (exact below 2^63)": np.where(np.mod(narrow, p) > hi, np.mod(narrow, p) - p, np.mod(narrow, p)),
    }


def _residue_hint(x: np.ndarray, got: np.ndarray, want: np.ndarray, p: int) -> str:
    """The hint of the usual mistake whose residues equal the attendee's on every entry of ``x``; else, tested on
    the wrong entries, the right class modulo p outside the range; else ""."""
    for hint, value in residue_mistakes(x, p).items():
        if value.shape == got.shape and np.array_equal(value, got) and not np.array_equal(value, want):
            return hint
    wrong = got != want
    lo, hi = ref.residue_range(p)
    if np.all(np.mod(got[wrong] - want[wrong], p) == 0):
        return (
            f"every wrong residue is in the right class modulo {p}, the wrong representative: bring each into "
            f"[{lo}, {hi}]"
        )
    return ""


CONTRACT_RESIDUE = (
    "x: a float64 array of any shape (0-d too) holding integers, |x| < 2^62; p: one of reference.MODULI; returns "
    "x's shape, each residue in reference.residue_range(p) (float64, or an integer dtype)"
)


def _on_shape(fn: Callable[..., Any], layout: str, stage: str, contract: str, *args: Any) -> Any:
    """``fn(*args)``; where it raises on an input shaped other than the first one fed (which ran), the failure says
    so: code that works on one shape only, where the contract allows any."""
    try:
        return fn(*args)
    except Exception as error:
        if layout in ("1-D", "2-D trailing", "") or not layout[0].isdigit():  # the first shape, or not a shape
            raise
        raise CheckFailure(
            stage,
            f"stage '{stage}' on a {layout} input: {type(error).__name__}: {error}\nhint: your code ran on the first "
            f"shape and raised on this one: it depends on one shape, and the contract allows any ({contract}); use "
            "array operations over the whole array (or x.flat and a reshape), not a loop over the first axis",
        ) from error


def _shapes(x: np.ndarray, p: int) -> list[tuple[str, np.ndarray]]:
    """``x`` as the contract allows it: 1-D, its first entries as 2-D and 3-D arrays, one entry as a 0-d array, and
    arrays of small integers only, where a fast path for small values would run: |x| < p (every one, both signs),
    and |x| < 2^31 (what an int32 holds)."""
    below_p = np.arange(-(p - 1), p, dtype=np.float64)
    below_2_31 = np.concatenate([x[np.abs(x) < 2.0**31], [2.0**31 - 1, -(2.0**31), float(p), -float(p)]])
    return [
        ("1-D", x),
        ("2-D", x[:4000].reshape(40, 100)),
        ("3-D", x[-24:].reshape(2, 3, 4)),
        ("0-d", np.array(x[-3])),
        ("small integers only, |x| < p", below_p[::-1]),
        ("integers below 2^31 only", below_2_31),
    ]


@checker("symmetric residue")
def check_residue(fn: Callable[[np.ndarray, int], Any], *, seed: int | None = None) -> CheckResult:
    """``fn(x, p)`` returns the residues of x modulo p. Contract: :data:`CONTRACT_RESIDUE` (fed: every modulus,
    1-D, 2-D and 3-D x)."""
    name, seed = "symmetric residue", fresh_seed(seed)
    rng = np.random.default_rng(seed)
    runs = []
    for p in ref.MODULI:
        whole = _integers(rng, p)
        for layout, x in _shapes(whole, p):
            got = output(_on_shape(fn, layout, "residues", CONTRACT_RESIDUE, x.copy(), p), "residues", f"p = {p}")
            runs.append((p, x, got, ref.residue(x, p), layout))
    if all(untouched(got) for _, _, got, _, _ in runs):
        return not_yet(name, "every residue is zero")
    for p, x, got, want, layout in runs:
        if got.shape != want.shape:
            compare("residues", got, want, case=f"p = {p}, {layout} x", hint=f"the contract: {CONTRACT_RESIDUE}")
        got = got.astype(np.float64) if got.dtype.kind in "iu" else got
        hint = _residue_hint(x, got, want, p) if got.shape == want.shape and not np.array_equal(got, want) else ""
        names = ("entry",) if got.ndim == 1 else None
        compare("residues", got, want, names=names, case=f"p = {p}, {layout} x", hint=hint)
    return passed(name, len(runs), seed, CONTRACT_RESIDUE)


def _bounded_products(
    count: int, rng: np.random.Generator, shape: tuple[int, int] = (6, 9)
) -> Iterator[tuple[str, np.ndarray]]:
    """(name, X) with integers |X| <= 2^t, the scaling's limit, as Python ints (object arrays)."""
    t = ref.crt(count).t
    top = 1 << t
    yield "the limits: 0, +-1, +-2^t", np.array([0, 1, -1, top, -top, top - 1, -top + 1, 2, -2], object).reshape(3, 3)
    small = rng.integers(-(2 ** min(40, t)), 2 ** min(40, t), shape)
    yield "small integers", np.array([[int(v) for v in row] for row in small], object)
    near = [
        [
            int(rng.choice([-1, 1])) * (top - (int(rng.integers(0, 2**62)) >> max(0, 62 - t + 8)))
            for _ in range(shape[1])
        ]
        for _ in range(shape[0])
    ]
    yield "near the limit", np.array(near, object)


def digits_of(x: np.ndarray, count: int) -> np.ndarray:
    """The CRT digits u_t = (X mod p_t) y_t mod p_t of integers X (Python ints), uint8 (count, ...)."""
    c = ref.crt(count)
    flat = list(np.asarray(x, object).ravel())
    out = [[(int(v) % p) * y % p for v in flat] for p, y in zip(c.moduli, c.inverses, strict=True)]
    return np.array(out, np.uint8).reshape((count, *np.shape(x)))


def reconstruction_bound(want: np.ndarray, count: int) -> np.ndarray:
    """What the integers from the reconstruction may differ by: its roundings (4u of the result) and the rounded
    low part of 1/p (P 2^-100)."""
    return 4 * U * np.abs(want) + ref.crt(count).product_float * 2.0**-100


def c_bound(st: ref.Ozaki2Stages, alpha: float, beta: float, c: np.ndarray | None, want: np.ndarray) -> np.ndarray:
    """What C may differ by from ``want`` (``reference.reconstruct`` of the stages ``st``), where it is finite.

    The kernel's x, ``A'B'`` reconstructed and scaled by 2^(-mu - nu) before alpha multiplies it, need not be the
    reference's operation for operation: the reference fuses the multiply-adds that the course's kernel writes as
    ``fma`` (the third sum's terms, the double-double product's tail, beta C), an attendee's ``s += u * w`` rounds
    twice in the simulator (once on a GPU, whose compiler fuses it), and a kernel may add the digits in another
    order. Each route rounds A'B' within :func:`reconstruction_bound` of the reference's (its 4u |A'B'| and
    P 2^-100 are derived there), and each scaling rounds once more among subnormals: x spreads by at most
    ``D = 2^(-mu - nu) (4u |A'B'| + P 2^-100) + 2^-1073``. The epilogue ``alpha x + beta C`` then adds what
    ``utilities.rounding.epilogue_bound`` derives with that spread: ``|alpha| D + 2u |alpha x| + u |beta C| +
    2u |C|`` (beta = 0: ``|alpha| D + 2u |alpha x|``), alpha counted once. Its pairs of routes are symmetric: the
    reference's ``fma(beta, C, fl(alpha x))`` against a kernel's two roundings differs by the same terms as the
    other way round, and against ``fma(alpha, x', fl(beta C))`` by less. An earlier bound took x as
    ``want - beta C``, which holds alpha already (so alpha counted twice, too tight for |alpha| < 1), and added
    ``4u |want|``, which no step derives: both are gone.
    """
    count = st.count
    mu, nu = np.asarray(st.mu, np.int64), np.asarray(st.nu, np.int64)
    finite = (mu[:, None] != ref.NONFINITE_SHIFT) & (nu[None, :] != ref.NONFINITE_SHIFT)
    shift = np.where(finite, -(mu[:, None] + nu[None, :]), 0)
    product = ref.integer_product(st.digits, count)  # A'B' as the reference rounds it
    with np.errstate(invalid="ignore", over="ignore"):
        x = np.where(finite, np.ldexp(product, shift), np.nan)
        spread = np.ldexp(reconstruction_bound(product, count), shift) + 2.0**-1073
        return epilogue_bound(x, c, alpha, beta, want, spread)


def _within(got: np.ndarray, want: np.ndarray, bound: np.ndarray) -> bool:
    with np.errstate(invalid="ignore"):
        return bool(np.all((np.abs(np.asarray(got, np.float64) - want) <= bound) | (got == want)))


def _add_product(s: np.ndarray, u: np.ndarray, w: float, fused: bool) -> np.ndarray:
    """``s + u w`` in FP64: rounded once (``fused``, as a GPU's compiler contracts ``s += u * w`` into one
    multiply-add) or twice (the product, then the sum: NumPy and the simulator)."""
    return fma(u, w, s) if fused else s + u * w


def crt_mistakes(digits: np.ndarray, count: int, fused: bool = False) -> dict[str, np.ndarray]:
    """The integers each usual mistake of the CRT reconstruction gives from ``digits``, by the hint that names it
    (each tested against the attendee's integers, :func:`_crt_hint`). ``fused``: each ``s += u * w`` of the sums is
    one fused multiply-add, as a GPU computes it (:func:`_add_product`); else the product and the sum round apart."""
    c = ref.crt(count)
    u = digits.astype(np.float64)
    shape = digits.shape[1:]

    def sums(s2_dtype: type = np.float64, s3_dtype: type = np.float64, u32: bool = False) -> tuple[np.ndarray, ...]:
        s1, s2, s3 = np.zeros(shape), np.zeros(shape, s2_dtype), np.zeros(shape, s3_dtype)
        for t in range(count):
            if u32:  # float32 digits: each product rounds to float32
                ut = digits[t].astype(np.float32)
                terms = [(ut * np.float32(w[t])).astype(np.float64) for w in (c.c1, c.c2, c.c3)]
                s1, s2, s3 = s1 + terms[0], (s2 + terms[1]).astype(s2_dtype), (s3 + terms[2]).astype(s3_dtype)
                continue
            s1 = _add_product(s1, u[t], c.c1[t], fused)
            s2 = _add_product(s2, u[t], c.c2[t], fused).astype(s2_dtype)
            s3 = _add_product(s3, u[t], c.c3[t], fused).astype(s3_dtype)
        return s1, s2.astype(np.float64), s3.astype(np.float64)

    one = np.zeros(shape)  # the sum of u_t (c1 + c2 + c3)_t, 1/p_t in one double
    for t in range(count):
        one = _add_product(one, u[t], c.c1[t] + c.c2[t] + c.c3[t], fused)

    P = c.product_float
    s1, s2, s3 = sums()
    q = np.floor(s1 + 0.5)
    out = {
        "the third sum (u_t times the low part of 1/p_t) is left out: where X is far below P it is all that keeps "
        "the low-order bits; X = ((s1 - q) + s2 + s3) P": ((s1 - q) + s2) * P,
        "the third sum is kept in float32, which holds 24 bits: P magnifies what it loses; keep s1, s2 and s3 in "
        "float64": ((s1 - q) + s2 + sums(s3_dtype=np.float32)[2]) * P,
        "the second sum is kept in float32, which holds 24 bits: keep s1, s2 and s3 in float64": (
            (s1 - q) + sums(s2_dtype=np.float32)[1] + s3
        )
        * P,
        "the digits were taken as float32: each product u c1, u c2, u c3 rounds to 24 bits; take them as float64": (
            lambda a, b, d: ((a - np.floor(a + 0.5)) + b + d) * P
        )(*sums(u32=True)),
        "the fraction is taken in [0, 1) (q = floor(s1)): a negative integer comes back as X + P; q = floor(s1 + 1/2) "
        "takes it in [-1/2, 1/2)": ((s1 - np.floor(s1)) + s2 + s3) * P,
        "q is subtracted after multiplying by P: (s1 + s2 + s3) P - q P cancels the integer part in FP64, losing X; "
        "subtract q from s1 first (exact)": (s1 + s2 + s3) * P - q * P,
        "1/p_t was taken in one double (C1 + C2 + C3): u / p_t rounds there, and P magnifies it; keep the three "
        "sums apart": (one - np.floor(one + 0.5)) * P,
    }
    return out


def _crt_hint(got: np.ndarray, digits: np.ndarray, count: int, want: np.ndarray, bound: np.ndarray) -> str:
    """The hint of the usual mistake whose integers lie within the bound of the attendee's everywhere (and not of
    the right ones), else ""."""
    for hint, value in crt_mistakes(digits, count).items():
        slack = bound + 4 * U * np.abs(value)  # the bound is the right integers'; an order of the sums may differ
        if _within(got, value, slack) and not _within(value, want, bound):
            return hint
    return ""


CONTRACT_CRT = (
    "digits: uint8 (count, ...), any trailing shape (none too: one integer), digit t in [0, p_t); count: 2..20; "
    "returns float64 of digits.shape[1:], the integers X with |X| <= 2^t (reference.crt(count).t), each within "
    "4u |X| + P 2^-100 (so that |X| far below P keeps its low-order sums: an FP32 accumulator fails)"
)


@checker("CRT reconstruction")
def check_crt(
    fn: Callable[[np.ndarray, int], Any],
    counts: Sequence[int] = range(ref.MIN_MODULI, ref.MAX_MODULI + 1),
    *,
    seed: int | None = None,
) -> CheckResult:
    """``fn(digits, count)`` returns the integers whose CRT digits are given. Contract: :data:`CONTRACT_CRT` (fed:
    every count the plans accept, trailing shapes of 1, 2 and 3 axes)."""
    name, seed = "CRT reconstruction", fresh_seed(seed)
    rng = np.random.default_rng(seed)
    cases = 0
    for count in counts:
        bounded = list(_bounded_products(count, rng))
        near = bounded[-1][1]
        bounded += [
            ("near the limit, 1-D", near.reshape(-1)),
            ("near the limit, 3-D", near.reshape(2, 3, 9)),
            ("near the limit, 0-d", np.array(near.reshape(-1)[0], object)),
        ]
        for case, x in bounded:
            want = np.array([float(v) for v in x.ravel()]).reshape(x.shape)
            layout = f"{x.ndim}-D trailing"
            got = output(_on_shape(fn, layout, "integers", CONTRACT_CRT, digits_of(x, count), count), "integers", case)
            if cases == 0 and untouched(got):
                return not_yet(name, "every integer is zero")
            bound = reconstruction_bound(want, count)
            hint = "" if got.shape == want.shape else f"the contract: {CONTRACT_CRT}"
            if got.shape == want.shape and not _within(got, want, bound):
                hint = _crt_hint(got, digits_of(x, count), count, want, bound)
            names = ("row", "col") if want.ndim == 2 else None
            compare("integers", got, want, bound=bound, names=names, case=f"{case}, {count} moduli", hint=hint)
            cases += 1
    return passed(name, cases, seed, CONTRACT_CRT)


def _corner_rows(m: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """Rows at the ends of the FP64 range: largest entry DBL_MAX, subnormals only, one dominant entry, zeros."""
    x = inputs.normal(m, k, int(rng.integers(2**31)))
    x[0, 1] = np.finfo(np.float64).max
    x[1] = np.ldexp(x[1], -1060)
    x[2, 2:] *= 2.0**-70
    x[3] = 0.0
    return x


def _matrices(m: int, k: int, seed: int) -> Iterator[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    yield "row maxima at DBL_MAX and subnormal, a dominant entry, zeros", _corner_rows(m, k, rng)
    yield "random normal", inputs.normal(m, k, int(rng.integers(2**31)))
    yield "exponent spread phi=2", inputs.exponent_spread(m, k, 2.0, int(rng.integers(2**31)))
    for name, a, _ in inputs.adversarial_pairs(m, k, 4, seed):
        yield name, a
    a, _ = inputs.nonfinite_lines(m, k, 4, seed)
    a[m // 2, 0] = np.nan
    yield "an Inf in a row, a NaN in another", a


def _launch_failure(error: Exception) -> CheckFailure | None:
    """A CUDA launch error inside the attendee's kernel, by its cause."""
    text = str(error)
    if "OUT_OF_RESOURCES" in text:
        return CheckFailure(
            "running your code",
            f"stage 'running your code': the kernel could not start ({text.strip()})\nhint: a block of the row "
            "kernel has 512 threads, so a thread may use at most 128 registers; your device function keeps more "
            "alive than that. Keep it to a few doubles: no arrays, no conversions of large doubles to int64 "
            "(math.floor, int(...): beyond 2^63 they overflow, and they cost registers); round_near keeps it in FP64",
        )
    if "ILLEGAL_ADDRESS" in text or (isinstance(error, IndexError) and "out of bounds" in text.lower()):
        return CheckFailure(
            "running your code",
            f"stage 'running your code': the kernel read or wrote outside an array ({text.strip()})\nhint: the "
            "tables (P, INV, HI, ...) hold one entry per modulus: index them with t",
        )
    return None


def _call(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as error:
        diagnosed = _launch_failure(error)
        if diagnosed is not None:
            raise diagnosed from error
        raise


CONTRACT_RESIDUE_DEVICE = (
    "residue(w, t): w an integer-valued double, |w| < 2^47; t a modulus index below the count; returns a double in "
    "reference.residue_range(P[t]) (up to HI[t]: 127 for p = 256), w's residue"
)


def residue_arguments(rng: np.random.Generator, size: int = 600) -> np.ndarray:
    """Values w of the device function's domain (|w| < 2^47): random magnitudes, both ends, multiples of every
    modulus and their neighbours, and every tie of p = 256 that a double can hold near them (w = (n + 1/2) 256)."""
    w = np.trunc(np.ldexp(rng.standard_normal(size), rng.integers(0, 46, size)))
    halves = 256.0 * np.array([0.5, 1.5, 2.5, 7.5, 2.0**38 + 0.5, 2.0**38 - 0.5, 12345.5])
    multiples = np.array([float(p) * v for p in ref.MODULI for v in (1, -1, 3, 2.0**30 + 1)])
    ends = np.array([0.0, 1.0, -1.0, 2.0**47 - 1, -(2.0**47) + 1, 2.0**46, -(2.0**46)])
    return np.concatenate([w, halves, -halves, multiples, multiples + 1, multiples - 1, ends])


# ------------------------------------------------------------------------------------------------------------
# Drivers of the sanitizer runs (``sanitize=True``): the exercise functions' kernels once, at the checks' shapes
# ------------------------------------------------------------------------------------------------------------


def _scaling_driver(functions: Sequence[Any], *args: Any, **kwargs: Any) -> str:
    f = sanitizer.def_name(functions[0])
    return f"""
        import numpy as np
        from utilities import inputs
        from utilities.ozaki2.tensorcore import residue_values_on_gpu, residues_on_gpu
        for count in (2, 20):
            residues_on_gpu(inputs.normal(23, 130, count), count, residue_factory={f})
            residue_values_on_gpu(np.arange(-600.0, 600.0), count, residue_factory={f})
        """


def _digits_driver(functions: Sequence[Any], *args: Any, **kwargs: Any) -> str:
    f = sanitizer.def_name(functions[0])
    return f"""
        import numpy as np
        from utilities.ozaki2.tensorcore import digits_on_gpu
        products = np.random.default_rng(0).integers(-2**31, 2**31, (20, 5, 40)).astype(np.int32)
        digits_on_gpu(products, digit_factory={f})
        """


def _reconstruction_driver(functions: Sequence[Any], *args: Any, **kwargs: Any) -> str:
    f = sanitizer.def_name(functions[0])
    return f"""
        import numpy as np
        from utilities import inputs
        from utilities.ozaki2 import reference as ref
        from utilities.ozaki2.tensorcore import reconstruct_on_gpu
        a, b = inputs.normal(19, 90, 1), inputs.normal(90, 21, 2)
        st = ref.ozaki2_stages(a, b, 14)
        c = np.ones((19, 21))
        for planes in (st.digits, st.products):  # digits read early, and late from the int32 products
            reconstruct_on_gpu(planes, st.mu, st.nu, a, b, -1.5, 0.75, c, reconstruct_factory={f})
        """


def _gemm_driver(functions: Sequence[Any], *args: Any, **kwargs: Any) -> str:
    return f"""
        import cupy as cp
        from utilities import inputs
        from utilities.ozaki2.tensorcore import Kernels, Ozaki2Gemm
        a, b = cp.asarray(inputs.normal(120, 200, 1)), cp.asarray(inputs.normal(200, 136, 2))
        for digits in ("early", "late"):
            Ozaki2Gemm(120, 136, 200, 14, Kernels({sanitizer.kernels_arguments(functions)}), digits=digits)(a, b)
        cp.cuda.runtime.deviceSynchronize()
        """


def _residue_values_hint(w: np.ndarray, got: np.ndarray, want: np.ndarray, moduli: np.ndarray) -> str:
    """The cause of wrong residue values, where one is tested: the tie of p = 256, or the wrong representative."""
    wrong = got != want
    if not wrong.any():
        return ""
    p = np.broadcast_to(moduli[:, None], got.shape)
    ties = (p == 256) & (np.abs(np.mod(w[None, :], 256.0) - 128.0) == 0)
    if np.all(ties[wrong]) and np.all(got[wrong] == 128.0):
        return (
            "every wrong residue is 128 = HI + 1 for p = 256, at a tie (w / p = n + 1/2, which round_near rounds to "
            "even): where the result passes HI[t], subtract P[t] once more. In a byte 128 wraps to -128, so the "
            "residues the kernels store hide it: the check reads the device function's own value"
        )
    off = got[wrong] - want[wrong]
    if np.all(np.mod(off, p[wrong]) == 0) and np.all(np.abs(off) <= p[wrong]):
        return "the right class modulo p, the wrong representative: bring each residue into [LO[t], HI[t]]"
    if np.all(np.mod(off, p[wrong]) == 0):
        return (
            "a multiple of p was subtracted, but not the one nearest to w (some residues lie several p away): "
            "round_near(w * INV[t]) with the t-th modulus's own 1/p"
        )
    return "w minus the multiple of P[t] nearest to it: round_near(w * INV[t]) * P[t], then the tie fix"


def _check_values(values: Callable[[np.ndarray, int], Any], count: int, rng: np.random.Generator) -> None:
    """The device function's own doubles, before any byte store (the residue planes would hide a 128)."""
    w = residue_arguments(rng)
    moduli = np.array(ref.crt(count).moduli, np.float64)
    want = np.stack([ref.residue(w, int(p)) for p in moduli])
    got = output(_call(values, w.copy(), count), "residue(w, t)", f"{count} moduli")
    hint = _residue_values_hint(w, got, want, moduli) if got.shape == want.shape else CONTRACT_RESIDUE_DEVICE
    compare("residue(w, t)", got, want, names=("modulus", "entry"), case=f"{count} moduli", hint=hint)


@checker("scaling and residues", driver=_scaling_driver)
def check_scaling(
    fn: Callable[[np.ndarray, int], tuple[Any, Any]],
    counts: Sequence[int] = SCALING_COUNTS,
    *,
    shape: tuple[int, int] = (23, 130),
    values: Callable[[np.ndarray, int], Any] | None = None,
    seed: int | None = None,
) -> CheckResult:
    """``fn(x, count)`` returns ``(mu (m,) int32, residues (count, m, k) int8)`` for the rows of x (m, k = shape),
    through the row kernel; ``values(w, count)`` (count, size) float64 the device function's own results on the
    values w, every modulus (:data:`CONTRACT_RESIDUE_DEVICE`): a byte store hides a residue of 128 for p = 256, so
    the values are compared first, exactly."""
    name, seed = "scaling and residues", fresh_seed(seed)
    cases = 0
    rng = np.random.default_rng(seed)
    for count in counts:
        if values is not None:
            _check_values(values, count, rng)
        for case, x in _matrices(*shape, seed + count):
            mu, res = output(_call(fn, x.copy(), count), "residues", f"{case}, {count} moduli")
            want_mu = ref.scale_exponents(x, 1, count)
            want_res = ref.residues(ref.to_integers(x, want_mu, 1), count)
            if cases == 0 and untouched(res):
                return not_yet(name, "every residue is zero")
            label = f"{case}, {count} moduli"
            compare(
                "exponents",
                mu,
                want_mu,
                names=("row",),
                case=label,
                hint="mu comes from the row's statistics (reference.line_terms): the course's code",
            )
            hint = (
                "w minus the multiple of p nearest to it: round_near(w * INV[t]) * P[t]; then, where the result "
                "passes HI[t] (a tie, w / p = n + 1/2, only for p = 256), subtract P[t] once more"
            )
            if res.shape == want_res.shape and res.dtype == want_res.dtype:
                off = res.astype(np.int64) - want_res
                moduli = np.array(ref.crt(count).moduli)[:, None, None]
                if (off != 0).any() and np.all(off % moduli == 0):
                    hint = (
                        "the right class modulo p, the wrong representative: a residue must lie in "
                        "reference.residue_range(p) ([-128, 127] for p = 256)"
                    )
            compare("residues", res, want_res, names=("modulus", "row", "col"), case=label, hint=hint)
            cases += 1
    return passed(name, cases, seed, CONTRACT_RESIDUE_DEVICE if values is not None else "")


def _products(count: int, rng: np.random.Generator, shape: tuple[int, int] = (5, 40)) -> np.ndarray:
    """int32 products (count, m, n): random, with the corners 0, +-1, +-(2^31 - 1), -2^31, multiples of p +- 1."""
    x = rng.integers(-(2**31), 2**31, (count, *shape), dtype=np.int64)
    for t, p in enumerate(ref.crt(count).moduli):
        corners = [
            0,
            1,
            -1,
            2**31 - 1,
            -(2**31) + 1,
            -(2**31),
            p,
            -p,
            p - 1,
            1 - p,
            p + 1,
            3 * p,
            -5 * p + 1,
            (2**31 - 1) // p * p,
            -((2**31) // p) * p,
        ]
        x[t, 0, : len(corners)] = corners
    return x.astype(np.int32)


def digit_mistakes(products: np.ndarray, count: int) -> dict[str, np.ndarray]:
    """The digits (as the bytes a kernel stores) each usual mistake gives for the int32 ``products``, by the hint
    that names it (each tested against the attendee's digits, :func:`_digits_hint`)."""
    c = ref.crt(count)
    v = products.astype(np.int64)
    moduli = np.array(c.moduli, np.int64).reshape(-1, *([1] * (v.ndim - 1)))
    inverses = np.array(c.inverses, np.int64).reshape(moduli.shape)
    want = ref.reduce_products(products, count).astype(np.int64)
    centered = np.where(want > moduli // 2, want - moduli, want)  # u before "+ p where u < 0", rounded to nearest
    centered_up = np.where(want >= (moduli + 1) // 2, want - moduli, want)  # the tie of p = 256 the other way
    return {
        "these are the residues of the products: the digit also multiplies by Y[t] (mod p)": np.mod(v, moduli),
        "each wrong digit is 256 + u for a negative u: a negative u reached the byte, where it wrapped around; "
        "digits lie in [0, p): add P[t] where u < 0": np.mod(centered, 256),
        "each wrong digit is 256 + u for a negative u (u = -p/2 too): a negative u reached the byte; add P[t] where "
        "u < 0": np.mod(centered_up, 256),
        "a negative u was made positive by its magnitude (-u): that is another class modulo p; add P[t] where u < 0 "
        "(u + p is in the same class)": np.abs(centered),
        "a negative u (u = -p/2 too) was made positive by its magnitude (-u): add P[t] where u < 0": np.abs(
            centered_up
        ),
        "a digit of p where it is 0: add P[t] only where u < 0 (u = 0 stays 0), so that digits lie in [0, p)": (
            np.mod(np.where(want == 0, moduli, want), 256)
        ),
        "these are the digits of |v|: the residue of a negative product is not the residue of its magnitude; reduce "
        "v itself (v * Y[t] keeps its sign)": np.mod(np.mod(np.abs(v), moduli) * inverses, moduli),
        "Y[t] was applied twice (the digit reduced once more as if it were a product): u = v Y[t] mod p, once": (
            np.mod(want * inverses, moduli)
        ),
    }


def _digits_hint(products: np.ndarray, got: np.ndarray, want: np.ndarray, count: int) -> str:
    """The hint of the usual mistake whose digits equal the attendee's on every entry; else, tested on the wrong
    entries, the right class modulo p outside [0, p); else ""."""
    wrong = got != want
    if not wrong.any():
        return ""
    for hint, value in digit_mistakes(products, count).items():
        if np.array_equal(value, got) and not np.array_equal(value, want):
            return hint
    moduli = np.broadcast_to(np.array(ref.crt(count).moduli, np.int64)[:, None, None], got.shape)
    if np.all(got[wrong] == np.mod(want[wrong] - moduli[wrong], 256)):
        return (
            "each wrong digit is the byte of digit - p, a negative u that reached the byte and wrapped around: digits "
            "lie in [0, p); add P[t] where u < 0, and only there"
        )
    if np.all(np.mod(got[wrong] - want[wrong], moduli[wrong]) == 0):
        return "every wrong digit is in the right class modulo p, outside [0, p): bring each digit into [0, P[t])"
    return ""


@checker("CRT digits", driver=_digits_driver)
def check_digits(
    fn: Callable[[np.ndarray], Any], count: int = ref.MAX_MODULI, *, seed: int | None = None
) -> CheckResult:
    """``fn(products)`` returns the CRT digits (count, m, n) uint8 of the int32 products (count, m, n): for every
    modulus t, ``(P_t mod p) y_t mod p`` in [0, p)."""
    name, seed = "CRT digits", fresh_seed(seed)
    rng = np.random.default_rng(seed)
    cases = 0
    for case in ("random int32 with their corners", "small products"):
        products = _products(count, rng)
        if case == "small products":
            products = (products % 1000).astype(np.int32) - 500
        got = output(_call(fn, products.copy()), "digits", case)
        want = ref.reduce_products(products, count)
        if cases == 0 and untouched(got):
            return not_yet(name, "every digit is zero")
        hint = ""
        if got.shape == want.shape:
            hint = _digits_hint(products, got.astype(np.int64), want.astype(np.int64), count)
        compare("digits", got, want, names=("modulus", "row", "col"), case=f"{case}, {count} moduli", hint=hint)
        cases += 1
    return passed(name, cases, seed)


NONFINITE_HINT = (
    "a line of A or B that holds a NaN or an Inf (its exponent is NONFINITE_SHIFT): C there is DGEMM's, the FP64 dot "
    "product of the row of A and the column of B"
)


def _c_matches(got: np.ndarray, want: np.ndarray, bound: np.ndarray) -> bool:
    """Whether C passes :func:`_compare_c` (without raising)."""
    finite = np.isfinite(want)
    with np.errstate(invalid="ignore"):
        same_special = np.array_equal(got[~finite], want[~finite], equal_nan=True)
        return same_special and bool(np.all(np.abs(got[finite] - want[finite]) <= bound[finite]))


def sentinel_lines(st: ref.Ozaki2Stages) -> np.ndarray:
    """Where a row of A or a column of B holds a NaN or an Inf (its exponent is the sentinel), as an (m, n) mask."""
    mu, nu = np.asarray(st.mu), np.asarray(st.nu)
    return (mu[:, None] == ref.NONFINITE_SHIFT) | (nu[None, :] == ref.NONFINITE_SHIFT)


def _compare_c(
    got: np.ndarray,
    want: np.ndarray,
    bound: np.ndarray,
    case: str,
    hint: str,
    nonfinite_hint: str = NONFINITE_HINT,
    lines: np.ndarray | None = None,
) -> None:
    """C within its bound where the result is finite, and exactly DGEMM's NaN and +-Inf where it is not. The hint of
    the non-finite entries is given only where every wrong one lies on a line that holds a NaN or an Inf
    (``lines``): an entry that overflows on a finite line is another matter."""
    finite = np.isfinite(want)
    got = np.asarray(got)
    if got.shape == want.shape:
        with np.errstate(invalid="ignore"):
            special_got, special_want = np.where(finite, 0.0, got), np.where(finite, 0.0, want)
            wrong = (special_got != special_want) & ~(np.isnan(special_got) & np.isnan(special_want))
            on_lines = lines is not None and bool(wrong.any()) and bool(lines[wrong].all())
            compare(
                "C (NaN and Inf, as DGEMM's)",
                special_got,
                special_want,
                names=("row", "col"),
                case=case,
                hint=nonfinite_hint if on_lines else hint,  # C's own hint is tested on all of C, or is ""
            )
        got, want = np.where(finite, got, 0.0), np.where(finite, want, 0.0)
    compare("C", got, want, bound=np.where(finite, bound, 0.0), names=("row", "col"), case=case, hint=hint)


def _reconstruction_hint(
    got: np.ndarray,
    st: ref.Ozaki2Stages,
    alpha: float,
    beta: float,
    c: np.ndarray,
    want: np.ndarray,
    bound: np.ndarray,
) -> str:
    """The hint of the usual reconstruction mistake (:func:`crt_mistakes`, on the digits) whose C lies within the
    bound of the attendee's at every finite entry (and whose C is wrong): each recomputed with its sums' products
    rounded apart (the simulator), then, where none matched, fused into them (a GPU, whose compiler contracts
    ``s += u * w``); else ""."""
    lines = sentinel_lines(st)
    shift = np.where(lines, 0, -(np.asarray(st.mu, np.int64)[:, None] + np.asarray(st.nu, np.int64)[None, :]))
    finite = np.isfinite(want) & ~lines
    if got.shape != want.shape or not finite.any():
        return ""
    for fused in (False, True):
        for hint, x in crt_mistakes(st.digits, st.count, fused).items():
            with np.errstate(invalid="ignore", over="ignore"):
                value = alpha * np.ldexp(x, shift) + (beta * c if beta != 0.0 else 0.0)
                slack = bound + 4 * U * np.abs(value)
                near = np.abs(got[finite] - value[finite]) <= slack[finite]
                off = ~(np.abs(value[finite] - want[finite]) <= bound[finite])
            if near.all() and off.any():
                return hint
    return ""


def _c_read_although_beta_zero(got: np.ndarray, want: np.ndarray, beta: float) -> bool:
    finite = np.isfinite(want)
    return beta == 0.0 and bool(finite.any()) and bool(np.isnan(got[finite]).all())


CONTRACT_RECONSTRUCTION = (
    "planes: (count, m, n), uint8 CRT digits (digits read early) or the int32 products themselves (digits read late, "
    "reduced in the kernel); mu (m,), nu (n,) int32 (NONFINITE_SHIFT for a line holding a NaN or an Inf); A (m, k), "
    "B (k, n), C (m, n) float64; alpha any, beta 0 (C not read) or not; returns C (m, n) float64, each entry within "
    "its roundings (c_bound) also where A'B' is far below P (lines that cancel: an FP32 or a missing low-order sum "
    "fails); " + ALPHA_ZERO
)
PATHS = (("digits read early", np.uint8), ("digits read late, from the int32 products", np.int32))
LATE_COUNTS = (2, 20)  # the paths differ only in where u comes from: the fewest and the most moduli show it


def _cancelling_lines(a: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> None:
    """Rows 5 and 6 of A made of pairs v, -v (the last pair off by 2^-30), columns 11 and 12 of B constant: their
    entries of A'B' cancel to a small fraction of P, where only the reconstruction's low-order sums carry the
    result (an FP32 or a missing third sum fails there; elsewhere |A'B'| near P hides it)."""
    k = a.shape[1] // 2 * 2
    for i in (5, 6):
        v = rng.standard_normal(k // 2)
        a[i, :] = 0.0
        a[i, 0:k:2], a[i, 1:k:2] = v, -v
        a[i, k - 1] += 2.0**-30 * (1 + i)
    b[:, 11], b[:, 12] = 0.7, -1.3


def _cancelling_c(want_ab: np.ndarray, beta: float, rng: np.random.Generator) -> np.ndarray:
    """A C with beta C = -alpha A'B' (1 + d), |d| < 2^-30: C is then far below the terms it came from."""
    finite = np.isfinite(want_ab)
    wobble = 1.0 + np.ldexp(rng.uniform(-1.0, 1.0, want_ab.shape), -30)
    return np.where(finite, -want_ab * wobble / beta, rng.standard_normal(want_ab.shape))


@checker("Ozaki-II reconstruction", driver=_reconstruction_driver)
def check_reconstruction(
    fn: Callable[..., Any], counts: Sequence[int] = RECONSTRUCTION_COUNTS, *, seed: int | None = None
) -> CheckResult:
    """``fn(planes, mu, nu, a, b, alpha, beta, c)`` returns C. Contract: :data:`CONTRACT_RECONSTRUCTION`; both paths
    the plan serves (the dtype of ``planes`` says which; the notebook's ``reconstruct_on_gpu`` builds the kernel with
    ``from_products`` for int32), beta = 0 with an all-NaN C (it must not be read), a C that cancels alpha A'B'
    almost entirely, and lines of A and B holding NaN or Inf (DGEMM's result there)."""
    name, seed = "Ozaki-II reconstruction", fresh_seed(seed)
    rng = np.random.default_rng(seed)
    cases = 0
    for count in counts:
        a = _corner_rows(19, 90, rng)
        a[4, 7] = np.inf
        b = inputs.exponent_spread(90, 21, 1.0, int(rng.integers(2**31)))
        b[:, 5] = 0.0  # a zero column
        b[3, 9] = np.nan  # a NaN in B: its column of C is NaN, as DGEMM's
        _cancelling_lines(a, b, rng)
        st = ref.ozaki2_stages(a, b, count)
        c = rng.standard_normal((19, 21))
        with np.errstate(invalid="ignore", over="ignore"):
            cancel = _cancelling_c(ref.reconstruct(st.digits, st.mu, st.nu, count, -1.5, 0.0, None, a, b), 0.75, rng)
        scalars = [(1.0, 0.0, c, ""), (-1.5, 0.75, c, "")]
        if count in (2, 15):
            scalars.append((-1.5, 0.75, cancel, ", beta C cancels alpha A'B' to 2^-30"))
            scalars += [(0.0, 0.75, c, ", alpha = 0"), (0.0, 0.0, c, ", alpha = 0")]
        for path, dtype in PATHS if count in LATE_COUNTS else PATHS[:1]:
            planes = (st.digits if dtype == np.uint8 else st.products).astype(dtype)
            for alpha, beta, c_case, what in scalars if dtype == np.uint8 else scalars[1:2]:
                c_arg = np.full_like(c_case, np.nan) if beta == 0.0 else c_case.copy()  # beta = 0: C must not be read
                label = f"{count} moduli, {path}, alpha={alpha}, beta={beta}{what}"
                got = output(_call(fn, planes.copy(), st.mu.copy(), st.nu.copy(), a, b, alpha, beta, c_arg), "C", label)
                want = ref.reconstruct(st.digits, st.mu, st.nu, count, alpha, beta, c_case, a, b)
                if _c_read_although_beta_zero(got, want, beta):
                    raise CheckFailure(
                        "C",
                        f"stage 'C' on input '{label}': every entry is NaN, and C held NaN: C was "
                        "read although beta = 0\nhint: add beta C only when beta != 0 (a GEMM does not "
                        "read C then: it may hold anything)",
                    )
                if cases == 0 and np.nan_to_num(want).any() and (untouched(got) or untouched(got, float("nan"))):
                    return not_yet(name, "C is all zero or was not written")
                want = quick_return(got, want, alpha, beta, c_case)
                bound = c_bound(st, alpha, beta, c_case, want)
                hint, special = "", NONFINITE_HINT
                if got.shape == want.shape and not _c_matches(got, want, bound):
                    hint = alpha_zero_hint(got, want, alpha, beta)
                    if dtype == np.int32 and not hint:
                        late = _late_hint(fn, st, a, b, count, want, bound, (alpha, beta, c_arg))
                        hint, special = (late, late) if late else (hint, special)
                    hint = hint or _reconstruction_hint(got, st, alpha, beta, c_case, want, bound)
                _compare_c(got, want, bound, label, hint, special, sentinel_lines(st))
                cases += 1
    return passed(name, cases, seed, CONTRACT_RECONSTRUCTION)


def _late_hint(
    fn: Callable[..., Any],
    st: ref.Ozaki2Stages,
    a: np.ndarray,
    b: np.ndarray,
    count: int,
    want: np.ndarray,
    bound: np.ndarray,
    scalars: tuple[float, float, np.ndarray],
) -> str:
    """Why the products path fails, tested: the kernel runs again on int32 planes that hold the digits themselves
    (products of the same residues, so the same C); when that passes, the kernel weighted each plane's raw value
    instead of its digit u."""
    alpha, beta, c = scalars
    again = output(_call(fn, st.digits.astype(np.int32), st.mu.copy(), st.nu.copy(), a, b, alpha, beta, c.copy()), "C")
    finite = np.isfinite(want)
    with np.errstate(invalid="ignore"):
        fits = again.shape == want.shape and bool(np.all(np.abs(again[finite] - want[finite]) <= bound[finite]))
    if fits:
        return (
            "with int32 products whose values are already digits C is right, with the real products it is not: each "
            "term must weight u, the digit the given line computes (digit(planes[t, i, j], t) when from_products), "
            "not the plane's own value planes[t, i, j]"
        )
    return ""


# alpha of either sign and 0, beta 0 (C handed in all NaN: it must not be read) and not, in every combination; the
# order of each step shows. Each shape's cases (random, 14 adversarial, a NaN and an Inf) meet all six.
GEMM_SCALARS = ((1.0, 0.0), (0.5, -2.0), (-1.5, 0.0), (-0.75, 1.25), (0.0, 1.25), (0.0, 0.0))
GEMM_NEEDS = {
    "exponents of A": (),
    "exponents of B": (),
    "residues of A": ("make_residue",),
    "residues of B": ("make_residue",),
    "products": ("make_residue",),
    "digits": ("make_residue", "make_digit"),
}


@checker("Ozaki-II GEMM", needs=GEMM_NEEDS, driver=_gemm_driver)
def check_ozaki2_gemm(
    run: Callable[..., Any],
    count: int = 14,
    *,
    shapes: Sequence[tuple[int, int, int]] = ((256, 192, 320), (120, 136, 200)),
    stages: Callable[[], dict[str, Any]] | None = None,
    seed: int | None = None,
) -> CheckResult:
    """``run(a, b, c, alpha, beta)`` returns C; ``stages()`` returns what the plan kept (``mu``, ``nu``, ``a_res``,
    ``b_res``, ``products``, ``digits``), compared first. With beta = 0 the C handed to ``run`` is all NaN. A notebook
    checks every plan variant that calls the attendee's kernels: digits read early (``digits``) and late
    (``products``, the reconstruction reducing them)."""
    name, seed = "Ozaki-II GEMM", fresh_seed(seed)
    rng = np.random.default_rng(seed)
    cases = 0
    for m, n, k in shapes:
        pairs = [("random normal", inputs.normal(m, k, seed), inputs.normal(k, n, seed + 1))]
        pairs += inputs.adversarial_pairs(m, k, n, seed + cases)
        nonfinite = ("an Inf in a row of A, a NaN in a column of B", *inputs.nonfinite_lines(m, k, n, seed))
        zero = next((i for i, (alpha, beta) in enumerate(GEMM_SCALARS) if alpha == 0.0 and beta != 0.0), None)
        if zero is not None:  # NaN and Inf lines with alpha = 0 (the quick return), and below with alpha != 0
            pairs.insert(zero, nonfinite)
        scalars = [GEMM_SCALARS[i % len(GEMM_SCALARS)] for i in range(len(pairs))]
        pairs.append(nonfinite)
        scalars.append((-0.75, 1.25))  # and with alpha != 0: DGEMM's NaN and Inf
        for (case, a, b), (alpha, beta) in zip(pairs, scalars, strict=True):
            c = rng.standard_normal((m, n))
            label = f"{case} {m}x{n}x{k}"
            got = output(
                _call(run, a, b, np.full_like(c, np.nan) if beta == 0.0 else c.copy(), alpha, beta), "C", label
            )
            st = ref.ozaki2_stages(a, b, count)
            want = ref.reconstruct(st.digits, st.mu, st.nu, count, alpha, beta, c, a, b)
            kept = {key: np.asarray(v) for key, v in (stages() if stages else {}).items()}
            if (
                cases == 0
                and not _c_read_although_beta_zero(got, want, beta)
                and (untouched(got) or untouched(got, float("nan")))
            ):
                return not_yet(name, "C is all zero or was not written")
            for key, stage, want_stage, names in (
                ("mu", "exponents of A", st.mu, ("row",)),
                ("nu", "exponents of B", st.nu, ("col",)),
                ("a_res", "residues of A", st.a_res, ("modulus", "row", "col")),
                ("b_res", "residues of B", st.b_res, ("modulus", "col", "row")),
                ("products", "products", st.products, ("modulus", "row", "col")),
                ("digits", "digits", st.digits, ("modulus", "row", "col")),
            ):
                if key in kept:
                    sel = tuple(slice(0, s) for s in want_stage.shape)
                    compare(stage, kept[key][sel], want_stage, names=names, case=label)
            if _c_read_although_beta_zero(got, want, beta):
                raise CheckFailure(
                    "C",
                    f"stage 'C' on input '{label}': every entry is NaN, and C held NaN: C was "
                    "read although beta = 0\nhint: add beta C only when beta != 0",
                )
            want = quick_return(got, want, alpha, beta, c)
            bound = c_bound(st, alpha, beta, c, want)
            hint = ""
            if got.shape == want.shape and not _c_matches(got, want, bound):
                hint = alpha_zero_hint(got, want, alpha, beta) or _reconstruction_hint(
                    got, st, alpha, beta, c, want, bound
                )
                if not hint and ("digits" in kept or "products" in kept):  # compared above: they passed
                    hint = "every stage before C came out right (the plan's own are compared first): C is wrong"
            _compare_c(got, want, bound, f"{label}, alpha={alpha}, beta={beta}", hint, lines=sentinel_lines(st))
            cases += 1
    if cases == 0:
        raise CheckFailure(name, "no case ran")
    return passed(name, cases, seed)

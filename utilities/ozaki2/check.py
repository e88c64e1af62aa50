"""Checkers of the Ozaki-II exercises (notebooks 4a and 4b), stage by stage against the NumPy reference.

Exact where the algorithm is exact: exponents, residues, int32 products and CRT digits. The reconstruction is
compared within its last rounding (``reconstruction_bound``): a GPU may fuse a multiply-add, and an attendee may
add the three partial sums in another order. Inputs: fresh random and spread-out matrices, the adversarial pairs
of ``utilities.inputs``, integers right at the scaling's limit, and lines holding NaN or Inf.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from .. import inputs
from ..checker import CheckFailure, CheckResult, checker, compare, fresh_seed, not_yet, passed, untouched
from ..rounding import epilogue_bound
from . import reference as ref

U = 2.0**-53


def _integers(rng: np.random.Generator, p: int, size: int = 4000, bits: int = 62) -> np.ndarray:
    """Integer-valued doubles that stress a residue: random magnitudes up to 2^bits, multiples of p and their
    neighbours, the ends of the symmetric range, powers of two."""
    lo, hi = ref.residue_range(p)
    x = np.trunc(np.ldexp(rng.standard_normal(size), rng.integers(0, bits - 2, size)))
    multiples = float(p) * np.trunc(np.ldexp(rng.standard_normal(200), rng.integers(0, bits - 10, 200)))
    specials = [0.0, 1.0, -1.0, float(lo), float(hi), float(lo - 1), float(hi + 1), float(p), -float(p),
                2.0 ** (bits - 1), -(2.0 ** (bits - 1)), 2.0**53 - 1, -(2.0**53) - 2, 2.0**53 + 2]  # fmt: skip
    return np.concatenate([x, multiples, multiples + 1, multiples - 1, multiples + hi, multiples + lo, specials])


@checker("symmetric residue")
def check_residue(fn: Callable[[np.ndarray, int], Any], *, seed: int | None = None) -> CheckResult:
    """``fn(x, p)`` returns the residues of the integer-valued float64 array x (|x| < 2^62) modulo p, each in
    ``reference.residue_range(p)``, as an array of x's shape."""
    name, seed = "symmetric residue", fresh_seed(seed)
    rng = np.random.default_rng(seed)
    runs = []
    for p in ref.MODULI:
        x = _integers(rng, p)
        runs.append((p, np.asarray(fn(x.copy(), p)), ref.residue(x, p)))
    if all(untouched(got) for _, got, _ in runs):
        return not_yet(name, "every residue is zero")
    for p, got, want in runs:
        lo, hi = ref.residue_range(p)
        compare("residues", got.astype(np.float64) if got.dtype.kind in "iu" else got, want, names=("entry",),
                case=f"p = {p}", hint=f"x mod p, then shifted into [{lo}, {hi}]: add or subtract p once; mind the "
                "sign of x (Python's % is never negative, math.fmod keeps x's sign)")  # fmt: skip
    return passed(name, len(runs), seed)


def _bounded_products(count: int, rng: np.random.Generator, shape: tuple[int, int] = (6, 9)) -> Iterator[
        tuple[str, np.ndarray]]:  # fmt: skip
    """(name, X) with integers |X| <= 2^t, the scaling's limit, as Python ints (object arrays)."""
    t = ref.crt(count).t
    top = 1 << t
    yield "the limits: 0, +-1, +-2^t", np.array([0, 1, -1, top, -top, top - 1, -top + 1, 2, -2], object).reshape(3, 3)
    small = rng.integers(-(2 ** min(40, t)), 2 ** min(40, t), shape)
    yield "small integers", np.array([[int(v) for v in row] for row in small], object)
    near = [[int(rng.choice([-1, 1])) * (top - (int(rng.integers(0, 2**62)) >> max(0, 62 - t + 8)))
             for _ in range(shape[1])] for _ in range(shape[0])]  # fmt: skip
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


def c_bound(want: np.ndarray, mu: np.ndarray, nu: np.ndarray, count: int, alpha: float, beta: float,
            c: np.ndarray) -> np.ndarray:  # fmt: skip
    """What C may differ by: the reconstruction's bound scaled back by 2^(-mu - nu), alpha's and beta C's roundings
    (a fused multiply-add), and an underflow's half unit."""
    mu, nu = np.asarray(mu, np.int64), np.asarray(nu, np.int64)
    finite = (mu[:, None] != ref.NONFINITE_SHIFT) & (nu[None, :] != ref.NONFINITE_SHIFT)
    shift = np.where(finite, -(mu[:, None] + nu[None, :]), 0)
    low = abs(alpha) * np.ldexp(ref.crt(count).product_float * 2.0**-100, shift)
    return epilogue_bound(want - beta * c, c, alpha, beta) + 4 * U * np.abs(want) + low


@checker("CRT reconstruction")
def check_crt(fn: Callable[[np.ndarray, int], Any], counts: Sequence[int] = (4, 14, 20), *,
              seed: int | None = None) -> CheckResult:  # fmt: skip
    """``fn(digits, count)`` returns the integers X (float64) whose CRT digits (count, ...) are given, |X| <= 2^t."""
    name, seed = "CRT reconstruction", fresh_seed(seed)
    rng = np.random.default_rng(seed)
    cases = 0
    for count in counts:
        for case, x in _bounded_products(count, rng):
            want = np.array([[float(v) for v in row] for row in x])
            got = np.asarray(fn(digits_of(x, count), count))
            if cases == 0 and untouched(got):
                return not_yet(name, "every integer is zero")
            compare("integers", got, want, bound=reconstruction_bound(want, count), names=("row", "col"),
                    case=f"{case}, {count} moduli",
                    hint="three sums of u_t c1_t, u_t c2_t, u_t c3_t; q = rint(s1); X = ((s1 - q) + s2 + s3) P: the "
                    "fractional part of sum u_t / p_t, times P")  # fmt: skip
            cases += 1
    return passed(name, cases, seed)


def _matrices(m: int, k: int, seed: int) -> Iterator[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    yield "random normal", inputs.normal(m, k, int(rng.integers(2**31)))
    yield "exponent spread phi=2", inputs.exponent_spread(m, k, 2.0, int(rng.integers(2**31)))
    for name, a, _ in inputs.adversarial_pairs(m, k, 4, seed):
        yield name, a
    yield "an Inf in a row", inputs.nonfinite_lines(m, k, 4, seed)[0]


@checker("scaling and residues")
def check_scaling(fn: Callable[[np.ndarray, int], tuple[Any, Any]], counts: Sequence[int] = (14, 20), *,
                  shape: tuple[int, int] = (23, 130), seed: int | None = None) -> CheckResult:  # fmt: skip
    """``fn(x, count)`` returns ``(mu (m,) int32, residues (count, m, k) int8)`` for the rows of x (m, k = shape)."""
    name, seed = "scaling and residues", fresh_seed(seed)
    cases = 0
    for count in counts:
        for case, x in _matrices(*shape, seed + count):
            mu, res = (np.asarray(v) for v in fn(x.copy(), count))
            want_mu = ref.scale_exponents(x, 1, count)
            want_res = ref.residues(ref.to_integers(x, want_mu, 1), count)
            if cases == 0 and untouched(res):
                return not_yet(name, "every residue is zero")
            label = f"{case}, {count} moduli"
            compare("exponents", mu, want_mu, names=("row",), case=label,
                    hint="mu comes from the row's statistics (reference.line_terms): the course's code")  # fmt: skip
            compare("residues", res, want_res, names=("modulus", "row", "col"), case=label,
                    hint="trunc(x 2^mu), then its symmetric residue modulo each p: split x at 2^26, reduce both "
                    "parts (near_mod), recombine with 2^26 mod p, reduce again, into the range")  # fmt: skip
            cases += 1
    return passed(name, cases, seed)


@checker("Ozaki-II reconstruction")
def check_reconstruction(fn: Callable[..., Any], count: int = 14, *, seed: int | None = None) -> CheckResult:
    """``fn(products, mu, nu, alpha, beta, c)`` returns C (float64) from the int32 products (count, m, n)."""
    name, seed = "Ozaki-II reconstruction", fresh_seed(seed)
    rng = np.random.default_rng(seed)
    cases = 0
    for case, a in _matrices(19, 90, seed):
        b = inputs.exponent_spread(90, 21, 1.0, int(rng.integers(2**31)))
        b[:, 5] = 0.0  # a zero column
        st = ref.ozaki2_stages(a, b, count)
        c = rng.standard_normal((19, 21))
        for alpha, beta in ((1.0, 0.0), (-1.5, 0.75)):
            c_arg = np.full_like(c, np.nan) if beta == 0.0 else c.copy()  # with beta = 0, C must not be read
            got = np.asarray(fn(st.products.copy(), st.mu.copy(), st.nu.copy(), alpha, beta, c_arg))
            want = ref.reconstruct(st.digits, st.mu, st.nu, count, alpha, beta, c)
            if cases == 0 and np.nan_to_num(want).any() and (untouched(got) or untouched(got, float("nan"))):
                return not_yet(name, "C is all zero or was not written")
            bound = c_bound(want, st.mu, st.nu, count, alpha, beta, c)
            compare("C", got, want, bound=bound, names=("row", "col"), case=f"{case}, alpha={alpha}, beta={beta}",
                    hint="each product's CRT digit u = (P mod p) y mod p in [0, p); sums of u c1, u c2, u c3; then "
                    "C = alpha 2^(-mu - nu) P frac(s) (+ beta C only when beta != 0; NaN where mu or nu is the "
                    "non-finite sentinel)")  # fmt: skip
            cases += 1
    return passed(name, cases, seed)


GEMM_NEEDS = {"exponents of A": (), "exponents of B": (), "residues of A": ("make_residue",),
              "residues of B": ("make_residue",), "products": ("make_residue",)}  # fmt: skip


@checker("Ozaki-II GEMM", needs=GEMM_NEEDS)
def check_ozaki2_gemm(
    run: Callable[..., Any],
    count: int = 14,
    *,
    shapes: Sequence[tuple[int, int, int]] = ((256, 192, 320), (120, 136, 200)),
    stages: Callable[[], dict[str, Any]] | None = None,
    seed: int | None = None,
) -> CheckResult:
    """``run(a, b, c, alpha, beta)`` returns C; ``stages()`` returns what the plan kept (``mu``, ``nu``, ``a_res``,
    ``b_res``, ``products``), compared first. With beta = 0 the C handed to ``run`` is all NaN."""
    name, seed = "Ozaki-II GEMM", fresh_seed(seed)
    rng = np.random.default_rng(seed)
    cases = 0
    for m, n, k in shapes:
        pairs = [("random normal", inputs.normal(m, k, seed), inputs.normal(k, n, seed + 1))]
        pairs += inputs.adversarial_pairs(m, k, n, seed + cases)
        pairs.append(("an Inf in a row of A, a NaN in a column of B", *inputs.nonfinite_lines(m, k, n, seed)))
        for case, a, b in pairs:
            c = rng.standard_normal((m, n))
            alpha, beta = (1.0, 0.0) if cases % 2 == 0 else (0.5, -2.0)
            got = np.asarray(run(a, b, np.full_like(c, np.nan) if beta == 0.0 else c.copy(), alpha, beta))
            st = ref.ozaki2_stages(a, b, count)
            want = ref.reconstruct(st.digits, st.mu, st.nu, count, alpha, beta, c)
            kept = {key: np.asarray(v) for key, v in (stages() if stages else {}).items()}
            if cases == 0 and (untouched(got) or untouched(got, float("nan"))):
                return not_yet(name, "C is all zero or was not written")
            label = f"{case} {m}x{n}x{k}"
            for key, stage, want_stage, names in (
                ("mu", "exponents of A", st.mu, ("row",)), ("nu", "exponents of B", st.nu, ("col",)),
                ("a_res", "residues of A", st.a_res, ("modulus", "row", "col")),
                ("b_res", "residues of B", st.b_res, ("modulus", "col", "row")),
                ("products", "products", st.products, ("modulus", "row", "col")),
            ):  # fmt: skip
                if key in kept:
                    sel = tuple(slice(0, s) for s in want_stage.shape)
                    compare(stage, kept[key][sel], want_stage, names=names, case=label)
            bound = c_bound(want, st.mu, st.nu, count, alpha, beta, c)
            compare("C", got, want, bound=bound, names=("row", "col"), case=f"{label}, alpha={alpha}, beta={beta}",
                    hint="the stages before C agree with the reference: look at the reconstruction")  # fmt: skip
            cases += 1
    if cases == 0:
        raise CheckFailure(name, "no case ran")
    return passed(name, cases, seed)

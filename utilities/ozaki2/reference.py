"""Ozaki-II DGEMM emulation, the NumPy reference, stage by stage (NumPy only, no GPU imports).

With N pairwise-coprime moduli p_1..p_N of at most 256 and P their product (Ozaki, Uchino and Imamura, 2025):

1. **Scaling** (:func:`scale_exponents`, :func:`to_integers`): one power of two per row of A and per column of B,
   ``A' = trunc(diag(2^mu) A)``, ``B' = trunc(B diag(2^nu))``, chosen so that ``|A'B'|_ij <= ||a'_i|| ||b'_j|| <= T``
   with ``T = 2^t < P/2`` (Cauchy-Schwarz): the integer product A'B' is then determined by its residues.
2. **Residues** (:func:`residues`): ``A' mod p`` for each modulus, symmetric, so int8 (p = 256 gives [-128, 127]).
3. **Products** (:func:`modular_products`): one int8 GEMM per modulus, exact in int32 (k < 2^17); each reduced
   modulo its p and multiplied by ``y_t = (P / p_t)^-1 mod p_t``: ``u_t`` in [0, p_t).
4. **Reconstruction** (:func:`reconstruct`): by the Chinese remainder theorem ``A'B' = P frac(sum_t u_t / p_t)``
   (the fractional part taken in [-1/2, 1/2)): the weights are just ``1 / p_t``, split into three doubles so that
   the first two partial sums are exact, and the last product in double-double; then
   ``C = alpha 2^(-mu_i - nu_j) A'B' + beta C``.

One int8 product per modulus: about 14-16 moduli reach FP64 accuracy, where Ozaki-I needs 28 products (7 slices).
Every integer stage is exact and the GPU kernels reproduce it bit for bit, and the reconstruction too: each
multiply-add that the GPU kernel fuses is rounded once here as well (``utilities.rounding.fma``, exact): the third
sum's terms, the double-double product's tail and ``beta C`` (fewer roundings than NumPy's ``a * b + c``;
``tests/test_ozaki2_rounding.py`` holds the kernel's PTX to exactly these).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from numbers import Integral

import numpy as np

from .. import precision
from ..operands import NONFINITE_SHIFT, InputShapeError, NonFiniteError, check_matrix
from ..rounding import fma

# Pairwise coprime, at most 256, largest first: 256 = 2^8, 255 = 3 5 17, 253 = 11 23, 247 = 13 19, 217 = 7 31, the
# rest primes. Residues modulo each fit an int8 symmetrically.
MODULI = (256, 255, 253, 251, 247, 241, 239, 233, 229, 227, 223, 217, 211, 199, 197, 193, 191, 181, 179, 173)
MIN_MODULI, MAX_MODULI = 2, len(MODULI)
MAX_K = 2**17 - 1  # k products of int8 residues (|r| <= 128) stay exact in int32
_U = 2.0**-53
MARGIN = 2.0**-20  # |A'B'| <= T <= (P/2)(1 - MARGIN): the reconstruction's rounding decision is never close


class ModuliError(ValueError):
    """The number of moduli is not an int in MIN_MODULI..MAX_MODULI."""


def check_moduli(count: object) -> int:
    """Return ``count`` as an int if it is a valid number of moduli, else raise ModuliError naming the range."""
    if isinstance(count, bool) or not isinstance(count, Integral) or not MIN_MODULI <= int(count) <= MAX_MODULI:
        raise ModuliError(f"the number of moduli must be an int from {MIN_MODULI} to {MAX_MODULI}, got {count!r}")
    return int(count)


def residue_range(p: int) -> tuple[int, int]:
    """The symmetric residues modulo p: [-128, 127] for 256, [-(p-1)/2, (p-1)/2] for odd p."""
    return (-(p // 2), p // 2 - 1) if p % 2 == 0 else (-(p // 2), p // 2)


@dataclass(frozen=True)
class Crt:
    """The constants of N moduli: the moduli, ``y_t = (P/p_t)^-1 mod p_t``, 1/p_t as ``c1 + c2 + c3``, P, and t.

    ``c1`` is a multiple of 2^-35 and ``c2`` of 2^-70 (u_t c1_t and u_t c2_t sum exactly in FP64 for u_t < 256 and
    N <= 20); ``c3`` is the rest, rounded. ``t`` is the scaling target: ``2^t <= (P/2)(1 - MARGIN)``.
    """

    moduli: tuple[int, ...]
    inverses: tuple[int, ...]
    c1: tuple[float, ...]
    c2: tuple[float, ...]
    c3: tuple[float, ...]
    product: int
    t: int

    @property
    def count(self) -> int:
        return len(self.moduli)

    @property
    def product_float(self) -> float:
        return float(self.product)

    @property
    def product_hi(self) -> float:
        """P rounded to a double (P is exact in FP64 up to 6 moduli)."""
        return float(self.product)

    @property
    def product_lo(self) -> float:
        """``P - P_hi``, rounded: with ``product_hi`` a double-double of P."""
        return float(self.product - int(float(self.product)))

    def arrays(self) -> dict[str, np.ndarray]:
        """The per-modulus constants as arrays (what the GPU kernels read)."""
        return {
            "moduli": np.array(self.moduli, np.float64),
            "inverses": np.array(self.inverses, np.float64),
            "c1": np.array(self.c1),
            "c2": np.array(self.c2),
            "c3": np.array(self.c3),
        }


@cache
def crt(count: int) -> Crt:
    """The CRT constants of the first ``count`` moduli (exact integer arithmetic, once per count)."""
    count = check_moduli(count)
    ps = MODULI[:count]
    product = math.prod(ps)
    inverses, c1, c2, c3 = [], [], [], []
    for p in ps:
        inverses.append(pow(product // p, -1, p))
        q1, r1 = divmod(1 << 35, p)
        q2, r2 = divmod(r1 << 35, p)
        c1.append(math.ldexp(q1, -35))
        c2.append(math.ldexp(q2, -70))
        c3.append(r2 / p * 2.0**-70)
    t = product.bit_length() - 2  # 2^t <= P/2
    while (1 << (t + 21)) > product * ((1 << 20) - 1):  # 2^t <= (P/2)(1 - 2^-20)
        t -= 1
    return Crt(ps, tuple(inverses), tuple(c1), tuple(c2), tuple(c3), product, t)


# ------------------------------------------------------------------------------------------------------------
# 1. Scaling: one power of two per row of A and column of B, from integers computed exactly
# ------------------------------------------------------------------------------------------------------------

# The statistics are the core's (``utilities.precision.line_terms``): the GPU takes them while it scales, and the
# automatic choice of the count reads the same integers.
QUANT, SPAN, CHUNK = precision.QUANT, precision.SPAN, precision.CHUNK
line_terms = precision.line_terms
ceil_log2 = precision.ceil_log2


def line_offset(e_max: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``g = 10 - 2 (E_max - 16) - ceil(log2 S)``: the exponent for t is ``mu = floor((t + g) / 2)`` (0 if S = 0)."""
    return 10 - 2 * (np.asarray(e_max, np.int64) - SPAN) - ceil_log2(np.asarray(s, np.int64))


def exponent_from_terms(e_max: np.ndarray, s: np.ndarray, t: int) -> np.ndarray:
    """The largest ``mu`` with ``2^(2 mu) S 2^(2 (E_max - 16) - 10) <= 2^t``: ``||2^mu x|| <= 2^(t/2)`` (0 if S = 0)."""
    s = np.asarray(s, dtype=np.int64)
    return np.where(s > 0, (t + line_offset(e_max, s)) // 2, 0).astype(np.int64)


def scale_exponents(x: np.ndarray, axis: int, count: int) -> np.ndarray:
    """One exponent per row (axis=1) or column (axis=0) for ``count`` moduli; ``NONFINITE_SHIFT`` where the line
    holds a NaN or an Inf (its part of C is NaN)."""
    x = check_matrix(x, "A" if axis == 1 else "B")
    bad = ~np.isfinite(x).all(axis=axis)
    e_max, s = line_terms(np.where(np.isfinite(x), x, 0.0), axis)
    mu = exponent_from_terms(e_max, s, crt(count).t)
    return np.where(bad, NONFINITE_SHIFT, mu).astype(np.int32)


def to_integers(x: np.ndarray, mu: np.ndarray, axis: int) -> np.ndarray:
    """``trunc(x 2^mu)`` along rows (axis=1) or columns (axis=0): exact integers held in float64 (0 on lines marked
    non-finite)."""
    mu = np.asarray(mu, np.int64)
    shift = mu[:, None] if axis == 1 else mu[None, :]
    bad = shift == NONFINITE_SHIFT
    return np.where(bad, 0.0, np.trunc(np.ldexp(np.where(bad, 0.0, x), np.where(bad, 0, shift))))


# ------------------------------------------------------------------------------------------------------------
# 2. Residues: exact, with FP64 operations only (what the GPU kernels do)
# ------------------------------------------------------------------------------------------------------------


def _near_mod(v: np.ndarray, p: int) -> np.ndarray:
    """``v`` minus the multiple of p nearest to it (|v| < 2^52, exact integers): a value in [-p/2 - p, p/2 + p]."""
    return v - np.floor(v * (1.0 / p) + 0.5) * p


def _centered(r: np.ndarray, p: int) -> np.ndarray:
    lo, hi = residue_range(p)
    r = np.where(r > hi, r - p, r)
    return np.where(r < lo, r + p, r)


def residue(x: np.ndarray, p: int) -> np.ndarray:
    """The symmetric residue of integer-valued float64 ``x`` modulo p, exactly, as float64, for |x| < 2^78 (the
    scaling keeps |A'| below 2^77 even with 20 moduli).

    x splits into its part above 2^26 (below 2^52) and the rest; each is reduced by the multiple of p nearest to it,
    and the two recombine with ``2^26 mod p``: every product and difference is an integer below 2^53, so FP64
    computes it exactly.
    """
    x = np.asarray(x, dtype=np.float64)
    if x.size and np.abs(x).max() >= 2.0**78:
        raise ValueError("residue: |x| must stay below 2^78 (the scaling keeps integer matrices below 2^77)")
    high = np.trunc(x * 2.0**-26)
    low = x - high * 2.0**26
    r = _near_mod(_near_mod(high, p) * float(pow(2, 26, p)) + _near_mod(low, p), p)
    return _centered(r, p)


def residues(x_int: np.ndarray, count: int) -> np.ndarray:
    """int8 (N, ...) residues of the integer matrix ``x_int`` modulo each of the first ``count`` moduli."""
    return np.stack([residue(x_int, p) for p in crt(count).moduli]).astype(np.int8)


# ------------------------------------------------------------------------------------------------------------
# 3. Products: one int8 GEMM per modulus, reduced
# ------------------------------------------------------------------------------------------------------------


def modular_products(a_res: np.ndarray, b_res: np.ndarray) -> np.ndarray:
    """int32 (N, m, n): ``A_t @ B_t`` for each modulus, with ``b_res`` given transposed, (N, n, k). Exact: FP64 GEMMs
    whose partial sums are integers below ``k 2^14 < 2^31``, far inside FP64's 2^53."""
    if a_res.shape[0] != b_res.shape[0] or a_res.shape[2] != b_res.shape[2]:
        raise InputShapeError(f"residues of A {a_res.shape} and of B^T {b_res.shape} do not match")
    if a_res.shape[2] > MAX_K:
        raise ValueError(f"k = {a_res.shape[2]}: int8 products stay exact in int32 only for k <= {MAX_K}")
    a64, b64 = a_res.astype(np.float64), b_res.astype(np.float64)
    return np.stack([a64[t] @ b64[t].T for t in range(a_res.shape[0])]).astype(np.int32)


def reduce_products(products: np.ndarray, count: int) -> np.ndarray:
    """uint8 (N, m, n): ``u_t = (P_t mod p_t) y_t mod p_t`` in [0, p_t), the CRT digits of each product."""
    c = crt(count)
    out = []
    for t, (p, y) in enumerate(zip(c.moduli, c.inverses, strict=True)):
        r = _near_mod(products[t].astype(np.float64), p)
        u = _near_mod(r * float(y), p)
        u = np.where(u < 0, u + p, u)
        out.append(np.where(u >= p, u - p, u))
    return np.stack(out).astype(np.uint8)


# ------------------------------------------------------------------------------------------------------------
# 4. Reconstruction: A'B' = P frac(sum u_t / p_t), scaled back
# ------------------------------------------------------------------------------------------------------------


def two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(s, e)`` with ``s = fl(a + b)`` and ``s + e = a + b`` exactly (Knuth's TwoSum)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def integer_product(u: np.ndarray, count: int) -> np.ndarray:
    """A'B' (float64, rounded once, nearly correctly) from the CRT digits u (N, m, n), by the fraction trick, rounded
    as ``simt.make_reconstruct_kernel`` rounds it on a GPU.

    ``s1 = sum u_t c1_t`` and ``s2 = sum u_t c2_t`` are exact (fused or not); ``s3 = sum u_t c3_t`` is not: each term
    is one fused multiply-add, rounded once (its error is far below the scaling's). ``q = floor(s1 + 1/2)`` is the
    integer part to drop (s2 + s3 < 2^-22 cannot move it across a half: the scaling keeps |A'B'| / P below 1/2 -
    2^-21). The fraction ``r = (s1 - q) + s2 + s3`` is kept as a double-double ``h + l`` (``s1 - q`` is exact, TwoSum
    adds s2 without error), and ``A'B' = r P`` with P as a double-double ``P_hi + P_lo`` (P passes 2^53 from 7
    moduli on): the tail ``t = fl(l P_hi + fl(h P_lo))`` is one fused multiply-add, and ``h P_hi + t`` another, whose
    product is exact inside it: one rounding at the end, where a plain ``r * P`` rounds three times. (An earlier
    form, ``top + (err + t)`` with the TwoProduct ``top + err = h P_hi``, rounds twice, and on a GPU its
    ``top = h P_hi`` was fused by the assembler into the final add, counting ``err`` twice: 1 unit in the last place
    on a quarter of the entries at 14 to 20 moduli, far more where A'B' is far below P.)
    """
    c = crt(count)
    s1 = np.zeros(u.shape[1:])
    s2 = np.zeros(u.shape[1:])
    s3 = np.zeros(u.shape[1:])
    for t in range(c.count):
        ut = u[t].astype(np.float64)
        s1 = s1 + ut * c.c1[t]  # exact: the kernel's fma(u, c1, s1) gives the same
        s2 = s2 + ut * c.c2[t]  # exact, as s1
        s3 = fma(ut, c.c3[t], s3)
    q = np.floor(s1 + 0.5)
    h, low = two_sum(s1 - q, s2)
    low = low + s3
    return fma(h, c.product_hi, fma(low, c.product_hi, h * c.product_lo))  # h P_hi exact inside the fma


def reconstruct(
    u: np.ndarray,
    mu: np.ndarray,
    nu: np.ndarray,
    count: int,
    alpha: float = 1.0,
    beta: float = 0.0,
    c: np.ndarray | None = None,
    a: np.ndarray | None = None,
    b: np.ndarray | None = None,
) -> np.ndarray:
    """C = alpha 2^(-mu_i - nu_j) A'B' (+ beta C when beta != 0; C is not read when beta == 0), ``beta C`` added by
    one fused multiply-add, ``fma(beta, C, alpha x)``, as the GPU kernel adds it.

    On the rows and columns whose exponent is the non-finite sentinel (a NaN or an Inf in that line of A or B):
    given A and B, what DGEMM gives there, ``alpha (A B)_ij + beta C_ij`` with the products and sums in FP64 (an Inf
    meets a nonzero entry: +-Inf; a zero or a NaN: NaN); without them, NaN."""
    mu, nu = np.asarray(mu, np.int64), np.asarray(nu, np.int64)
    bad = (mu[:, None] == NONFINITE_SHIFT) | (nu[None, :] == NONFINITE_SHIFT)
    shift = np.where(bad, 0, -(mu[:, None] + nu[None, :]))
    with np.errstate(over="ignore"):  # a product beyond DBL_MAX is Inf, as DGEMM's
        out = float(alpha) * np.ldexp(integer_product(u, count), shift)
        if beta != 0.0:
            if c is None:
                raise ValueError("beta != 0 needs c, the C matrix to update")
            out = fma(float(beta), check_matrix(c, "C"), out)
    if a is None or b is None or not bad.any():
        return np.where(bad, np.nan, out)
    with np.errstate(invalid="ignore", over="ignore"):
        native = float(alpha) * (a @ b)
        if beta != 0.0:
            native = native + float(beta) * c
    return np.where(bad, native, out)


# ------------------------------------------------------------------------------------------------------------
# End to end
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ozaki2Stages:
    """Every intermediate, in the GPU kernels' layouts: mu (m,), nu (n,) int32; a_res (N, m, k), b_res (N, n, k)
    int8 (B's residues transposed, K-contiguous); products (N, m, n) int32; digits u (N, m, n) uint8."""

    mu: np.ndarray
    nu: np.ndarray
    a_res: np.ndarray
    b_res: np.ndarray
    products: np.ndarray
    digits: np.ndarray

    @property
    def count(self) -> int:
        return self.a_res.shape[0]


def _operands(a: object, b: object, count: object) -> tuple[np.ndarray, np.ndarray, int]:
    a, b = check_matrix(a, "A"), check_matrix(b, "B")
    if a.shape[1] != b.shape[0]:
        raise InputShapeError(
            f"inner dimensions differ: A is {a.shape[0]} x {a.shape[1]}, B is {b.shape[0]} x {b.shape[1]}"
        )
    return a, b, check_moduli(count)


def ozaki2_stages(a: np.ndarray, b: np.ndarray, count: int) -> Ozaki2Stages:
    """Stages 1-3 of C = A @ B with ``count`` moduli; non-finite lines get the sentinel exponent and zero residues."""
    a, b, count = _operands(a, b, count)
    mu, nu = scale_exponents(a, 1, count), scale_exponents(b, 0, count)
    a_res = residues(to_integers(a, mu, 1), count)
    b_res = residues(to_integers(b, nu, 0).T, count)
    products = modular_products(a_res, b_res)
    return Ozaki2Stages(mu, nu, a_res, b_res, products, reduce_products(products, count))


def ozaki2_gemm_ref(
    a: np.ndarray,
    b: np.ndarray,
    count: int = 14,
    alpha: float = 1.0,
    beta: float = 0.0,
    c: np.ndarray | None = None,
    nonfinite: str = "raise",
) -> np.ndarray:
    """``alpha * A @ B + beta * C`` by Ozaki-II emulation with ``count`` moduli (``nonfinite``: "raise" names the
    first NaN/Inf, "propagate" gives the rows and columns that hold one what DGEMM gives there)."""
    a, b, count = _operands(a, b, count)
    if nonfinite not in ("raise", "propagate"):
        raise ValueError(f"nonfinite must be 'raise' or 'propagate', got {nonfinite!r}")
    if nonfinite == "raise":
        for name, x in (("A", a), ("B", b)):
            if not np.isfinite(x).all():
                i, j = np.argwhere(~np.isfinite(x))[0]
                raise NonFiniteError(f"{name}[{i}, {j}] = {x[i, j]}: clean the input, or pass nonfinite='propagate'")
    st = ozaki2_stages(a, b, count)
    return reconstruct(st.digits, st.mu, st.nu, count, alpha, beta, c, a, b)


def error_bound(a: np.ndarray, b: np.ndarray, count: int) -> np.ndarray:
    """An elementwise bound on ``|ozaki2_gemm_ref(a, b, count) - A @ B|`` (exact A @ B, alpha = 1, beta = 0).

    Truncation: ``|2^mu a - a'| < 1``, so the integer product misses at most ``2^-mu_i sum_l |b_lj| + 2^-nu_j
    sum_l |a_il| + k 2^(-mu_i - nu_j)``; the reconstruction rounds r, P and their product (3u relative) and
    drops ``u_t c3_t`` rounding below ``N 2^-120`` of P; the final scaling is exact unless subnormal.
    """
    a, b, count = _operands(a, b, count)
    mu, nu = scale_exponents(a, 1, count).astype(np.int64), scale_exponents(b, 0, count).astype(np.int64)
    k = a.shape[1]
    row_sum = np.abs(a).sum(axis=1)[:, None]
    col_sum = np.abs(b).sum(axis=0)[None, :]
    both = -(mu[:, None] + nu[None, :])
    trunc = np.ldexp(col_sum, -mu[:, None]) + np.ldexp(row_sum, -nu[None, :]) + np.ldexp(float(k), both)
    rounding = 4 * _U * (np.abs(a) @ np.abs(b) + trunc) + np.ldexp(crt(count).product_float * 2.0**-110, both)
    return 1.01 * (trunc + rounding) + 4 * 2.0**-1074

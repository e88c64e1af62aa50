"""Rounding in the course's number formats: unit roundoffs, Higham's gamma, and the error bounds that more than one
track checks against (NumPy only).

- the FP16 GEMM + bias + ReLU reference with its derived bound (the fused GEMM of 2a and the implicit GEMM of 2c);
- the FP64 epilogue's bound: ``alpha x + beta c`` as NumPy rounds it against a kernel that fuses it into one
  multiply-add, either way (the Ozaki-I and Ozaki-II epilogues);
- ``fma``: a fused multiply-add emulated exactly, elementwise (Python 3.11 has no ``math.fma``, NumPy none at all),
  for references that round as a GPU does where its compiler fuses ``a * b + c`` (Ozaki-II's), and ``fma_scalar``
  for one value (numba's CUDA simulator).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

U16 = 2.0**-11  # unit roundoff of FP16 (round to nearest): |fp16(x) - x| <= U16 |x| in the normal range
ETA16 = 2.0**-25  # half the spacing of FP16 subnormals: the absolute rounding error near zero
U32 = 2.0**-24  # unit roundoff of FP32
U64 = 2.0**-53  # unit roundoff of FP64 (the reference's own GEMM)
FP16_MAX = 65504.0
SAFETY = 2.0  # see b2b_bound


def gamma(n: int, u: float) -> float:
    """Higham's gamma_n = n u / (1 - n u): the relative error bound of any order of n - 1 additions (and n products)."""
    if n * u >= 1:
        raise ValueError(f"gamma_{n} is unbounded for u = {u}")
    return n * u / (1 - n * u)


def fp32_dot_bound(k: int) -> float:
    """Relative bound of an FP32-accumulated dot product of length k, plus that of the FP64 reference."""
    return gamma(k, U32) + gamma(k, U64)


def as_f64(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0.0)


def gemm_bias_relu_ref(a: np.ndarray, b: np.ndarray, bias: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``relu(A @ B + bias)`` in FP64, and the elementwise bound on a GPU result's difference from it.

    Bound (first order, times ``SAFETY``): the FP32 sum ``s`` of K exact products is within
    ``gamma_K |A||B|`` of ``A @ B`` in any order; adding the bias in FP32 rounds once more
    (``U32 |s + bias|``); ReLU is 1-Lipschitz; the final FP16 rounding adds ``U16 |out| + ETA16``.
    """
    a64, b64, bias64 = as_f64(a), as_f64(b), as_f64(bias)
    k = a64.shape[-1]
    p = a64 @ b64
    e_acc = fp32_dot_bound(k) * (np.abs(a64) @ np.abs(b64))
    pre = p + bias64
    y = relu(pre)
    e_pre = e_acc + U32 * (np.abs(pre) + e_acc)
    bound = SAFETY * (e_pre + U16 * (y + e_pre) + ETA16)
    return y, bound


EPILOGUE_FACTOR = 1.0 + 2.0**-49  # 1 + 16 U64: see epilogue_bound
EPILOGUE_TINY = 2.0**-1071  # 16 half-units of FP64's subnormal spacing: see epilogue_bound


def epilogue_bound(
    x: np.ndarray,
    c: np.ndarray | None,
    alpha: float,
    beta: float,
    want: np.ndarray,
    spread: np.ndarray | float | None = None,
) -> np.ndarray:
    """Allowed ``|got - want|`` for ``C = alpha x + beta c`` in FP64: ``x`` is what alpha multiplies (the reference's
    C before alpha and beta), ``want`` NumPy's C, ``spread`` a bound on how far a kernel's own x may lie from ``x``
    (None: the kernel computes x operation for operation as the reference does).

    NumPy rounds twice, then adds: ``want = fl(fl(alpha x) + fl(beta c))``. A GPU compiler may contract the sum into
    one fused multiply-add, and either product may be the fused one: numba-cuda compiles ``r = alpha * x`` then
    ``r += beta * c`` to ``mul.f64`` and ``fma.rn.f64``, ``fma(beta, c, fl(alpha x))``; another kernel may give
    ``fma(alpha, x, fl(beta c))``. With ``z = alpha x + beta c`` exact, ``u = 2^-53``, ``eta = 2^-1075`` (an error
    among subnormals), ``p = fl(alpha x) = alpha x + dp`` and ``q = fl(beta c) = beta c + dq``, where
    ``|dp| <= u |alpha x| + eta`` and ``|dq| <= u |beta c| + eta``, the three routes are (a sum that lands among
    subnormals is exact, so NumPy's last step has no eta)::

        NumPy             fl(p + q)         = z + dp + dq + e_N    |e_N| <= u |p + q|
        fma(beta, c, p)   fl(p + beta c)    = z + dp + e_B         |e_B| <= u |p + beta c| + eta
        fma(alpha, x, q)  fl(alpha x + q)   = z + dq + e_A         |e_A| <= u |alpha x + q| + eta

    A fused route differs from NumPy's by ``e_B - dq - e_N`` or ``e_A - dp - e_N``: at most
    ``u max(|alpha x|, |beta c|) + 2u |z|``, each product's rounding counted once, alpha's with it (alpha belongs
    inside the product, never applied to x's bound a second time). With ``beta = 0`` every route is the one rounding
    ``fl(alpha x)``: bit-identical, bound 0.

    When the kernel's x' may differ from x (``|x' - x| <= spread = D``), ``fl(alpha x')`` is a rounding of its own
    and ``z' = z + alpha (x' - x)``; the worst pair, ``fma(beta, c, fl(alpha x'))`` against NumPy, differs by at
    most ``|alpha| D + 2u |alpha x| + u |beta c| + 2u |z|`` (beta = 0: ``|alpha| D + 2u |alpha x|``).

    To first order these are the bounds; what remains is held by two constants, not by a tolerance: ``|z|`` is
    replaced by ``|want|`` (``|z - want| <= u (|alpha x| + |beta c|)`` to first order), and that with the other
    second-order terms (``u^2``, ``u |alpha| D``: at most 10u of the bound without a spread, 3u with one) and the
    bound's own evaluation in FP64 (four roundings on a term, six with a spread) fit in the factor ``1 + 16u``; the
    eta terms (at most eight, with the evaluation's underflows) fit in ``2^-1071 = 16 eta``.
    """
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        ax = abs(float(alpha)) * np.abs(x)
        bc = abs(float(beta)) * np.abs(np.asarray(c, dtype=np.float64)) if beta != 0.0 else np.zeros_like(ax)
        twice_z = 2 * U64 * np.abs(np.asarray(want, dtype=np.float64)) if beta != 0.0 else np.zeros_like(ax)
        if spread is None:
            if beta == 0.0:
                return np.zeros_like(ax)
            first = U64 * np.maximum(ax, bc) + twice_z
        else:
            first = abs(float(alpha)) * np.asarray(spread, dtype=np.float64) + 2 * U64 * ax + U64 * bc + twice_z
        return EPILOGUE_FACTOR * first + EPILOGUE_TINY


# ------------------------------------------------------------------------------------------------------------
# A fused multiply-add, emulated exactly: what a GPU computes where its compiler contracts ``a * b + c``
# ------------------------------------------------------------------------------------------------------------


def _two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Knuth's TwoSum: ``s = fl(a + b)`` and ``s + e = a + b`` exactly (any finite a, b whose sum does not overflow)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _two_prod(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dekker's product with Veltkamp's split: ``p = fl(a b)`` and ``p + e = a b`` exactly while |a|, |b| < 2^995 and
    the product stays far from underflow (the caller checks)."""

    def split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        y = x * 134217729.0  # 2^27 + 1
        hi = y - (y - x)
        return hi, x - hi

    p = a * b
    (ah, al), (bh, bl) = split(a), split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def round_fraction(q: Fraction, dtype: type = np.float64) -> float:
    """The rational q rounded to nearest (ties to even) in ``dtype`` (float64 or float32), as a Python float.

    float(q) is q correctly rounded to FP64 (subnormals included; a negative q that rounds to zero gives -0.0);
    rounding that to FP32 rounds twice only where it landed on an FP32 midpoint, which q itself then decides."""
    try:
        r64 = float(q)
    except OverflowError:  # past the largest double: round to nearest overflows to infinity
        r64 = math.inf if q > 0 else -math.inf
    if dtype is np.float64 or not math.isfinite(r64):
        return r64
    with np.errstate(over="ignore"):
        r32 = np.float32(r64)
    if not np.isfinite(r32) or float(r32) == r64 or Fraction(r64) == q:
        return float(r32)
    other = np.nextafter(r32, np.float32(np.inf) if r64 > float(r32) else np.float32(-np.inf))
    if Fraction(float(r32)) + Fraction(float(other)) != 2 * Fraction(r64):
        return float(r32)  # r64 is no midpoint: q rounds as r64 does
    return float(other) if abs(Fraction(float(other)) - q) < abs(Fraction(float(r32)) - q) else float(r32)


def fma_scalar(a: float, b: float, c: float, dtype: type = np.float64) -> float:
    """``a * b + c`` rounded once to ``dtype``, for one value of each: exact rationals, rounded by
    :func:`round_fraction`; NaN, Inf and signed zeros as IEEE 754's fusedMultiplyAdd gives them."""
    a, b, c = float(a), float(b), float(c)
    if math.isfinite(a) and math.isfinite(b):
        if not math.isfinite(c):
            return c  # the exact product is finite: c decides (a product that overflows alone does not)
        if a == 0.0 or b == 0.0:
            return float(np.asarray(a * b + c, dtype))  # an exact zero product: c's own value, the zeros' sign rule
        return round_fraction(Fraction(a) * Fraction(b) + Fraction(c), dtype)
    return float(np.asarray(a * b + c, dtype))  # an Inf or a NaN among the factors: the product is Inf or NaN


def _half_gap(r: np.ndarray) -> np.ndarray:
    """Half the distance from r to its nearer neighbour in r's own format (0 where that underflows)."""
    down = np.abs(r - np.nextafter(r, np.zeros_like(r)))
    up = np.abs(np.nextafter(r, np.copysign(np.full_like(r, np.inf), r)) - r)
    return np.minimum(down, up) / 2


def fma(a: Any, b: Any, c: Any, dtype: type = np.float64) -> np.ndarray:
    """``a * b + c`` rounded once to ``dtype`` (float64 or float32), elementwise, as a fused multiply-add computes it.

    In FP64 the exact value is ``r + re + we`` (TwoProduct, then three TwoSums), and r = fl(s + w) is its rounding
    when ``re`` and ``we`` are zero or ``|re| + |we|`` stays below half the gap from r to its nearer neighbour; FP32
    operands' products are exact in FP64, and the exact ``s + t`` rounds to FP32 as s does unless
    ``|s - fl32(s)| + |t|`` reaches half an FP32 gap. A zero factor leaves c's own rounding, as IEEE's. Entries
    that cannot be decided so (those, non-finite values, products near underflow or overflow) go through
    :func:`fma_scalar`: exact rationals, rounded once."""
    a, b, c = np.broadcast_arrays(*(np.asarray(v, dtype=dtype).astype(np.float64) for v in (a, b, c)))
    shape = a.shape
    a, b, c = a.ravel(), b.ravel(), c.ravel()
    with np.errstate(all="ignore"):
        zero = ((a == 0) & np.isfinite(b)) | ((b == 0) & np.isfinite(a))  # an exact zero product
        if dtype is np.float32:
            s, t = _two_sum(a * b, c)  # a b is exact in FP64
            out = s.astype(np.float32)
            sure = np.abs(s - out) + np.abs(t) < _half_gap(out).astype(np.float64)
        else:
            p, pe = _two_prod(a, b)
            s, t = _two_sum(p, c)
            w, we = _two_sum(t, pe)
            out, re = _two_sum(s, w)
            sure = ((re == 0) & (we == 0)) | (np.abs(re) + np.abs(we) < _half_gap(out))
            sure &= (np.abs(p) > 2.0**-900) & (np.abs(p) < 2.0**1000) & (np.maximum(np.abs(a), np.abs(b)) < 2.0**995)
        sure &= np.isfinite(a) & np.isfinite(b) & np.isfinite(c) & np.isfinite(out)
        out = np.where(zero, (a * b + c).astype(dtype), out)
        sure |= zero
    for i in np.flatnonzero(~sure):
        out[i] = fma_scalar(a[i], b[i], c[i], dtype)
    return out.reshape(shape)

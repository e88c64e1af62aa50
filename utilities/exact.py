"""Nearly exact FP64 matrix products as unevaluated double-doubles (hi, lo), with error-free transformations.

``matmul_dd`` follows the Dot2 scheme of Ogita, Rump and Oishi ("Accurate sum and dot product", SIAM J. Sci.
Comput. 26(6), 2005): every product a*b is split exactly into h + r (TwoProd, Veltkamp/Dekker splitting with
2**27 + 1), the h are added with TwoSum into p, and all the rounding errors are accumulated in a separate array s.
Vectorised over the m x n outputs, with one loop step per k. NumPy only.
"""

from __future__ import annotations

import numpy as np

_SPLITTER = 2.0**27 + 1.0


def _split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Veltkamp/Dekker: x = hi + lo exactly, each half with at most 26 significant bits (|x| < 2**996)."""
    c = _SPLITTER * x
    hi = c - (c - x)
    return hi, x - hi


def _two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Knuth's TwoSum: s + err == a + b exactly, s = fl(a + b), for any order of magnitude of a and b."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _two_prod(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """TwoProd: p + err == x * y exactly (barring under/overflow); the factors are first scaled to [0.5, 1)."""
    mx, ex = np.frexp(x)
    my, ey = np.frexp(y)
    p = mx * my
    xh, xl = _split(mx)
    yh, yl = _split(my)
    err = ((xh * yh - p) + xh * yl + xl * yh) + xl * yl
    scale = ex.astype(np.int64) + ey
    return np.ldexp(p, scale), np.ldexp(err, scale)


def _pow2_exponents(x: np.ndarray, axis: int) -> np.ndarray:
    """Per-line E with max |x| = mant * 2**E, mant in [0.5, 1) (0 for a zero line)."""
    return np.frexp(np.max(np.abs(x), axis=axis, initial=0.0))[1].astype(np.int64)


def _check(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(a)
    b = np.asarray(b)
    if a.dtype != np.float64 or b.dtype != np.float64:
        raise TypeError(f"A and B must be float64, got {a.dtype} and {b.dtype}: convert with .astype(np.float64)")
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"need A (m x k) and B (k x n), got shapes {a.shape} and {b.shape}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("A and B must be finite: an exact product of NaN/Inf entries is not defined")
    return a, b


def matmul_dd(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A @ B as an unevaluated double-double ``(hi, lo)``: ``hi = fl(hi + lo)``, both (m x n) float64.

    Each row of A and column of B is first scaled by an exact power of two (max |entry| in [0.5, 1)), so the
    splitting cannot overflow; the result is unscaled exactly at the end.

    Accuracy (Dot2, before the final rounding): ``|hi + lo - (A @ B)_ij| <= gamma_k**2 * (|A| @ |B|)_ij`` with
    ``gamma_k = k u / (1 - k u)``, ``u = 2**-53``; rounded to one double,
    ``|hi - A @ B| <= u |A @ B| + gamma_k**2 (|A| @ |B|)``.
    In practice the error is far smaller, and zero when the exact result fits in hi + lo (e.g. integer data).
    Limits: after scaling, products below about 2**-969 lose the exactness of their error term (underflow); entries
    more than 2**1021 below their row's (column's) maximum are rounded by the scaling; and results in the subnormal
    range are rounded to multiples of 2**-1074 by the unscaling. A and B must be finite.
    512 x 512 x 512 takes a few seconds on two cores.
    """
    a, b = _check(a, b)
    m, k = a.shape
    n = b.shape[1]
    ea = _pow2_exponents(a, axis=1)
    fb = _pow2_exponents(b, axis=0)
    a_s = np.ldexp(a, -ea[:, None])
    b_s = np.ldexp(b, -fb[None, :])
    a_hi, a_lo = _split(a_s)
    b_hi, b_lo = _split(b_s)

    p = np.zeros((m, n))
    s = np.zeros((m, n))
    h = np.empty((m, n))
    r = np.empty((m, n))
    tmp = np.empty((m, n))
    for l in range(k):
        x, xh, xl = a_s[:, l, None], a_hi[:, l, None], a_lo[:, l, None]
        y, yh, yl = b_s[None, l, :], b_hi[None, l, :], b_lo[None, l, :]
        # TwoProd: h + r == x * y exactly
        np.multiply(x, y, out=h)
        np.multiply(xh, yh, out=r)
        r -= h
        r += np.multiply(xh, yl, out=tmp)
        r += np.multiply(xl, yh, out=tmp)
        r += np.multiply(xl, yl, out=tmp)
        # TwoSum: p_new + q == p + h exactly; s collects q + r
        p_new = p + h
        np.subtract(p_new, p, out=tmp)  # bb
        h -= tmp  # h - bb
        np.subtract(p_new, tmp, out=tmp)  # s - bb
        np.subtract(p, tmp, out=tmp)  # p - (s - bb)
        tmp += h
        tmp += r
        s += tmp
        p = p_new

    hi, lo = _two_sum(p, s)
    scale = ea[:, None] + fb[None, :]
    return np.ldexp(hi, scale), np.ldexp(lo, scale)


def exact_gemm(
    a: np.ndarray, b: np.ndarray, alpha: float = 1.0, beta: float = 0.0, c: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``alpha * A @ B + beta * C`` as a double-double (hi, lo); C is not read when beta == 0.

    The products alpha * hi and beta * C are split exactly (TwoProd) and added with TwoSum, so the extra steps add
    only about u**2 relative error to those of ``matmul_dd``.
    """
    hi, lo = matmul_dd(a, b)
    if alpha != 1.0:
        hi, err = _two_prod(np.full_like(hi, alpha), hi)
        lo = err + alpha * lo
    if beta != 0.0:
        if c is None:
            raise ValueError("beta != 0 needs c")
        c = np.asarray(c, dtype=np.float64)
        q, err_q = _two_prod(np.full_like(c, beta), c)
        hi, err_s = _two_sum(hi, q)
        lo = lo + (err_q + err_s)
    return _two_sum(hi, lo)

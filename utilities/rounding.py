"""Rounding in the course's number formats: unit roundoffs, Higham's gamma, and the error bounds that more than one
track checks against (NumPy only).

- the FP16 GEMM + bias + ReLU reference with its derived bound (the fused GEMM of 2a and the implicit GEMM of 2c);
- the FP64 epilogue's bound: ``alpha x + beta c`` as NumPy rounds it against a kernel that fuses it into one
  multiply-add, either way (the Ozaki-I and Ozaki-II epilogues).
"""

from __future__ import annotations

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

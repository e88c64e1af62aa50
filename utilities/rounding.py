"""Rounding in the course's number formats: unit roundoffs, Higham's gamma, and the error bounds that more than one
track checks against (NumPy only).

- the FP16 GEMM + bias + ReLU reference with its derived bound (the fused GEMM of 2a and the implicit GEMM of 2c);
- the FP64 epilogue's bound ``alpha x + beta c`` in one fused multiply-add (the Ozaki-I and Ozaki-II epilogues).
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


def epilogue_bound(x: np.ndarray, c: np.ndarray | None, alpha: float, beta: float) -> np.ndarray:
    """Allowed difference in the epilogue: none but the final alpha/beta rounding (a fused multiply-add)."""
    scale = np.abs(alpha * x) + (np.abs(beta * c) if beta != 0 and c is not None else 0.0)
    return 2 * U64 * scale + np.finfo(np.float64).smallest_subnormal

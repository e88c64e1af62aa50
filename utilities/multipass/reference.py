"""NumPy references of the multi-pass track: the exact product, the FP32 error bound, inputs, phase by phase.

The GPU side is ``utilities.multipass.tensorcore``; this module imports NumPy only.
"""

from __future__ import annotations

import math

import numpy as np

from .config import DTYPES, INT32_MAX, phase_offsets

U_FP32 = 2.0**-24


def reference(a: np.ndarray, bt: np.ndarray) -> np.ndarray:
    """C = A @ B with B given column-major as ``bt`` = B^T (n, k): exact int32 for int8, FP64 for FP16 inputs.

    The int8 product is computed in int64 and checked to fit in int32 (what the kernel accumulates in).
    """
    a, bt = np.asarray(a), np.asarray(bt)
    if a.ndim != 2 or bt.ndim != 2 or a.shape[1] != bt.shape[1]:
        raise ValueError(f"need A (m, k) and B^T (n, k), got {a.shape} and {bt.shape}")
    if a.dtype == np.int8 and bt.dtype == np.int8:
        c = a.astype(np.int64) @ bt.astype(np.int64).T
        if np.abs(c).max(initial=0) > INT32_MAX:
            raise OverflowError("the exact product does not fit in int32")
        return c.astype(np.int32)
    if a.dtype == np.float16 and bt.dtype == np.float16:
        return a.astype(np.float64) @ bt.astype(np.float64).T
    raise TypeError(f"A and B must both be int8 or both float16, got {a.dtype} and {bt.dtype}")


def gamma(k: int, u: float = U_FP32) -> float:
    """gamma_k = k u / (1 - k u): the classical bound on the relative error of a k-term recursive sum."""
    if k * u >= 1:
        raise ValueError(f"k u = {k * u} >= 1: no bound")
    return k * u / (1 - k * u)


def fp32_bound(a: np.ndarray, bt: np.ndarray) -> np.ndarray:
    """Elementwise bound on |C - A @ B| for FP16 inputs, FP32 accumulation and an FP32 result.

    FP16 x FP16 products are exact in FP32; the K-term sum in any order then errs by at most
    gamma_K (|A| |B|)_ij (u = 2^-24). Tensor cores may truncate (round toward zero) instead of rounding to
    nearest, which doubles u: the bound uses 2u, K + 1 terms (the output rounding) and the smallest normal.
    """
    k = a.shape[1]
    scale = np.abs(a.astype(np.float64)) @ np.abs(bt.astype(np.float64)).T
    return gamma(k + 1, 2 * U_FP32) * scale + np.finfo(np.float32).tiny


CASES = ("random", "all -128", "all 127", "mixed extremes")


def operands(case: str, m: int, n: int, k: int, dtype: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A (m, k) and B^T (n, k), C-contiguous, of ``dtype``: one of :data:`CASES`.

    For FP16, "all -128" and "all 127" become the extremes of the format (-65504 and +65504 scaled so that
    the FP32 sum cannot overflow), and "mixed extremes" mixes signs and magnitudes from 2^-14 to 2^10.
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    rng = np.random.default_rng(seed)
    if dtype == "int8":
        if case == "random":
            a, bt = rng.integers(-128, 128, (m, k)), rng.integers(-128, 128, (n, k))
        elif case == "all -128":
            a, bt = np.full((m, k), -128), np.full((n, k), -128)
        elif case == "all 127":
            a, bt = np.full((m, k), 127), np.full((n, k), 127)
        elif case == "mixed extremes":
            a = rng.choice([-128, 127], (m, k))
            bt = rng.choice([-128, -1, 0, 1, 127], (n, k))
            a[0], bt[0] = -128, -128  # C[0, 0] is the largest sum, k * 2^14
            bt[1] = 127  # row 0 against column 1: the most negative, -k * 128 * 127
        else:
            raise ValueError(f"case must be one of {CASES}, got {case!r}")
        return np.ascontiguousarray(a, np.int8), np.ascontiguousarray(bt, np.int8)
    big = 2.0**15 / math.sqrt(k)  # keeps k * big^2 below 2^30: far from FP32 overflow
    if case == "random":
        a, bt = rng.standard_normal((m, k)), rng.standard_normal((n, k))
    elif case == "all -128":
        a, bt = np.full((m, k), -big), np.full((n, k), big)
    elif case == "all 127":
        a, bt = np.full((m, k), big), np.full((n, k), big)
    elif case == "mixed extremes":
        a = rng.choice([-1.0, 1.0], (m, k)) * np.exp2(rng.integers(-14, 11, (m, k)))
        bt = rng.choice([-1.0, 1.0], (n, k)) * np.exp2(rng.integers(-14, 5, (n, k)))
    else:
        raise ValueError(f"case must be one of {CASES}, got {case!r}")
    return np.ascontiguousarray(a, np.float16), np.ascontiguousarray(bt, np.float16)


def phase_products(a: np.ndarray, bt: np.ndarray, phase_k: int) -> np.ndarray:
    """The exact contribution of every phase, (phases, m, n): A[:, kg] @ B[kg, :] for kg the K range of phase g."""
    k = a.shape[1]
    wide = np.int64 if a.dtype == np.int8 else np.float64
    return np.stack(
        [a[:, g : g + phase_k].astype(wide) @ bt[:, g : g + phase_k].astype(wide).T for g in phase_offsets(k, phase_k)]
    )

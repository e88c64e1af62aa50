"""The primer's inputs and reference (NumPy): FP16 operands that hold small integers, so that the tile GEMM's FP32
result is exact and a checker can compare it entry by entry.

With |a|, |b| <= ``LIMIT`` and K terms, every partial sum is an integer of magnitude at most K * LIMIT^2, which
FP16 inputs and an FP32 accumulator represent exactly while it stays below 2^24 (K = 64: 1024).
"""

from __future__ import annotations

import numpy as np

LIMIT = 4  # operands are integers in [-LIMIT, LIMIT]
CASES = ("random", "ones", "by tile")


def operands(case: str, m: int, n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A (m, k) and B (k, n), FP16, row-major.

    ``random``: integers in [-LIMIT, LIMIT]; ``ones``: every entry 1 (C = k everywhere); ``by tile``: each row of A
    and each column of B holds one value, repeating with periods (9 and 7) that no tile size divides, so that a
    result taken from another tile's rows or columns shows.
    """
    if case == "random":
        rng = np.random.default_rng(seed)
        a = rng.integers(-LIMIT, LIMIT + 1, size=(m, k))
        b = rng.integers(-LIMIT, LIMIT + 1, size=(k, n))
    elif case == "ones":
        a, b = np.ones((m, k)), np.ones((k, n))
    elif case == "by tile":
        a = np.broadcast_to((np.arange(m) % (2 * LIMIT + 1) - LIMIT)[:, None], (m, k))
        b = np.broadcast_to((np.arange(n) % (2 * LIMIT - 1) - (LIMIT - 1))[None, :], (k, n))
    else:
        raise ValueError(f"case must be one of {CASES}, got {case!r}")
    return np.ascontiguousarray(a, dtype=np.float16), np.ascontiguousarray(b, dtype=np.float16)


def product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A @ B exactly (in float64, then FP32: exact for the inputs above)."""
    exact = a.astype(np.float64) @ b.astype(np.float64)
    if np.abs(exact).max(initial=0.0) >= 2.0**24:
        raise ValueError("the product leaves the integers FP32 holds exactly: use smaller operands or a smaller K")
    return exact.astype(np.float32)

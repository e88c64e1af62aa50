"""The primer's inputs and reference (NumPy): FP16 operands that hold integers, so that the tile GEMM's FP32 result
is exact and a checker can compare it entry by entry.

With |a|, |b| <= ``LIMIT`` and K terms, every partial sum is an integer of magnitude at most K * LIMIT^2, which
FP16 inputs and an FP32 accumulator represent exactly while it stays below 2^24 (K = 64: 1024). The case ``beyond
FP16's integers`` takes |a|, |b| <= ``WIDE`` (127): sums up to K 127^2 (about 2^20 at K = 64), exact in FP32 but not
in FP16, which holds the integers up to 2048 only; so a C rounded to FP16 before its store fails (the contract: C
is FP32, exact).
"""

from __future__ import annotations

import numpy as np

LIMIT = 4  # operands are integers in [-LIMIT, LIMIT]
WIDE = 127  # ... and in [-WIDE, WIDE] for the case beyond FP16's integers
CASES = ("random", "ones", "by tile", "beyond FP16's integers")


def operands(case: str, m: int, n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A (m, k) and B (k, n), FP16, row-major.

    ``random``: integers in [-LIMIT, LIMIT]; ``beyond FP16's integers``: in [-WIDE, WIDE], so that most entries of
    C lie beyond 2048, where FP16 holds only every other integer; ``ones``: every entry 1 (C = k everywhere); ``by
    tile``: each row of A
    and each column of B holds one value, repeating with periods (9 and 7) that no tile size divides, so that a
    result taken from another tile's rows or columns shows.
    """
    if case in ("random", "beyond FP16's integers"):
        top = LIMIT if case == "random" else WIDE
        rng = np.random.default_rng(seed)
        a = rng.integers(-top, top + 1, size=(m, k))
        b = rng.integers(-top, top + 1, size=(k, n))
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

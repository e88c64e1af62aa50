"""Seeded test matrices for GEMM emulation: float64, C-contiguous, finite, reproducible per seed. NumPy only."""

from __future__ import annotations

import numpy as np

HUGE = 1e300
TINY = 1e-300
MARGIN = 127.0 / 128.0  # the exponent-shift margin of Ozaki-I slicing


def _out(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float64)


def normal(m: int, n: int, seed: int) -> np.ndarray:
    """Standard normal entries."""
    return _out(np.random.default_rng(seed).standard_normal((m, n)))


def exponent_spread(m: int, n: int, phi: float, seed: int) -> np.ndarray:
    """``(rand - 0.5) * exp(phi * randn)``: phi = 0 is uniform(-0.5, 0.5); larger phi spreads the exponents."""
    rng = np.random.default_rng(seed)
    return _out((rng.random((m, n)) - 0.5) * np.exp(phi * rng.standard_normal((m, n))))


def with_zero_lines(x: np.ndarray, axis: int, fraction: float, seed: int) -> np.ndarray:
    """A copy of x with ``round(fraction * x.shape[axis])`` lines zeroed (at least one if fraction > 0).

    axis = 0 zeroes whole rows ``x[i, :]``, axis = 1 whole columns ``x[:, j]``; which ones is seeded.
    """
    if axis not in (0, 1) or not 0.0 <= fraction <= 1.0:
        raise ValueError(f"need axis in (0, 1) and fraction in [0, 1], got axis={axis}, fraction={fraction}")
    out = np.array(x, dtype=np.float64, order="C", copy=True)
    lines = out.shape[axis]
    count = min(lines, max(1, round(fraction * lines))) if fraction > 0 else 0
    chosen = np.random.default_rng(seed).choice(lines, size=count, replace=False)
    if axis == 0:
        out[chosen, :] = 0.0
    else:
        out[:, chosen] = 0.0
    return out


def huge_and_tiny(m: int, n: int, seed: int) -> np.ndarray:
    """Normal entries with about a third of the rows scaled by 1e+300 and a third by 1e-300 (the rest unscaled).

    Pair it with a unit-scale matrix (as ``adversarial_pairs`` does): products then stay within about
    1e300 * 4 * 4 * k, far from overflow, and far above the subnormal range.
    """
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, n))
    rows = rng.permutation(m)
    third = max(1, m // 3) if m >= 2 else 0
    x[rows[:third]] *= HUGE
    x[rows[third : 2 * third]] *= TINY
    return _out(x)


def with_subnormals(m: int, n: int, seed: int) -> np.ndarray:
    """Normal entries; a quarter of the rows (at least one) scaled to the subnormal range (about 2**-1040),
    and about a tenth of the other entries subnormal (about 2**-1060) next to normal ones."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, n))
    scattered = rng.random((m, n)) < 0.1
    x[scattered] = np.ldexp(x[scattered], -1060)
    rows = rng.permutation(m)[: max(1, m // 4)]
    x[rows] = np.ldexp(rng.standard_normal((rows.size, n)), -1040)
    return _out(x)


def _at_margin(m: int, n: int, rng: np.random.Generator, above: bool) -> np.ndarray:
    """Each row's max |x| is exactly (127/128) * 2**E (or the next double above it), E random per row."""
    exps = rng.integers(-20, 21, size=(m, 1))
    peak = np.ldexp(MARGIN, exps)
    if above:
        peak = np.nextafter(peak, np.inf)
    x = rng.uniform(-1.0, 1.0, size=(m, n)) * peak
    where = rng.integers(0, n, size=m)
    signs = rng.choice([-1.0, 1.0], size=m)
    x[np.arange(m), where] = signs * peak[:, 0]
    return x


def _signed_zeros(m: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """About 40% of the entries are +0.0 or -0.0, and the first row is all -0.0."""
    x = rng.standard_normal((m, n))
    zero = rng.random((m, n)) < 0.4
    x[zero] = np.where(rng.random(zero.sum()) < 0.5, -0.0, 0.0)
    x[0] = -0.0
    return x


def _cancellation(m: int, k: int, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Columns of A in equal pairs and rows of B in opposite pairs (+y, -y + 2**-26 z): C = A @ B cancels to
    about 2**-26 of sum |a||b|."""
    half = k // 2
    x = rng.standard_normal((m, half))
    y = rng.standard_normal((half, n))
    a = np.zeros((m, k))
    b = np.zeros((k, n))
    a[:, 0 : 2 * half : 2] = x
    a[:, 1 : 2 * half : 2] = x
    b[0 : 2 * half : 2] = y
    b[1 : 2 * half : 2] = -y + np.ldexp(rng.standard_normal((half, n)), -26)
    return a, b


def large_digits(m: int, n: int, seed: int) -> np.ndarray:
    """An m x n matrix whose rows slice into six large positive digits each (100..127, the first below 127).

    Entries are ``2**E_i * sum_{s<6} d_s 2**(-7-8s)``: 47 significant bits, so exact in FP64, and the row shift
    is E_i. Products of two such operands have anti-diagonal sums above 2**24 for k in the hundreds, so a
    diagonal that passes through FP32 on its way to FP64 loses bits.
    """
    rng = np.random.default_rng(seed)
    digits = rng.integers(100, 128, (m, n, 6))
    digits[:, :, 0] = rng.integers(100, 127, (m, n))
    weights = np.ldexp(1.0, -7 - 8 * np.arange(6))
    return np.ldexp(digits @ weights, rng.integers(-20, 21, (m, 1)))


def nonfinite_lines(m: int, k: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Normal A (m x k) and B (k x n) with an Inf in one row of A and a NaN in one column of B.

    Ozaki-I propagates them: that row and that column of C are NaN, every other entry as if they were absent.
    """
    rng = np.random.default_rng(seed)
    a, b = normal(m, k, int(rng.integers(2**31))), normal(k, n, int(rng.integers(2**31)))
    a[rng.integers(m), rng.integers(k)] = -np.inf
    b[rng.integers(k), rng.integers(n)] = np.nan
    return a, b


def adversarial_pairs(m: int, k: int, n: int, seed: int) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """Named (A, B) pairs, A (m x k) and B (k x n), all finite, that stress the slicing and the epilogue."""
    seeds = [int(s) for s in np.random.SeedSequence(seed).generate_state(17)]
    rng = np.random.default_rng(seeds[0])
    pairs = [
        ("all zero", np.zeros((m, k)), np.zeros((k, n))),
        (
            "zero rows and columns",
            with_zero_lines(normal(m, k, seeds[1]), 0, 0.25, seeds[2]),
            with_zero_lines(normal(k, n, seeds[3]), 1, 0.25, seeds[4]),
        ),
        ("signed zeros", _signed_zeros(m, k, rng), _signed_zeros(n, k, rng).T),
        ("at the 127/128 margin", _at_margin(m, k, rng, above=False), _at_margin(n, k, rng, above=False).T),
        ("just above the margin", _at_margin(m, k, rng, above=True), _at_margin(n, k, rng, above=True).T),
        (
            "powers of two",
            rng.choice([-1.0, 1.0], (m, k)) * np.ldexp(1.0, rng.integers(-30, 31, (m, k))),
            rng.choice([-1.0, 1.0], (k, n)) * np.ldexp(1.0, rng.integers(-30, 31, (k, n))),
        ),
        ("huge and tiny rows", huge_and_tiny(m, k, seeds[5]), normal(k, n, seeds[6])),
        ("huge and tiny columns", normal(m, k, seeds[7]), huge_and_tiny(n, k, seeds[8]).T),
        ("subnormal rows", with_subnormals(m, k, seeds[9]), normal(k, n, seeds[10])),
        ("subnormal columns", normal(m, k, seeds[11]), with_subnormals(n, k, seeds[12]).T),
        ("heavy cancellation", *_cancellation(m, k, n, rng)),
        ("exponent spread phi=4", exponent_spread(m, k, 4.0, seeds[13]), exponent_spread(k, n, 4.0, seeds[14])),
        ("constant", np.full((m, k), 0.1), np.full((k, n), -3.7)),
        ("large digits: diagonal sums above 2^24", large_digits(m, k, seeds[15]), large_digits(n, k, seeds[16]).T),
    ]
    return [(name, _out(a), _out(b)) for name, a, b in pairs]


def sample_rows(m: int, count: int = 16, seed: int = 0) -> np.ndarray:
    """``count`` distinct row indices of an m-row result, sorted (all rows when m <= count): where large
    benchmarks measure their error."""
    return np.sort(np.random.default_rng(seed).choice(m, min(m, count), replace=False))

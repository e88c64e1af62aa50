"""Automatic precision: the fewest slices (Ozaki-I) or moduli (Ozaki-II) whose error estimate is FP64 class.

Both schemes represent row i of A with an absolute error ``eps_i`` (Ozaki-I: the last digit's half weight
``2^(e_i - 8S)``; Ozaki-II: the truncation after scaling, ``2^-mu_i``), and likewise the columns of B. With
random signs these errors reach C as ``||E||_F^2 ~ (sum_i eps_i^2 ||B||_F^2 + ||A||_F^2 sum_j eps_j^2) / 3``, while
``||C||_F^2 ~ ||A||_F^2 ||B||_F^2 / k``. Ozaki-I also drops the products past its last anti-diagonal: digits of
about 74 in rms make diagonal S weigh ``~0.33 sqrt(k (S - 1)) 2^(e_i + f_j - 8S)`` on each entry. The estimate,
in units of u = 2^-53 of ``||C||_F``, is compared with FP64 GEMM's own error, which grows like ``sqrt(k) u``:
cuBLAS DGEMM measured ``0.30 sqrt(k) u`` on an H100 at k = 2048, 4096 and 8192 (the GPU report). The target is
half of that, ``TARGET sqrt(k) u``, so the chosen count is FP64 class with a factor of two to spare.

Everything is computed from the row and column statistics the plans compute anyway (shifts, norms): no GEMM.
The estimates are calibrated, not bounds: ``utilities.ozaki.reference.error_bound`` and its Ozaki-II twin bound
the error rigorously, far above it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

U = 2.0**-53
TARGET = 0.15  # the estimate must stay below TARGET sqrt(k) u of ||C||_F (cuBLAS DGEMM: 0.30)
DIGIT_RMS_SQ = 0.11  # (rms of a uniform digit in [-128, 127], 74, squared, times 2^-14)^2


@dataclass(frozen=True)
class Choice:
    """A count chosen for a scheme: the count, the products it costs, its error estimate and the target (units
    of u relative to ||C||_F), and the estimate of every count tried."""

    scheme: str
    count: int
    products: int
    estimate: float
    target: float
    tried: dict[int, float]

    def describe(self) -> str:
        unit = "slices" if self.scheme == "Ozaki-I" else "moduli"
        return (
            f"{self.scheme}: {self.count} {unit}, {self.products} int8 products; estimated error {self.estimate:.2g} u "
            f"of ||C|| against a target of {self.target:.2g} u (FP64 GEMM: about {2 * self.target:.2g} u)"
        )


@dataclass(frozen=True)
class Norms:
    """Squared Frobenius norms of A and B, and ``sum_l ||A[:, l]||^2 ||B[l, :]||^2``, the expected ||C||_F^2 of
    products with random signs (NaN and Inf count as zero)."""

    a2: float
    b2: float
    c2: float

    @classmethod
    def of(cls, a: np.ndarray, b: np.ndarray) -> Norms:
        a = np.where(np.isfinite(a), a, 0.0)
        b = np.where(np.isfinite(b), b, 0.0)
        sa, sb = float(np.max(np.abs(a), initial=0.0)) or 1.0, float(np.max(np.abs(b), initial=0.0)) or 1.0
        cols, rows = np.sum((a / sa) ** 2, axis=0), np.sum((b / sb) ** 2, axis=1)
        scale = (sa * sb) ** 2
        return cls(float(cols.sum()) * sa * sa, float(rows.sum()) * sb * sb, float(cols @ rows) * scale)


def target(k: int) -> float:
    """The error target in units of u of ||C||_F: half of FP64 GEMM's ``0.30 sqrt(k)``."""
    return TARGET * math.sqrt(k)


def representation_estimate(row_eps: np.ndarray, col_eps: np.ndarray, norms: Norms) -> float:
    """``||E||_F / (u ||C||_F)`` from the errors with which rows of A and columns of B are represented."""
    if norms.c2 == 0:
        return 0.0
    row2, col2 = float(np.sum(np.square(row_eps))), float(np.sum(np.square(col_eps)))
    return math.sqrt((row2 * norms.b2 + norms.a2 * col2) / 3 / norms.c2) / U


def _finite_shifts(x: np.ndarray) -> np.ndarray:
    from .slicing import NONFINITE_SHIFT

    x = np.asarray(x, np.int64)
    return x[x != NONFINITE_SHIFT]


def ozaki1_estimate(e: np.ndarray, f: np.ndarray, slices: int, norms: Norms, k: int) -> float:
    """Ozaki-I's error estimate with ``slices`` slices, from the row shifts e of A and the column shifts f of B."""
    e, f = _finite_shifts(e), _finite_shifts(f)
    row_eps, col_eps = np.ldexp(1.0, e - 8 * slices), np.ldexp(1.0, f - 8 * slices)
    rounding = representation_estimate(row_eps, col_eps, norms)
    if norms.c2 == 0 or slices < 2:
        return rounding
    # the dropped diagonal S: sum over entries of 4^(e_i + f_j - 8S) k (S - 1) DIGIT_RMS_SQ, against ||C||^2
    big = float(np.sum(np.ldexp(1.0, 2 * e - 8 * slices))) * float(np.sum(np.ldexp(1.0, 2 * f - 8 * slices)))
    dropped = math.sqrt(big * k * (slices - 1) * DIGIT_RMS_SQ / norms.c2) / U
    return math.hypot(rounding, dropped)


def slices_needed(a: np.ndarray, b: np.ndarray, *, low: int = 4, high: int = 12) -> Choice:
    """The fewest Ozaki-I slices whose estimate meets the target, for A (m x k) and B (k x n) (NumPy)."""
    from .products import max_k_int32
    from .slicing import col_shifts, row_shifts

    k = a.shape[1]
    e, f = row_shifts(a), col_shifts(b)
    norms = Norms.of(a, b)
    goal, tried = target(k), {}
    for s in range(low, high + 1):
        if k > max_k_int32(s):
            break
        tried[s] = ozaki1_estimate(e, f, s, norms, k)
        if tried[s] <= goal:
            break
    return _choose("Ozaki-I", tried, goal, lambda s: s * (s + 1) // 2)


def _choose(scheme: str, tried: dict[int, float], goal: float, products: Callable[[int], int]) -> Choice:
    """The first count tried that meets the goal, else the one with the lowest estimate."""
    met = [count for count, estimate in tried.items() if estimate <= goal]
    count = met[0] if met else min(tried, key=tried.__getitem__)
    return Choice(scheme, count, products(count), tried[count], goal, tried)

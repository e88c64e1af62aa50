"""The precision search both DGEMM emulations share: an error estimate from the lines of A and B, and the fewest
slices (Ozaki-I) or moduli (Ozaki-II) whose estimate is FP64 class.

Both schemes represent row i of A with an absolute error ``eps_i`` per entry (Ozaki-I: the last digit's half weight
``2^(e_i - 8S)``; Ozaki-II: the truncation after scaling, ``2^-mu_i``), and likewise the columns of B. With random
signs these errors reach row i of C as

    ||E_i||^2 ~ (eps_i^2 ||B||_F^2 + ||A_i||^2 sum_j eps_j^2) / 3,   against   ||C_i||^2 ~ sum_l A_il^2 ||B_l||^2,

and column j likewise. Ozaki-I also drops the products past its last anti-diagonal: digits of about 74 in rms make
diagonal S weigh ``~0.33 sqrt(k (S - 1)) 2^(e_i + f_j - 8S)`` on entry (i, j). The estimate is the **worst row or
column** of C, ``max ||E_i|| / ||C_i||`` in units of u = 2^-53, because the whole matrix's normwise error hides
the rows whose norm is small: on the inputs of the H100 accuracy sweep (2048^3, phi = 4), the 16 rows the sweep
samples measured 7.4x the whole matrix's estimate (Ozaki-II, 16 moduli: 2.43 u against 0.33 u) and 3.2x
(Ozaki-I, 8 slices), while the worst line's estimate stayed above every measured error larger than the
emulation's own final rounding (about 0.5 u): ``tools/precision_calibration.py``, ``results/precision-
calibration.json``. The target is FP64 GEMM's own error, which grows like ``sqrt(k) u`` in every row: cuBLAS
DGEMM measured ``0.30 sqrt(k) u`` on an H100 at k = 2048, 4096 and 8192 (the GPU report); the estimate must stay
below half of that, ``TARGET sqrt(k) u``.

Everything comes from statistics of the lines (norms, exponents) and two matrix-vector products of squares: no
GEMM. The estimates are calibrated, not bounds: ``utilities.ozaki.reference.error_bound`` and its Ozaki-II twin
bound the error rigorously, far above them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

U = 2.0**-53
TARGET = 0.15  # every row and column of C must stay below TARGET sqrt(k) u of its norm (cuBLAS DGEMM: 0.30)


@dataclass(frozen=True)
class Choice:
    """A count chosen for a scheme: the count, the products it costs, its error estimate and the target (units
    of u relative to the worst row's or column's norm), and the estimate of every count tried."""

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
            f"in the worst row or column of C, against a target of {self.target:.2g} u (FP64 GEMM on an H100: "
            f"about {2 * self.target:.2g} u)"
        )


@dataclass(frozen=True)
class LineNorms:
    """Squared norms the estimate needs, of A (m x k) and B (k x n) scaled by powers of two (``2^-ea``, ``2^-eb``,
    so that nothing overflows; NaN and Inf count as zero):

    - ``a_rows`` (m,) ``||A_i||^2`` and ``b_cols`` (n,) ``||B^j||^2``;
    - ``c_rows`` (m,) ``sum_l A_il^2 ||B_l||^2`` and ``c_cols`` (n,) ``sum_l ||A^l||^2 B_lj^2``: the expected
      squared norms of C's rows and columns with random signs.
    """

    a_rows: np.ndarray
    b_cols: np.ndarray
    c_rows: np.ndarray
    c_cols: np.ndarray
    ea: int
    eb: int

    @classmethod
    def of(cls, a: np.ndarray, b: np.ndarray) -> LineNorms:
        a, ea = _scaled(a)
        b, eb = _scaled(b)
        a2, b2 = a * a, b * b
        return cls(a2.sum(axis=1), b2.sum(axis=0), a2 @ b2.sum(axis=1), a2.sum(axis=0) @ b2, ea, eb)


def _scaled(x: np.ndarray) -> tuple[np.ndarray, int]:
    """x with NaN/Inf zeroed, times the power of two 2^-e that brings its largest magnitude into [0.5, 1)."""
    x = np.where(np.isfinite(x), np.asarray(x, np.float64), 0.0)
    e = int(np.frexp(np.max(np.abs(x), initial=0.0))[1])
    return np.ldexp(x, -e), e


def target(k: int) -> float:
    """The error target in units of u of a row's or column's norm: half of FP64 GEMM's ``0.30 sqrt(k)``."""
    return TARGET * math.sqrt(k)


def representation_estimate(
    row_eps2: np.ndarray, col_eps2: np.ndarray, norms: LineNorms, row_extra: np.ndarray | None = None,
    col_extra: np.ndarray | None = None,
) -> float:  # fmt: skip
    """``max ||E_i|| / (u ||C_i||)`` over the rows i and columns j of C, from the squared representation errors
    of A's rows ``row_eps2`` (m,) and B's columns ``col_eps2`` (n,) (in the units of ``norms``), plus any other
    squared error of each row and column (``row_extra``, ``col_extra``). Rows and columns of C that are zero
    (``c_rows == 0``) have no error to speak of."""
    a2, b2 = float(norms.a_rows.sum()), float(norms.b_cols.sum())
    row_err = (row_eps2 * b2 + norms.a_rows * float(col_eps2.sum())) / 3
    col_err = (float(row_eps2.sum()) * norms.b_cols + a2 * col_eps2) / 3
    if row_extra is not None:
        row_err, col_err = row_err + row_extra, col_err + col_extra
    worst = 0.0
    for err, norm in ((row_err, norms.c_rows), (col_err, norms.c_cols)):
        live = norm > 0
        if live.any():
            worst = max(worst, float(np.max(err[live] / norm[live])))
    return math.sqrt(worst) / U


def line_eps2(exponents: np.ndarray, live: np.ndarray) -> np.ndarray:
    """``(2^x)^2`` for each line's error exponent x, 0 where the line is zero or not finite."""
    x = np.where(live, np.asarray(exponents, np.int64), 0)
    return np.where(live, np.ldexp(1.0, 2 * x), 0.0)


def fewest(scheme: str, counts: Iterable[int], estimate: Callable[[int], float], goal: float,
           products: Callable[[int], int]) -> Choice:  # fmt: skip
    """Try ``counts`` in order and take the first whose estimate meets ``goal`` (the later ones are not computed),
    else the one with the lowest estimate."""
    tried: dict[int, float] = {}
    for count in counts:
        tried[count] = estimate(count)
        if tried[count] <= goal:
            break
    else:
        count = min(tried, key=tried.__getitem__)
    return Choice(scheme, count, products(count), tried[count], goal, tried)

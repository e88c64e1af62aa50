"""Automatic precision for Ozaki-I: the fewest slices whose error estimate is FP64 class.

The estimate is the core's (``utilities.precision``): row i of A is represented with an absolute error of the last
digit's half weight ``2^(e_i - 8S)``, and column j of B likewise. Ozaki-I also drops the products past its last
anti-diagonal: digits of about 74 in rms make diagonal S weigh ``~0.33 sqrt(k (S - 1)) 2^(e_i + f_j - 8S)`` on
entry (i, j), which the estimate adds to each row's and column's squared error.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..precision import Choice, LineNorms, fewest, line_eps2, representation_estimate, target

DIGIT_RMS_SQ = 0.11  # (rms of a uniform digit in [-128, 127], 74, squared, times 2^-14)^2


def ozaki1_estimate(e: np.ndarray, f: np.ndarray, slices: int, norms: LineNorms, k: int) -> float:
    """Ozaki-I's error estimate with ``slices`` slices, from the row shifts e of A and the column shifts f of B."""
    from ..operands import NONFINITE_SHIFT

    e, f = np.asarray(e, np.int64), np.asarray(f, np.int64)
    rows_live = (e != NONFINITE_SHIFT) & (norms.a_rows > 0)
    cols_live = (f != NONFINITE_SHIFT) & (norms.b_cols > 0)
    row_eps2 = line_eps2(e - norms.ea - 8 * slices, rows_live)
    col_eps2 = line_eps2(f - norms.eb - 8 * slices, cols_live)
    if slices < 2:
        return representation_estimate(row_eps2, col_eps2, norms)
    # the dropped diagonal S on entry (i, j): 4^(e_i + f_j - 8S) k (S - 1) DIGIT_RMS_SQ = eps_i^2 eps_j^2 2^(16 S) ...
    weight = math.ldexp(k * (slices - 1) * DIGIT_RMS_SQ, 16 * slices)
    row_extra = weight * row_eps2 * float(col_eps2.sum())
    col_extra = weight * float(row_eps2.sum()) * col_eps2
    return representation_estimate(row_eps2, col_eps2, norms, row_extra, col_extra)


def slices_needed(a: np.ndarray, b: np.ndarray, *, low: int = 4, high: int = 12) -> Choice:
    """The fewest Ozaki-I slices whose estimate meets the target, for A (m x k) and B (k x n) (NumPy)."""
    from .products import max_k_int32
    from .slicing import col_shifts, row_shifts

    k = a.shape[1]
    e, f = row_shifts(a), col_shifts(b)
    norms = LineNorms.of(a, b)
    counts = itertools.takewhile(lambda s: k <= max_k_int32(s), range(low, high + 1))  # the diagonals fit int32
    return fewest(
        "Ozaki-I", counts, lambda s: ozaki1_estimate(e, f, s, norms, k), target(k), lambda s: s * (s + 1) // 2
    )

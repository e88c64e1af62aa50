"""Automatic precision for Ozaki-I: the fewest slices whose error estimate is FP64 class.

The estimate is the core's (``utilities.precision``): row i of A is represented with an absolute error of the last
digit's half weight ``2^(e_i - 8S)`` (``e_i`` the row's shift, from its largest magnitude), and column j of B
likewise. Ozaki-I also drops the products past its last anti-diagonal: digits of about 74 in rms make diagonal S
weigh ``~0.33 sqrt(k (S - 1)) 2^(e_i + f_j - 8S)`` on entry (i, j), the scheme's ``weight``. The statistics are the
ones Ozaki-II's choice reads (``utilities.precision.gemm_stats``; on the GPU ``utilities.precision_gpu``), so the
two plans choose from the same numbers and take the same arguments.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..precision import Choice, GemmStats, LineStats, Scheme, choose, estimate, gemm_stats
from .products import max_k_int32
from .slicing import MAX_SLICES

DIGIT_RMS_SQ = 0.11  # (rms of a uniform digit in [-128, 127], 74, squared, times 2^-14)^2
LOW = 4


def line_shifts(amax: np.ndarray) -> np.ndarray:
    """Ozaki-I's shift of a line from its largest magnitude (``slicing.exponent_shifts``, finite lines)."""
    mant, exp = np.frexp(np.asarray(amax, np.float64))
    return (exp + (mant > 127.0 / 128.0)).astype(np.int64)


def _offsets(lines: LineStats) -> np.ndarray:
    return -line_shifts(lines.amax)


def _weight(slices: int) -> float:
    return math.ldexp(DIGIT_RMS_SQ * (slices - 1), 16 * slices) if slices >= 2 else 0.0


def slice_counts(k: int, low: int = LOW, high: int = MAX_SLICES) -> list[int]:
    """The slice counts worth trying for inner dimension k: ``low..high`` while the diagonals fit int32."""
    return list(itertools.takewhile(lambda s: k <= max_k_int32(s), range(low, high + 1)))


def scheme(k: int) -> Scheme:
    """Ozaki-I as a :class:`utilities.precision.Scheme` for inner dimension k (the dropped diagonals' weight
    grows with k)."""
    return Scheme(
        name="Ozaki-I",
        unit="slices",
        divisor=1,
        offset=lambda slices: 8 * slices,
        weight=lambda slices: k * _weight(slices),
        products=lambda slices: slices * (slices + 1) // 2,
        line_offsets=_offsets,
        counts=slice_counts,
    )


def slices_estimate(stats: GemmStats, slices: int) -> float:
    """The error estimate with ``slices`` slices, in units of u of the worst row's or column's norm."""
    return estimate(stats, scheme(stats.k), slices)


def slices_needed_from(stats: GemmStats, *, low: int = LOW, high: int = MAX_SLICES) -> Choice:
    """The fewest slices whose estimate meets the target, from the statistics of A's rows and B's columns."""
    return choose(stats, scheme(stats.k), low=low, high=high)


def slices_needed(a: np.ndarray, b: np.ndarray, *, low: int = LOW, high: int = 12) -> Choice:
    """The fewest Ozaki-I slices whose estimate meets the target, for A (m x k) and B (k x n) (NumPy)."""
    return slices_needed_from(gemm_stats(a, b), low=low, high=high)

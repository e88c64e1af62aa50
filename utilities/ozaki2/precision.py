"""Automatic precision for Ozaki-II: the fewest moduli whose error estimate is FP64 class.

The estimate is the core's (``utilities.precision``): rows of A are represented with an absolute error below
``2^-mu_i``, columns of B below ``2^-nu_j``, and the exponents for N moduli follow from the lines' exact integer
statistics (``reference.line_terms``) without touching the matrices again, so every count costs a few vector
operations to try.
"""

from __future__ import annotations

import numpy as np

from ..precision import Choice, LineNorms, fewest, line_eps2, representation_estimate, target
from . import reference as ref


def moduli_estimate(row_terms: tuple[np.ndarray, np.ndarray], col_terms: tuple[np.ndarray, np.ndarray], count: int,
                    norms: LineNorms) -> float:  # fmt: skip
    """The error estimate with ``count`` moduli, from the lines' ``(E_max, S)`` (``reference.line_terms``)."""
    t = ref.crt(count).t
    mu = ref.exponent_from_terms(*row_terms, t)
    nu = ref.exponent_from_terms(*col_terms, t)
    row_eps2 = line_eps2(-mu - norms.ea, row_terms[1] > 0)
    col_eps2 = line_eps2(-nu - norms.eb, col_terms[1] > 0)
    return representation_estimate(row_eps2, col_eps2, norms)


def moduli_needed_from(rows: tuple[np.ndarray, np.ndarray], cols: tuple[np.ndarray, np.ndarray], norms: LineNorms,
                       k: int, *, low: int = 8, high: int = ref.MAX_MODULI) -> Choice:  # fmt: skip
    """The fewest moduli whose estimate meets the target, from the lines' statistics and the norms."""
    estimate = lambda count: moduli_estimate(rows, cols, count, norms)  # noqa: E731
    return fewest("Ozaki-II", range(low, high + 1), estimate, target(k), lambda count: count)


def moduli_needed(a: np.ndarray, b: np.ndarray, *, low: int = 8, high: int = ref.MAX_MODULI) -> Choice:
    """The fewest moduli whose estimate meets the target, for A (m x k) and B (k x n) (NumPy)."""
    a0 = np.where(np.isfinite(a), a, 0.0)
    b0 = np.where(np.isfinite(b), b, 0.0)
    rows, cols = ref.line_terms(a0, 1), ref.line_terms(b0, 0)
    return moduli_needed_from(rows, cols, LineNorms.of(a0, b0), a.shape[1], low=low, high=high)

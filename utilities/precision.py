"""The precision search both DGEMM emulations share: statistics of the lines of A and B, an error estimate from
them, and the fewest slices (Ozaki-I) or moduli (Ozaki-II) whose estimate is FP64 class.

Both schemes represent row i of A with an absolute error ``eps_i`` per entry (Ozaki-I: the last digit's half weight
``2^(e_i - 8S)``; Ozaki-II: the truncation after scaling, ``2^-mu_i``), and likewise the columns of B. With random
signs these errors reach row i of C as

    ||E_i||^2 ~ (eps_i^2 ||B||_F^2 + ||A_i||^2 sum_j eps_j^2) / 3,   against   ||C_i||^2 ~ sum_l A_il^2 ||B_l||^2,

and column j likewise. Ozaki-I also drops the products past its last anti-diagonal: digits of about 74 in rms make
diagonal S weigh ``~0.33 sqrt(k (S - 1)) 2^(e_i + f_j - 8S)`` on entry (i, j). The estimate is the **worst row or
column** of C, ``max ||E_i|| / ||C_i||`` in units of u = 2^-53, because the whole matrix's normwise error hides
the rows whose norm is small (``tools/precision_calibration.py``, ``results/precision-calibration.json``). The
target is FP64 GEMM's own error, which grows like ``sqrt(k) u`` in every row: the estimate must stay below half
of what cuBLAS DGEMM measured, ``TARGET sqrt(k) u`` (``TARGET`` says where the measurement is).

**What the estimate reads** (:class:`GemmStats`, :func:`gemm_stats`): per row of A and per column of B, its largest
magnitude, the exact integer statistics of Ozaki-II's scaling (:func:`line_terms`), its squared norm and the
squared norm of its line of C, each scaled by a power of two of its own so that nothing overflows or underflows:
subnormal rows beside rows near DBL_MAX are estimated like any other. The GPU computes the same statistics, in the
same units, while it scales (``utilities.precision_gpu``), and chooses the count on the device from them.
:class:`Scheme` says how a scheme turns a count into each line's error exponent; :func:`choose` tries the counts.

The estimates are calibrated, not bounds: ``utilities.ozaki.reference.error_bound`` and its Ozaki-II twin bound the
error rigorously, far above them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

U = 2.0**-53
# Every row and column of C must stay below TARGET sqrt(k) u of its norm: half of cuBLAS DGEMM's normwise error at
# 8192^3 in units of sqrt(k) u (results/nvidia-h100-80gb-hbm3-ozaki-8192.md). Data, not prose.
TARGET = 0.15


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
    """The error target in units of u of a row's or column's norm: ``TARGET sqrt(k)``, half of FP64 GEMM's."""
    return TARGET * math.sqrt(k)


def representation_estimate(
    row_eps2: np.ndarray,
    col_eps2: np.ndarray,
    norms: LineNorms,
    row_extra: np.ndarray | None = None,
    col_extra: np.ndarray | None = None,
) -> float:
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


def fewest(
    scheme: str, counts: Iterable[int], estimate: Callable[[int], float], goal: float, products: Callable[[int], int]
) -> Choice:
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


# ------------------------------------------------------------------------------------------------------------
# Line statistics: what the GPU takes while it scales, and the estimate from them
# ------------------------------------------------------------------------------------------------------------

CHUNK = 128  # a line's entries are summarised 128 at a time: one warp's 32 four-entry words, or a column tile
QUANT = 32  # an entry x = f 2^E (f in [0.5, 1)) counts as (q / 32)^2 4^E with q = floor(32 f) + 1 >= 32 f
SPAN = 16  # entries more than 2^16 below their chunk's largest count as one small constant
_NO_EXPONENT = np.iinfo(np.int32).min


def ceil_log2(s: np.ndarray) -> np.ndarray:
    """``ceil(log2 s)`` of positive int64 values, exactly (0 for s <= 1)."""
    v = np.maximum(np.asarray(s, np.int64), 1) - 1
    guess = np.frexp(v.astype(np.float64))[1].astype(np.int64)  # bit length, or one more where the float rounded up
    over = (guess > 0) & ((v >> np.maximum(guess - 1, 0)) == 0)
    return guess - over


def _ceil_shift(s: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """``ceil(s / 2^shift)`` of non-negative int64 values s < 2^50 and shifts >= 0 (1 for a positive s shifted past
    its bits)."""
    s, shift = np.asarray(s, np.int64), np.asarray(shift, np.int64)
    small = np.minimum(shift, 62)
    return np.where(shift >= 62, (s > 0).astype(np.int64), (s + (np.int64(1) << small) - 1) >> small)


def line_terms(x: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Per line (row for axis=1, column for axis=0) of a finite x: the largest exponent ``E`` (0 for a zero line)
    and the integer ``S`` with ``sum x^2 <= S 2^(2 (E - 16) - 10)``, both exact.

    The line is taken CHUNK entries at a time (the last chunk padded with zeros). In a chunk whose largest exponent
    is ``E_c``, an entry ``x = f 2^e`` counts ``q^2 4^(e - E_c + 16)`` with ``q = floor(32 f) + 1``, or 256 if
    ``e < E_c - 16``, a zero 0; the chunk's sum ``S_c`` bounds its squares in units of ``2^(2 (E_c - 16) - 10)``.
    Then ``S = sum_c ceil(S_c / 4^(E - E_c))``. Integer arithmetic throughout, so the result is the same in any
    order and on any device, and a chunk can be summarised where its entries are (a warp, a column tile) before
    the line's largest exponent is known.
    """
    x = np.asarray(x, np.float64)
    lines = x if axis == 1 else x.T
    count, width = lines.shape
    chunks = max(1, -(-width // CHUNK))
    padded = np.zeros((count, chunks * CHUNK))
    padded[:, :width] = lines
    v = padded.reshape(count, chunks, CHUNK)
    f, e = np.frexp(np.abs(v))
    nonzero = v != 0
    e = np.where(nonzero, e, _NO_EXPONENT).astype(np.int64)
    e_chunk = e.max(axis=2)
    q = (np.floor(f * QUANT) + 1).astype(np.int64)
    rel = e - e_chunk[:, :, None] + SPAN
    big = nonzero & (rel >= 0)
    terms = np.where(big, q * q << np.where(big, 2 * rel, 0), np.where(nonzero, 256, 0))
    s_chunk = terms.sum(axis=2, dtype=np.int64)
    live = s_chunk > 0
    e_max = np.where(live, e_chunk, _NO_EXPONENT).max(axis=1)
    e_max = np.where(live.any(axis=1), e_max, 0)
    shift = np.where(live, 2 * (e_max[:, None] - e_chunk), 0)
    s = np.where(live, _ceil_shift(s_chunk, shift), 0).sum(axis=1, dtype=np.int64)
    return e_max.astype(np.int64), s


@dataclass(frozen=True)
class LineStats:
    """What the estimate reads of each line (row of A or column of B), NaN and Inf counted as zero:

    - ``amax``: the largest magnitude; ``e``: its exponent (``frexp``; 0 for a zero line);
    - ``s``: :func:`line_terms`'s integer bound on the sum of squares (Ozaki-II's scaling reads it too);
    - ``norm2``: ``sum (x 2^-e)^2``, the line's squared norm in units of ``4^e``;
    - ``cross2``: ``sum_l (x_l 2^-e)^2 w_l``, where ``w_l`` is the squared norm of the other operand's line l in
      units of ``4^(its largest exponent)``: the expected squared norm of this line of C, in units of
      ``4^(e + e_other)``;
    - ``bad``: the line holds a NaN or an Inf (its line of C is NaN, its error does not count).
    """

    amax: np.ndarray
    e: np.ndarray
    s: np.ndarray
    norm2: np.ndarray
    cross2: np.ndarray
    bad: np.ndarray


@dataclass(frozen=True)
class GemmStats:
    """The statistics of A's rows and B's columns for C = A @ B; ``ea`` and ``eb`` are the exponents of A's and B's
    largest magnitudes (0 for an operand of zeros), ``k`` the inner dimension."""

    rows: LineStats
    cols: LineStats
    ea: int
    eb: int
    k: int


def _exponents(amax: np.ndarray) -> np.ndarray:
    return np.where(amax > 0, np.frexp(amax)[1], 0).astype(np.int64)


def _own_scale_norms(x: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(amax, e, sum (x 2^-e)^2) of each line of a finite x, reducing over ``axis``."""
    amax = np.max(np.abs(x), axis=axis, initial=0.0)
    e = _exponents(amax)
    scaled = np.ldexp(x, -np.expand_dims(e, axis))
    return amax, e, np.sum(scaled * scaled, axis=axis)


def _to_common(norm2: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, int]:
    """Squared norms in units of ``4^e`` each, brought to units of ``4^top``, top the largest e of a nonzero line."""
    live = norm2 > 0
    top = int(e[live].max()) if live.any() else 0
    return np.where(live, np.ldexp(norm2, np.clip(2 * (e - top), -2200, 0)), 0.0), top


def _line_stats(x: np.ndarray, axis: int, weights: np.ndarray, bad: np.ndarray) -> LineStats:
    amax, e, norm2 = _own_scale_norms(x, axis)
    scaled = np.ldexp(x, -np.expand_dims(e, axis))
    w = weights[None, :] if axis == 1 else weights[:, None]  # row i of A meets B's rows l; column j of B, A's columns
    cross2 = np.sum(scaled * scaled * w, axis=axis)
    _, s = line_terms(x, axis)
    return LineStats(amax, e, s, norm2, cross2, bad)


def gemm_stats(a: np.ndarray, b: np.ndarray) -> GemmStats:
    """:class:`GemmStats` of A (m x k) and B (k x n), NumPy (what the GPU computes, up to the order of its sums)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    bad_rows, bad_cols = ~np.isfinite(a).all(axis=1), ~np.isfinite(b).all(axis=0)
    a = np.where(np.isfinite(a), a, 0.0)
    b = np.where(np.isfinite(b), b, 0.0)
    _, a_col_e, a_col_norm2 = _own_scale_norms(a, 0)  # A's columns weigh the columns of B
    _, b_row_e, b_row_norm2 = _own_scale_norms(b, 1)  # B's rows weigh the rows of A
    q, ea = _to_common(a_col_norm2, a_col_e)
    r, eb = _to_common(b_row_norm2, b_row_e)
    return GemmStats(_line_stats(a, 1, r, bad_rows), _line_stats(b, 0, q, bad_cols), ea, eb, a.shape[1])


@dataclass(frozen=True)
class Scheme:
    """How a scheme turns a count into each line's error exponent: ``eps = 2^x`` with
    ``x = -floor((offset(count) + g) / divisor)``, where ``g = line_offsets(stats)`` depends on the line alone.

    Ozaki-II: ``x = -mu = -floor((t + g) / 2)``; Ozaki-I: ``x = e - 8S``, i.e. offset 8S, g = -e, divisor 1.
    ``weight(count)`` multiplies the ``eps_i^2 sum_j eps_j^2`` term of the products a scheme drops (Ozaki-I's
    anti-diagonals past the last; 0 for Ozaki-II). ``counts(k)`` lists the counts to try, fewest first.
    """

    name: str
    unit: str
    divisor: int
    offset: Callable[[int], int]
    weight: Callable[[int], float]
    products: Callable[[int], int]
    line_offsets: Callable[[LineStats], np.ndarray]
    counts: Callable[[int], Sequence[int]]


def _pow4(exponent: np.ndarray) -> np.ndarray:
    return np.ldexp(1.0, np.clip(2 * np.asarray(exponent, np.int64), -2200, 2200))


def estimate(stats: GemmStats, scheme: Scheme, count: int) -> float:
    """The estimate with ``count``: ``max ||E_i|| / (u ||C_i||)`` over the live rows and columns of C.

    In each line's own units (``rho = eps^2 / 4^e``, sums of ``eps^2`` in units of ``4^ea`` and ``4^eb``) the row
    ratio is ``(rho_i (B2 / 3 + W CS) + norm2_i CS / 3) / cross2_i``, the column's alike: every term is a modest
    power of two, whatever the magnitudes of A and B.
    """
    offset, weight = scheme.offset(count), scheme.weight(count)
    sides = []
    for lines, top in ((stats.rows, stats.ea), (stats.cols, stats.eb)):
        x = -((offset + scheme.line_offsets(lines)) // scheme.divisor)
        has_eps = ~lines.bad & (lines.s > 0)
        rho = np.where(has_eps, _pow4(x - lines.e), 0.0)
        eps_sum = float(np.sum(np.where(has_eps, _pow4(x - top), 0.0)))
        norm_sum = float(np.sum(np.where(lines.bad, 0.0, lines.norm2 * _pow4(lines.e - top))))
        sides.append((lines, rho, eps_sum, norm_sum))
    (rows, rho_r, rs, a2), (cols, rho_c, cs, b2) = sides
    worst = 0.0
    for lines, rho, other_eps, other_norm in ((rows, rho_r, cs, b2), (cols, rho_c, rs, a2)):
        live = ~lines.bad & (lines.cross2 > 0)
        if live.any():
            err = rho * (other_norm / 3 + weight * other_eps) + lines.norm2 * other_eps / 3
            worst = max(worst, float(np.max(err[live] / lines.cross2[live])))
    return math.sqrt(worst) / U


def choose(stats: GemmStats, scheme: Scheme, *, low: int | None = None, high: int | None = None) -> Choice:
    """The fewest counts of ``scheme`` (between ``low`` and ``high`` if given) whose estimate meets the target."""
    counts = [c for c in scheme.counts(stats.k) if (low is None or c >= low) and (high is None or c <= high)]
    return fewest(scheme.name, counts, lambda c: estimate(stats, scheme, c), target(stats.k), scheme.products)

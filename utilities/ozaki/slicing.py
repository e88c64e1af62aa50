"""Ozaki-I stage 1 and 2: exponent shifts and int8 slices (NumPy reference).

A row x of A (a column of B) with shift e is written as ``S`` balanced base-256 digits::

    x_hat = sum_s d_s * 2**(e - 7 - 8*s),   s = 0 .. S-1,   d_s in [-128, 127],   d_0 in [-127, 127]

where ``N = rint(x * 2**(8*S - 1 - e))`` (round half to even) and ``d_s`` are the balanced digits of ``N``.
GPU kernels are checked against these functions digit for digit, so layouts and semantics are a contract.
"""

from __future__ import annotations

from numbers import Integral

import numpy as np

from ..operands import NONFINITE_SHIFT

MIN_SLICES = 1
MAX_SLICES = 12

_MARGIN = 127.0 / 128.0


class SlicesError(ValueError):
    """The number of slices is not an integer in [MIN_SLICES, MAX_SLICES]."""


def check_slices(slices: object) -> int:
    """Return ``slices`` as an int, or raise SlicesError."""
    if isinstance(slices, bool) or not isinstance(slices, Integral):
        raise SlicesError(f"slices must be an int in [{MIN_SLICES}, {MAX_SLICES}], got {slices!r}")
    if not MIN_SLICES <= int(slices) <= MAX_SLICES:
        raise SlicesError(
            f"slices = {int(slices)} is out of range: use {MIN_SLICES} to {MAX_SLICES} slices "
            "(7 slices give about 55 bits per row, close to FP64's 53)"
        )
    return int(slices)


def exponent_shifts(x: np.ndarray, axis: int) -> np.ndarray:
    """Per-line exponent shifts of ``x``, reducing over ``axis`` (int32).

    For each line: ``mu = max |x|``; ``e = 0`` if ``mu == 0``; else with ``mant, E = frexp(mu)`` (mant in [0.5, 1)),
    ``e = E + 1 if mant > 127/128 else E``. Hence ``mu <= (127/128) * 2**e``, and ``e`` is the smallest integer with
    that property (so ``2**e <= 2 * (128/127) * mu``). A line holding a NaN or an Inf gets ``NONFINITE_SHIFT``.
    Subnormal maxima are fine: frexp normalises them.
    """
    x = np.asarray(x, dtype=np.float64)
    finite = np.isfinite(x).all(axis=axis)
    mu = np.max(np.abs(np.where(np.isfinite(x), x, 0.0)), axis=axis, initial=0.0)
    mant, exp = np.frexp(mu)  # frexp(0) = (0, 0): a zero line gets e = 0
    shifts = (exp + (mant > _MARGIN)).astype(np.int32)
    shifts[~finite] = NONFINITE_SHIFT
    return shifts


def row_shifts(a: np.ndarray) -> np.ndarray:
    """Exponent shift ``e_i`` of each row of A (m,), int32."""
    return exponent_shifts(a, axis=1)


def col_shifts(b: np.ndarray) -> np.ndarray:
    """Exponent shift ``f_j`` of each column of B (n,), int32."""
    return exponent_shifts(b, axis=0)


def slice_matrix(x: np.ndarray, shifts: np.ndarray, slices: int, axis: int) -> np.ndarray:
    """Balanced base-256 digits of ``x``, int8 of shape ``(slices, *x.shape)``, in the layout of ``x``.

    ``shifts`` holds one exponent per line, ``axis`` is the axis it was reduced over (1: per row, 0: per column),
    and every line must satisfy ``max |x| <= (127/128) * 2**e`` (``exponent_shifts`` guarantees it).
    Digit ``s`` has weight ``2**(e - 7 - 8*s)``; the digits are those of ``N = rint(x * 2**(8*S - 1 - e))``.
    Lines whose shift is ``NONFINITE_SHIFT`` get all-zero digits.

    Round trip: ``|x - x_hat| <= 2**(e - 8*S)`` elementwise, i.e. ``<= 2**(1 - 8*S) * (128/127) * mu``
    relative to the line maximum ``mu`` (S = 7: 55 bits).
    """
    slices = check_slices(slices)
    x = np.asarray(x, dtype=np.float64)
    shifts = np.asarray(shifts)
    bad = shifts == NONFINITE_SHIFT
    e = np.expand_dims(np.where(bad, 0, shifts).astype(np.int64), axis)
    x = np.where(np.expand_dims(bad, axis), 0.0, x)

    # Exactness, all in FP64, on the magnitude (the sign is applied at the end):
    # - t = |x| * 2**(7 - e) is a power-of-two scaling, exact unless it underflows; then |N| < 2**(-1022 + 88) < 1/2,
    #   so N = 0, and the tiny t also yields all-zero digits below. With the margin, 0 <= t <= 127.
    # - u = floor(t) is an integer of at most 8 bits: exact. t - u is exact: t < 1 gives t - 0, and t >= 1 gives
    #   u <= t < u + 1 <= 2u (Sterbenz). Times 256 is exact, and the new t stays in [0, 256).
    # - The invariant |x| * 2**(8S-1-e) = sum_{s<S-1} u_s 256**(S-1-s) + t holds exactly, and the sum is a multiple
    #   of 256 (even), so rint (ties to even) of the whole equals that sum + rint(t): the last digit is rint(t).
    # - rint(-y) = -rint(y), so signing the digits gives N exactly; the carry pass below makes them balanced.
    # A signed floor (floor(t) for t < 0) would not be exact: t - floor(t) = 1 - |t| can need more than 53 bits.
    t = np.ldexp(np.abs(x), 7 - e)
    digits = np.empty((slices, *x.shape), dtype=np.float64)
    for s in range(slices - 1):
        digits[s] = np.floor(t)
        t = (t - digits[s]) * 256.0
    digits[slices - 1] = np.rint(t)
    digits *= np.where(np.signbit(x), -1.0, 1.0)

    # Carry pass, lowest digit first: bring every digit into [-128, 127] (small integers, exact).
    for s in range(slices - 1, 0, -1):
        up = digits[s] >= 128.0
        down = digits[s] < -128.0
        digits[s] += 256.0 * (down.astype(np.float64) - up)
        digits[s - 1] += up.astype(np.float64) - down
    if not (np.abs(digits[0]) <= 127.0).all():
        raise ValueError("a line exceeds (127/128) * 2**e for its shift e: compute the shifts with exponent_shifts()")
    return digits.astype(np.int8)


def slice_rows(a: np.ndarray, slices: int) -> tuple[np.ndarray, np.ndarray]:
    """Slice each row of A (m x k): returns ``a_slices`` int8 (S, m, k) C-contiguous and the row shifts ``e`` (m,).

    ``a[i, l] ~= sum_s a_slices[s, i, l] * 2**(e[i] - 7 - 8*s)``.
    """
    e = row_shifts(a)
    return np.ascontiguousarray(slice_matrix(a, e, slices, axis=1)), e


def slice_cols(b: np.ndarray, slices: int) -> tuple[np.ndarray, np.ndarray]:
    """Slice each column of B (k x n): returns ``b_slices`` int8 (S, n, k) C-contiguous and column shifts ``f`` (n,).

    Each slice is stored TRANSPOSED (K-contiguous, ``b_slices[s] = B_s.T``), the operand layout an int8
    tensor-core GEMM wants for both A and B: ``b[l, j] ~= sum_s b_slices[s, j, l] * 2**(f[j] - 7 - 8*s)``.
    """
    f = col_shifts(b)
    return np.ascontiguousarray(slice_matrix(np.asarray(b).T, f, slices, axis=1)), f


def _unslice(digits: np.ndarray, shifts: np.ndarray) -> np.ndarray:
    """Exact ``sum_s digits[s] * 2**(shift - 7 - 8*s)`` for digits (S, p, q) and per-row shifts (p,)."""
    # x_hat is x rounded to the grid 2**(e + 1 - 8S): it has no more significant bits than x, so it is an FP64
    # number (barring overflow when |x| is within 2**(e - 8S) of 2**1024, possible for S <= 6). Sum y = x_hat * 2**-e
    # first (weights 2**(-7-8s), far from under/overflow): the partial sums of digits 0..5 have at most 48 bits and
    # those of digits 6..11 at most 49 bits, so both are exact, and adding the two rounds the exact, representable y
    # to itself. The final ldexp by e is exact because x_hat is representable.
    parts = [np.zeros(digits.shape[1:]), np.zeros(digits.shape[1:])]
    for s in range(digits.shape[0]):
        parts[s // 6] += digits[s] * 2.0 ** (-7 - 8 * s)
    e = np.where(shifts == NONFINITE_SHIFT, 0, shifts).astype(np.int64)[:, None]
    with np.errstate(over="ignore"):
        return np.ldexp(parts[0] + parts[1], e)


def unslice_rows(a_slices: np.ndarray, e: np.ndarray) -> np.ndarray:
    """The exact FP64 ``x_hat`` (m x k) that ``slice_rows`` represents (rows with the sentinel give 0)."""
    return _unslice(a_slices, e)


def unslice_cols(b_slices: np.ndarray, f: np.ndarray) -> np.ndarray:
    """The exact FP64 ``x_hat`` (k x n) that ``slice_cols`` represents, from its transposed (S, n, k) layout."""
    return np.ascontiguousarray(_unslice(b_slices, f).T)

"""Error measures of a computed C against a reference given as a double-double (hi, lo). NumPy only.

The GPU report uses the keys of ``error_report``: ``normwise``, ``max_elementwise``, ``against``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .exact import matmul_dd
from .inputs import sample_rows


def _difference(c: np.ndarray, ref_hi: np.ndarray, ref_lo: np.ndarray | None) -> np.ndarray:
    """``c - (hi + lo)`` evaluated as ``(c - hi) - lo`` (c - hi is exact when c is close to hi)."""
    c = np.asarray(c, dtype=np.float64)
    ref_hi = np.asarray(ref_hi, dtype=np.float64)
    if c.shape != ref_hi.shape:
        raise ValueError(f"c has shape {c.shape}, the reference {ref_hi.shape}")
    diff = c - ref_hi
    return diff if ref_lo is None else diff - np.asarray(ref_lo, dtype=np.float64)


def _frobenius(x: np.ndarray) -> float:
    """||x||_F without overflow or underflow: scaled by a power of two near max |x|. NaN if x holds a NaN."""
    top = float(np.max(np.abs(x), initial=0.0))
    if not np.isfinite(top):
        return top
    if top == 0.0:
        return 0.0
    shift = int(np.frexp(top)[1])
    return float(np.ldexp(np.sqrt(np.sum(np.ldexp(x, -shift) ** 2)), shift))


def normwise_relative_error(c: np.ndarray, ref_hi: np.ndarray, ref_lo: np.ndarray | None = None) -> float:
    """``||c - ref||_F / ||ref||_F``; 0 when both are zero, inf when only the reference is zero, NaN if c has NaN."""
    diff_norm = _frobenius(_difference(c, ref_hi, ref_lo))
    ref_norm = _frobenius(np.asarray(ref_hi, dtype=np.float64))
    if ref_norm == 0.0:
        if np.isnan(diff_norm):
            return diff_norm
        return 0.0 if diff_norm == 0.0 else np.inf
    return diff_norm / ref_norm


def max_elementwise_relative_error(c: np.ndarray, ref_hi: np.ndarray, ref_lo: np.ndarray | None = None) -> float:
    """``max_ij |c - ref| / |ref|``, where an entry with ref == 0 counts 0 if c == 0 exactly and inf otherwise."""
    diff = np.abs(_difference(c, ref_hi, ref_lo))
    ref = np.abs(np.asarray(ref_hi, dtype=np.float64))  # |hi + lo| = |hi| (1 + O(u)); hi == 0 implies lo == 0
    zero = ref == 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(zero, np.where(diff == 0.0, 0.0, np.inf), diff / np.where(zero, 1.0, ref))
    rel = np.where(np.isnan(diff), np.nan, rel)
    return float(np.max(rel, initial=0.0))


def worst_line_error(c: np.ndarray, ref_hi: np.ndarray, ref_lo: np.ndarray | None = None) -> float:
    """The largest normwise relative error of a row or a column of C: what ``utilities.ozaki.precision`` estimates
    (lines of the reference that are zero are left out)."""
    diff = _difference(c, ref_hi, ref_lo)
    ref = np.asarray(ref_hi, dtype=np.float64)
    worst = 0.0
    for axis in (1, 0):
        moved_diff, moved_ref = np.moveaxis(diff, axis, -1), np.moveaxis(ref, axis, -1)
        for line_diff, line_ref in zip(
            moved_diff.reshape(-1, moved_diff.shape[-1]), moved_ref.reshape(-1, moved_ref.shape[-1]), strict=True
        ):
            norm = _frobenius(line_ref)
            if norm:
                worst = max(worst, _frobenius(line_diff) / norm)
    return worst


def error_report(
    c: np.ndarray, ref_hi: np.ndarray, ref_lo: np.ndarray | None = None, against: str = "double-double"
) -> dict:
    """``{"normwise": ..., "max_elementwise": ..., "against": against}`` (the GPU report's format)."""
    return {
        "normwise": normwise_relative_error(c, ref_hi, ref_lo),
        "max_elementwise": max_elementwise_relative_error(c, ref_hi, ref_lo),
        "against": against,
    }


def _ratio(emulated: float, native: float) -> float:
    """emulated / native, with 0/0 = 1 (both exact) and x/0 = inf."""
    if native == 0.0:
        return 1.0 if emulated == 0.0 else np.inf
    return emulated / native


def compare_with_native(
    a: np.ndarray, b: np.ndarray, c_emulated: np.ndarray, c_native: np.ndarray | None = None
) -> dict:
    """Errors of the emulated C and of native FP64 DGEMM (``a @ b`` in NumPy unless given) against ``matmul_dd``.

    Returns ``{"emulated": error_report, "native": error_report, "ratio_normwise": ..., "ratio_max_elementwise": ...}``
    with ratio = emulated / native (1 when both are 0, inf when only native is 0).
    """
    hi, lo = matmul_dd(a, b)
    if c_native is None:
        c_native = np.asarray(a) @ np.asarray(b)
    emulated = error_report(c_emulated, hi, lo)
    native = error_report(c_native, hi, lo)
    return {
        "emulated": emulated,
        "native": native,
        "ratio_normwise": _ratio(emulated["normwise"], native["normwise"]),
        "ratio_max_elementwise": _ratio(emulated["max_elementwise"], native["max_elementwise"]),
    }


def bounded_error(got: np.ndarray, want: np.ndarray, bound: np.ndarray, against: str) -> dict:
    """The report's ``error`` entry against a reference with a derived elementwise bound: the normwise relative
    error, and ``max_elementwise`` = max |error| / bound (at most 1 when every entry is within its bound)."""
    diff = np.abs(got.astype(np.float64) - want)
    diff[~np.isfinite(diff)] = np.finfo(np.float64).max  # NaN or Inf in the output: as wrong as can be recorded
    norm = float(np.linalg.norm(want))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(diff == 0, 0.0, diff / np.maximum(bound, np.finfo(np.float64).tiny))
    return {
        "normwise": min(float(np.linalg.norm(diff) / norm) if norm else float(np.linalg.norm(diff)), 1e300),
        "max_elementwise": min(float(np.max(ratio)), 1e300),
        "against": against + "; max_elementwise = max |error| / derived bound",
    }


def error_rows(m: int, count: int = 16, seed: int = 0) -> np.ndarray | None:
    """Rows on which to measure errors: all of them (None) up to 1024, else ``count`` of them."""
    return None if m <= 1024 else sample_rows(m, count, seed)


def sampled_error(c: Any, a: np.ndarray, b: np.ndarray, rows: np.ndarray | None = None) -> dict[str, Any]:
    """Errors of ``c`` against the double-double product, on every row, or on ``rows`` only (large sizes)."""
    c = c.get() if hasattr(c, "get") else np.asarray(c)  # a CuPy array comes to the host
    if rows is None:
        hi, lo = matmul_dd(a, b)
        return error_report(c, hi, lo, against="double-double")
    hi, lo = matmul_dd(a[rows], b)
    return error_report(c[rows], hi, lo, against=f"double-double, {len(rows)} sampled rows")

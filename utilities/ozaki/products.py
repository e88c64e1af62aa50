"""Ozaki-I stage 3: the int8 slice products and their anti-diagonal sums (NumPy reference), and the int32 budget.

Ozaki-I keeps the products ``A_s @ B_t`` with ``s + t <= S - 1``. Term (s, t) has the weight
``2**(e_i + f_j - 14 - 8(s+t))``, so the terms of one anti-diagonal ``d = s + t`` share it and are summed in integers.
"""

from __future__ import annotations

import numpy as np

from .slicing import check_slices

INT32_MAX = int(np.iinfo(np.int32).max)
_PRODUCT_MAX = 128 * 128  # |digit| <= 128, so |digit * digit| <= 2**14
_FP64_EXACT = 2**53  # integer-valued FP64 sums are exact while every partial sum stays below this


class Int32OverflowError(ValueError):
    """The int32 accumulators of the slice products could overflow for this k and number of slices."""


def product_terms(slices: int) -> list[tuple[int, int]]:
    """The S(S+1)/2 Ozaki-I terms (s, t) with s + t <= S - 1, by diagonal d = s + t ascending, then s ascending."""
    slices = check_slices(slices)
    return [(s, d - s) for d in range(slices) for s in range(d + 1)]


def max_k_int32(slices: int, terms_per_accumulator: int | None = None) -> int:
    """Largest k for which int32 accumulators of ``terms_per_accumulator`` products cannot overflow.

    Every entry of ``A_s @ B_t`` is at most ``k * 2**14`` in magnitude (|digit| <= 128), so an accumulator summing
    ``T`` products stays within int32 while ``T * k * 2**14 <= 2**31 - 1``. The default ``T = S`` is the longest
    anti-diagonal (fused and partially fused kernels accumulate a whole diagonal in int32): 18724 for S = 7.
    ``T = 1`` is the unfused kernel, one int32 output per product: 131071.
    """
    slices = check_slices(slices)
    terms = slices if terms_per_accumulator is None else int(terms_per_accumulator)
    if terms < 1:
        raise ValueError(f"terms_per_accumulator must be >= 1, got {terms}")
    return INT32_MAX // (terms * _PRODUCT_MAX)


def check_int32_budget(k: int, slices: int, terms_per_accumulator: int | None = None) -> None:
    """Raise Int32OverflowError if ``k`` exceeds ``max_k_int32(slices, terms_per_accumulator)``."""
    limit = max_k_int32(slices, terms_per_accumulator)
    if k > limit:
        terms = slices if terms_per_accumulator is None else terms_per_accumulator
        raise Int32OverflowError(
            f"k = {k} is too large for int32 accumulation with {slices} slices ({terms} products per accumulator): "
            f"the limit is k <= {limit}. Split K into chunks of at most {limit} and add the chunks' results, "
            "or use fewer slices."
        )


def _check_slice_pair(a_slices: np.ndarray, b_slices: np.ndarray) -> tuple[int, int, int, int]:
    """Validate a_slices (S, m, k) and b_slices (S, n, k), both int8; return (S, m, n, k)."""
    for name, x in (("a_slices", a_slices), ("b_slices", b_slices)):
        if not isinstance(x, np.ndarray) or x.dtype != np.int8 or x.ndim != 3:
            raise ValueError(f"{name} must be an int8 array of shape (S, rows, k), got {getattr(x, 'shape', x)!r}")
    if a_slices.shape[0] != b_slices.shape[0] or a_slices.shape[2] != b_slices.shape[2]:
        raise ValueError(
            f"a_slices {a_slices.shape} and b_slices {b_slices.shape} must be (S, m, k) and (S, n, k), same S and k"
        )
    slices = check_slices(a_slices.shape[0])
    return slices, a_slices.shape[1], b_slices.shape[1], a_slices.shape[2]


def _to_int32(x: np.ndarray) -> np.ndarray:
    """Integer-valued float64 -> int32, after checking the range (the budget check makes it hold)."""
    if x.size and np.abs(x).max() > INT32_MAX:
        raise Int32OverflowError(f"an int32 accumulator would hold {np.abs(x).max():.0f} > {INT32_MAX}")
    return x.astype(np.int32)


def slice_products(a_slices: np.ndarray, b_slices: np.ndarray) -> np.ndarray:
    """Every Ozaki-I term ``P[term] = A_s @ B_t`` (``B_t = b_slices[t].T``), int32 of shape (S(S+1)/2, m, n).

    Terms are in ``product_terms(S)`` order. This is what an unfused kernel produces (one int32 output per
    product), so the budget checked is ``max_k_int32(S, terms_per_accumulator=1)``.
    The float64 GEMMs are exact: every partial sum is an integer below ``k * 2**14 < 2**53``.
    """
    slices, m, n, k = _check_slice_pair(a_slices, b_slices)
    check_int32_budget(k, slices, terms_per_accumulator=1)
    assert k * _PRODUCT_MAX < _FP64_EXACT
    a64 = a_slices.astype(np.float64)
    b64 = b_slices.astype(np.float64)
    out = np.empty((slices * (slices + 1) // 2, m, n), dtype=np.int32)
    for term, (s, t) in enumerate(product_terms(slices)):
        out[term] = _to_int32(a64[s] @ b64[t].T)
    return out


def diagonal_sums(a_slices: np.ndarray, b_slices: np.ndarray) -> np.ndarray:
    """Anti-diagonal sums ``D_d = sum_{s+t=d} A_s @ B_t``, int32 of shape (S, m, n), d = 0 .. S-1.

    ``|D_d| <= (d + 1) * k * 2**14``; the budget checked is ``max_k_int32(S)`` (a whole diagonal per int32
    accumulator, as in the fused kernels). One float64 GEMM per diagonal computes it exactly: the d + 1 slices
    ``[A_0 .. A_d]`` are stacked along k against ``[B_d .. B_0]``, and every partial sum is an integer below
    ``(d + 1) * k * 2**14 < 2**53``.
    """
    slices, m, n, k = _check_slice_pair(a_slices, b_slices)
    check_int32_budget(k, slices)
    assert slices * k * _PRODUCT_MAX < _FP64_EXACT
    # stacked once: [A_0, .., A_{S-1}] and [B_{S-1}, .., B_0]; each diagonal's operands are views into them
    lhs = a_slices.transpose(1, 0, 2).reshape(m, slices * k).astype(np.float64)
    rhs = b_slices[::-1].transpose(1, 0, 2).reshape(n, slices * k).astype(np.float64)
    out = np.empty((slices, m, n), dtype=np.int32)
    for d in range(slices):
        out[d] = _to_int32(lhs[:, : (d + 1) * k] @ rhs[:, (slices - 1 - d) * k :].T)  # [A_0..A_d] [B_d..B_0]^T
    return out

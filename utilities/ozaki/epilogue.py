"""Ozaki-I stage 4: the FP64 epilogue that turns the integer diagonals into C (NumPy reference).

With the anti-diagonal sums ``D_d`` (exact integers), the row shifts ``e`` and the column shifts ``f``::

    acc = 0;  for d = S-1 down to 0:  acc = acc + float64(D_d) * 2**(-8 d)       (smallest weight first)
    C   = alpha * ldexp(acc, e_i + f_j - 14)  [+ beta * C_in, only when beta != 0]

The accumulation order is part of the contract: GPU epilogues must follow it to be bit-identical.
"""

from __future__ import annotations

import numpy as np

from ..operands import NONFINITE_SHIFT, InputShapeError, NonFiniteError, check_matrix

NONFINITE_POLICIES = ("raise", "propagate")


def check_nonfinite_policy(nonfinite: object) -> str:
    """Return ``nonfinite`` if it is "raise" or "propagate", else raise ValueError."""
    if nonfinite not in NONFINITE_POLICIES:
        raise ValueError(f"nonfinite must be 'raise' or 'propagate', got {nonfinite!r}")
    return str(nonfinite)


def _finish(
    acc: np.ndarray, e: np.ndarray, f: np.ndarray, alpha: float, beta: float, c: np.ndarray | None, nonfinite: str
) -> np.ndarray:
    """Scale the accumulated diagonals by 2**(e_i + f_j - 14), apply alpha/beta, and mark non-finite lines."""
    check_nonfinite_policy(nonfinite)
    e = np.asarray(e)
    f = np.asarray(f)
    m, n = acc.shape
    if e.shape != (m,) or f.shape != (n,):
        raise InputShapeError(f"e {e.shape} and f {f.shape} must be ({m},) and ({n},) for C of shape {acc.shape}")
    bad_rows = e == NONFINITE_SHIFT
    bad_cols = f == NONFINITE_SHIFT
    if nonfinite == "raise" and (bad_rows.any() or bad_cols.any()):
        where = (
            f"row {np.flatnonzero(bad_rows)[0]} of A"
            if bad_rows.any()
            else f"column {np.flatnonzero(bad_cols)[0]} of B"
        )
        raise NonFiniteError(
            f"{bad_rows.sum()} rows of A and {bad_cols.sum()} columns of B hold a NaN or an Inf (the first: {where}). "
            "Clean the input, or pass nonfinite='propagate' to get NaN in the affected rows/columns of C."
        )
    shift = np.where(bad_rows, 0, e).astype(np.int64)[:, None] + np.where(bad_cols, 0, f).astype(np.int64)[None, :]
    out = float(alpha) * np.ldexp(acc, shift - 14)
    if beta != 0.0:
        if c is None:
            raise ValueError("beta != 0 needs c, the C matrix to update")
        c = check_matrix(c, "C")
        if c.shape != (m, n):
            raise InputShapeError(f"C has shape {c.shape}, expected ({m}, {n})")
        out = out + float(beta) * c
    out[bad_rows, :] = np.nan
    out[:, bad_cols] = np.nan
    return out


def _accumulate(diagonal, slices: int, shape: tuple[int, int]) -> np.ndarray:
    """``acc = sum_d diagonal(d) * 2**(-8 d)`` in FP64, d from S-1 down to 0 (the documented order)."""
    acc = np.zeros(shape, dtype=np.float64)
    for d in range(slices - 1, -1, -1):
        acc = acc + diagonal(d) * 2.0 ** (-8 * d)  # exact scaling of an integer below 2**53
    return acc


def reconstruct(
    diagonals: np.ndarray,
    e: np.ndarray,
    f: np.ndarray,
    alpha: float = 1.0,
    beta: float = 0.0,
    c: np.ndarray | None = None,
    *,
    nonfinite: str = "propagate",
) -> np.ndarray:
    """C (m x n, float64) from the diagonal sums (S, m, n, int32), row shifts e (m,) and column shifts f (n,).

    ``acc`` is accumulated in FP64 from the smallest weight to the largest (d = S-1 down to 0), then
    ``C = alpha * ldexp(acc, e_i + f_j - 14)``, plus ``beta * c`` only when ``beta != 0``: with beta == 0, c is not
    read at all (BLAS convention: NaN in c is ignored, and c may be None). Rows with ``e_i == NONFINITE_SHIFT`` and
    columns with ``f_j == NONFINITE_SHIFT`` give NaN (``nonfinite="propagate"``), or NonFiniteError (``"raise"``).
    """
    diagonals = np.asarray(diagonals)
    if diagonals.ndim != 3 or not np.issubdtype(diagonals.dtype, np.integer):
        raise ValueError(
            f"diagonals must be an integer array of shape (S, m, n), got {diagonals.dtype} {diagonals.shape}"
        )
    slices, m, n = diagonals.shape
    acc = _accumulate(lambda d: diagonals[d].astype(np.float64), slices, (m, n))
    return _finish(acc, e, f, alpha, beta, c, nonfinite)


def reconstruct_from_products(
    products: np.ndarray,
    e: np.ndarray,
    f: np.ndarray,
    slices: int,
    alpha: float = 1.0,
    beta: float = 0.0,
    c: np.ndarray | None = None,
    *,
    nonfinite: str = "propagate",
) -> np.ndarray:
    """C from the unfused products (S(S+1)/2, m, n, int32, in ``product_terms`` order), bit-identical to reconstruct.

    Each diagonal's products are first summed exactly (int64), then accumulated as in ``reconstruct``.
    """
    products = np.asarray(products)
    count = slices * (slices + 1) // 2
    if products.ndim != 3 or products.shape[0] != count or not np.issubdtype(products.dtype, np.integer):
        raise ValueError(f"products must be an integer array of shape ({count}, m, n), got {products.shape}")
    _, m, n = products.shape

    def diagonal(d: int) -> np.ndarray:
        first = d * (d + 1) // 2  # terms of diagonal d are contiguous in product_terms order
        return products[first : first + d + 1].sum(axis=0, dtype=np.int64).astype(np.float64)

    acc = _accumulate(diagonal, slices, (m, n))
    return _finish(acc, e, f, alpha, beta, c, nonfinite)

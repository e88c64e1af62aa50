"""Ozaki-I DGEMM emulation with int8 slices: the NumPy reference, stage by stage (NumPy only, no GPU imports).

1. ``row_shifts`` / ``col_shifts``: one power-of-two exponent per row of A and column of B.
2. ``slice_rows`` / ``slice_cols``: S balanced base-256 int8 digits per entry; a_slices (S, m, k), b_slices (S, n, k).
3. ``slice_products`` / ``diagonal_sums``: exact int32 products A_s @ B_t, summed per anti-diagonal s + t.
4. ``reconstruct``: FP64 accumulation of the diagonals, scaling by 2**(e_i + f_j - 14), alpha/beta.
5. ``ozaki_gemm_ref`` end to end, ``ozaki_stages`` for stage-by-stage checks, ``error_bound``.
"""

from .epilogue import NONFINITE_POLICIES, reconstruct, reconstruct_from_products
from .products import (
    Int32OverflowError,
    check_int32_budget,
    diagonal_sums,
    max_k_int32,
    product_terms,
    slice_products,
)
from .reference import OzakiStages, error_bound, ozaki_gemm_ref, ozaki_stages
from .slicing import (
    MAX_SLICES,
    MIN_SLICES,
    NONFINITE_SHIFT,
    InputDtypeError,
    InputShapeError,
    NonFiniteError,
    SlicesError,
    col_shifts,
    exponent_shifts,
    row_shifts,
    slice_cols,
    slice_matrix,
    slice_rows,
    unslice_cols,
    unslice_rows,
)

__all__ = [
    "MAX_SLICES",
    "MIN_SLICES",
    "NONFINITE_POLICIES",
    "NONFINITE_SHIFT",
    "InputDtypeError",
    "InputShapeError",
    "Int32OverflowError",
    "NonFiniteError",
    "OzakiStages",
    "SlicesError",
    "check_int32_budget",
    "col_shifts",
    "diagonal_sums",
    "error_bound",
    "exponent_shifts",
    "max_k_int32",
    "ozaki_gemm_ref",
    "ozaki_stages",
    "product_terms",
    "reconstruct",
    "reconstruct_from_products",
    "row_shifts",
    "slice_cols",
    "slice_matrix",
    "slice_products",
    "slice_rows",
    "unslice_cols",
    "unslice_rows",
]

"""Track 3, Ozaki-I: FP64 matrix products emulated with int8 slices on tensor cores.

Modules (the same names hold the same roles in every track):

- the NumPy reference, stage by stage: ``slicing`` (shifts, balanced base-256 digits), ``products`` (exact int32
  slice products, anti-diagonal sums, the int32 budget), ``epilogue`` (the FP64 reconstruction), and
  ``reference`` (end to end, every stage at once for the checkers, the error bound);
- ``check``: the checkers of notebooks 3a-3d;
- ``model``: bytes, operations and the time each design must take;
- ``figures``: the track's plots;
- ``simt``: the plain numba kernels (slicing, the FP64 epilogue) and their launches, and ``SimtPlan``: the plan's
  buffers and plain numba stages (``OzakiGemm`` without its tensor cores; the tests run it in numba's simulator);
- ``tensorcore`` (GPU): the int8 tensor-core kernels (unfused, partially and fully fused) and the plan ``OzakiGemm``;
- ``benchmarks`` (GPU): every variant beside cuBLAS DGEMM and cuBLAS's int8 GEMM.

Importing this package imports the NumPy reference only: 1. ``row_shifts`` / ``col_shifts``; 2. ``slice_rows`` /
``slice_cols``; 3. ``slice_products`` / ``diagonal_sums``; 4. ``reconstruct``; 5. ``ozaki_gemm_ref`` end to end,
``ozaki_stages`` for stage-by-stage checks, ``error_bound``.
"""

from ..operands import NONFINITE_SHIFT, InputDtypeError, InputShapeError, NonFiniteError
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

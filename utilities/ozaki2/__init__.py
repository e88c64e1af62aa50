"""Track 4, Ozaki-II: FP64 matrix products from one int8 product per modulus, rebuilt by the Chinese remainder
theorem (Ozaki, Uchino and Imamura, 2025).

Modules (the same names hold the same roles in every track):

- ``reference``: the NumPy reference, stage by stage (scaling, residues, products, reconstruction), error bound;
- ``precision``: the fewest moduli whose error estimate is FP64 class (Ozaki-I's twin: ``utilities.ozaki.precision``);
- ``check``: the checkers of notebooks 4a and 4b;
- ``model``: bytes, operations and the time each design must take;
- ``figures``: the track's plots;
- ``simt``: the plain numba kernels (residues of A's rows and of B's columns, CRT digits, reconstruction), and
  ``SimtPlan``: the plan's buffers and plain numba stages (``Ozaki2Gemm`` without cuBLAS; run in numba's simulator);
- ``tensorcore`` (GPU): the plan ``Ozaki2Gemm`` (the count chosen on the device, one cuBLAS int8 GEMM per modulus
  or one batched call, digits early or late);
- ``benchmarks`` (GPU): Ozaki-II beside cuBLAS DGEMM and Ozaki-I, every stage against its floor
  (``tools/ozaki2_report.py`` writes them as one report).

Importing this package imports the NumPy reference only.
"""

from .precision import moduli_needed
from .reference import (
    MAX_MODULI,
    MIN_MODULI,
    MODULI,
    Crt,
    ModuliError,
    Ozaki2Stages,
    check_moduli,
    crt,
    error_bound,
    integer_product,
    line_terms,
    modular_products,
    ozaki2_gemm_ref,
    ozaki2_stages,
    reconstruct,
    reduce_products,
    residue,
    residue_range,
    residues,
    scale_exponents,
    to_integers,
)

__all__ = [
    "MAX_MODULI",
    "MIN_MODULI",
    "MODULI",
    "Crt",
    "ModuliError",
    "Ozaki2Stages",
    "check_moduli",
    "crt",
    "error_bound",
    "integer_product",
    "line_terms",
    "moduli_needed",
    "modular_products",
    "ozaki2_gemm_ref",
    "ozaki2_stages",
    "reconstruct",
    "reduce_products",
    "residue",
    "residue_range",
    "residues",
    "scale_exponents",
    "to_integers",
]

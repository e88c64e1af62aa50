"""Track 1, multi-pass tensorization: a tile GEMM's K loop as phases of F fused tensor-core passes.

Modules (the same names hold the same roles in every track):

- ``config``: the pass configuration (``PassConfig``) and what a problem must satisfy;
- ``reference``: the exact product, the FP32 bound, inputs, each phase's contribution (NumPy);
- ``check``: the exercise's checker;
- ``model``: occupancy, registers and the predicted rate;
- ``figures``: the F-sweep figure;
- ``tensorcore`` (GPU): the multi-pass kernel and its plan (``PassGemm``), and cuBLASDx's pipeline (``PipelineGemm``);
- ``benchmarks`` (GPU): every F beside the pipeline and cuBLAS.

Importing this package imports the CPU modules only.
"""

from .config import ACCUMULATOR, DTYPES, INT32_MAX, ITEMSIZE, PASS_K, PassConfig, phase_offsets, validate_problem
from .model import H100, Machine, Prediction, fragment_registers, occupancy, predict, predictions
from .reference import CASES, fp32_bound, gamma, operands, phase_products, reference

__all__ = [
    "ACCUMULATOR",
    "CASES",
    "DTYPES",
    "H100",
    "INT32_MAX",
    "ITEMSIZE",
    "PASS_K",
    "Machine",
    "PassConfig",
    "Prediction",
    "fp32_bound",
    "fragment_registers",
    "gamma",
    "occupancy",
    "operands",
    "phase_offsets",
    "phase_products",
    "predict",
    "predictions",
    "reference",
    "validate_problem",
]

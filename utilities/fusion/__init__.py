"""Track 2, block-resident fusion: GEMM + bias + ReLU and back-to-back GEMMs, FP16 with FP32 accumulation.

Modules (the same names hold the same roles in every track):

- ``reference``: FP64 references, the FP16/FP32 stage semantics, inputs, derived error bounds (NumPy);
- ``check``: the checkers of notebooks 2a and 2b;
- ``model``: bytes and FLOPs of each path, roofline floors;
- ``layout``: the shared-memory plans of the persistent kernels (testable on a CPU);
- ``figures``: the track's plots;
- ``tensorcore`` (GPU): the exercises' kernels and plans, ``GemmBiasRelu`` and ``BackToBack``;
- ``tensorcore_persistent`` (GPU): the persistent back-to-back kernels, both GEMMs on ``mma`` or GEMM 0 on
  cuBLASDx's device pipeline (``PersistentBackToBack``, ``PipelinedBackToBack``);
- ``baselines`` (GPU): the library paths (cuBLAS + elementwise, cuBLASLt's fused epilogues);
- ``benchmarks`` (GPU): every path at the report's shapes.

Importing this package imports nothing: import the module you need.
"""

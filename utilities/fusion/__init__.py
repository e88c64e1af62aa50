"""Block-resident fusion: GEMM + bias + ReLU and back-to-back GEMMs on FP16 with FP32 accumulation.

NumPy only (no GPU imports): ``reference`` (FP64 references, stage semantics, inputs, error bounds),
``traffic`` (bytes and FLOPs of each path, roofline floors), ``check`` (the exercises' checkers),
``figures`` (the track's plots). The GPU side lives in ``utilities.gpu.blockfusion`` (the fused kernels),
``utilities.gpu.fusion_baselines`` (library paths) and ``utilities.gpu.fusion_bench``.
"""

"""Track 2c, epilogue fusion on a convolution: 3x3 conv + bias + ReLU as an implicit GEMM on FP16 tensor cores.

A 3x3, stride 1, padding 1 convolution of an NHWC input is a GEMM of M = B*H*W output pixels by N = C_out filters
over K = 9*C_in: row m of its A operand is the 3x3 neighbourhood of pixel m, channel by channel. No one builds
that matrix: the kernel gathers its A tiles from the input, reading zeros outside the image.

Modules (the same names hold the same roles in every track):

- ``reference``: the index map (which input pixel each tap reads), the FP64 reference and its error bounds, inputs;
- ``simt``: the index map as a device function (the exercise), testable on a CPU;
- ``check``: the checkers of notebook 2c;
- ``model``: bytes and FLOPs of each path;
- ``figures``: the track's pictures and plots;
- ``tensorcore`` (GPU): the implicit-GEMM kernel, fused or not, and its plan ``Conv3x3``;
- ``layout``, ``tensorcore_persistent`` (GPU): the pipelined kernels (a ring of asynchronous gathers) and the
  back-to-back kernel of notebook 2d, with their blocks and shared-memory plans;
- ``halo``, ``tensorcore_halo`` (GPU): the halo kernels, each row tile's input read once and its nine taps' GEMMs
  run on windows of it, a convolution and a back-to-back chain, with their blocks and plans;
- ``baselines`` (GPU): bias + ReLU after the course's kernel, im2col + cuBLAS, cuDNN through PyTorch;
- ``benchmarks`` (GPU): notebook 2c's two-stage kernel and every other path at the report's shapes
  (``conv.twostage``, ``conv.twostage.unfused``, ``conv.library``); the fastest fused kernel (``conv.fused``,
  ``conv.unfused``), the Triton peer and the back-to-back chains (``conv_b2b.*``) at the target shape.

Importing this package imports nothing: import the module you need.
"""

"""Library baselines of the block-resident fusion track (GPU only: CuPy, nvmath-python).

- ``LibraryB2B``: the plain library path, two cuBLAS GEMMs (``cupy.matmul``, FP16 in and out, FP32 compute)
  each followed by a CuPy elementwise kernel: ``relu(alpha0 x)``, then ``relu(alpha1 x + beta1 c)``.
- ``EpilogueB2B``: the strongest library path, two ``nvmath.linalg.advanced.Matmul`` objects (cuBLASLt) planned
  once with the RELU epilogue, alpha, and beta C1 in the second: D0 goes through HBM once each way.
- ``SeparateGemmBiasRelu`` / ``EpilogueGemmBiasRelu``: the same two paths for GEMM + bias + ReLU.

Each moves exactly the bytes that ``utilities.fusion.traffic`` counts for its path. The plain path stores the
pre-activations in FP16 (as a library user would), one rounding more than the fused kernels and cuBLASLt's
epilogues, which apply alpha, beta C and ReLU to the FP32 accumulator.
"""

from __future__ import annotations

import functools
from typing import Any

import cupy as cp
import numpy as np
import nvmath
from nvmath.linalg.advanced import Matmul, MatmulEpilog, MatmulOptions

from .. import cublas


@functools.cache
def _relu_scale_kernel() -> Any:
    """``y = relu(alpha x)`` in FP32, stored as ``y``'s type."""
    return cp.ElementwiseKernel(
        "T x, float32 alpha", "T y", "float v = alpha * (float)x; y = (T)(v > 0.0f ? v : 0.0f)", "fusion_relu_scale"
    )


@functools.cache
def _relu_axpby_kernel() -> Any:
    """``y = relu(alpha x + beta c)`` in FP32, stored as ``y``'s type."""
    return cp.ElementwiseKernel(
        "T x, T c, float32 alpha, float32 beta",
        "T y",
        "float v = alpha * (float)x + beta * (float)c; y = (T)(v > 0.0f ? v : 0.0f)",
        "fusion_relu_axpby",
    )


def _options(**extra: Any) -> MatmulOptions:
    return MatmulOptions(compute_type=nvmath.linalg.ComputeType.COMPUTE_32F, **extra)


def _need_fp16(**arrays: Any) -> None:
    for name, x in arrays.items():
        if x.dtype != cp.float16 or not x.flags.c_contiguous:
            raise TypeError(f"{name} must be a C-contiguous float16 CuPy array, got {x.dtype} with strides {x.strides}")


class LibraryB2B:
    """GEMM, elementwise, GEMM, elementwise; the buffers of P0, D0 and P1 are allocated once."""

    def __init__(self, m: int, k0: int, n0: int, n1: int, batch: int | None = None):
        lead = () if batch is None else (batch,)
        self.shape, self.batch = (m, k0, n0, n1), batch
        self.p0 = cp.empty((*lead, m, n0), cp.float16)
        self.d0 = cp.empty_like(self.p0)
        self.p1 = cp.empty((*lead, m, n1), cp.float16)

    def __call__(self, a0, b0, b1, c1, alpha0: float, alpha1: float, beta1: float, out=None):
        _need_fp16(a0=a0, b0=b0, b1=b1, c1=c1)
        out = cp.empty_like(self.p1) if out is None else out
        cp.matmul(a0, b0, out=self.p0)
        _relu_scale_kernel()(self.p0, np.float32(alpha0), self.d0)
        cp.matmul(self.d0, b1, out=self.p1)
        _relu_axpby_kernel()(self.p1, c1, np.float32(alpha1), np.float32(beta1), out)
        return out


class EpilogueB2B:
    """Two cuBLASLt matmuls with fused epilogues, bound to one set of operands and planned once.

    GEMM0 writes ``relu(alpha0 A0 B0)`` in place into the D0 buffer (its C operand, beta = 0, which cuBLASLt
    does not read), so that GEMM1 is planned once on that buffer; GEMM1 computes
    ``relu(alpha1 D0 B1 + beta1 C1)`` into a new D1 each call. Call ``free()`` (or use ``with``) when done.
    """

    def __init__(self, a0, b0, b1, c1, alpha0: float, alpha1: float, beta1: float):
        _need_fp16(a0=a0, b0=b0, b1=b1, c1=c1)
        self.d0 = cp.empty((*a0.shape[:-1], b0.shape[-1]), cp.float16)
        self.mm0 = Matmul(a0, b0, c=self.d0, alpha=float(alpha0), beta=0.0, options=_options(inplace=True))
        self.mm0.plan(epilog=MatmulEpilog.RELU)
        self.mm1 = Matmul(self.d0, b1, c=c1, alpha=float(alpha1), beta=float(beta1), options=_options())
        self.mm1.plan(epilog=MatmulEpilog.RELU)

    def __call__(self):
        self.mm0.execute()
        return self.mm1.execute()

    def free(self) -> None:
        self.mm0.free()
        self.mm1.free()

    def __enter__(self) -> EpilogueB2B:
        return self

    def __exit__(self, *exc: object) -> None:
        self.free()


class SeparateGemmBiasRelu:
    """cuBLAS GEMM into an FP16 buffer, then one elementwise kernel: ``relu(p + bias)``."""

    def __init__(self, m: int, n: int, k: int):
        self.shape = (m, n, k)
        self.p = cp.empty((m, n), cp.float16)

    def __call__(self, a, b, bias, out=None):
        _need_fp16(a=a, b=b, bias=bias)
        out = cp.empty_like(self.p) if out is None else out
        cp.matmul(a, b, out=self.p)
        cublas.bias_relu(self.p, bias, out)
        return out


class EpilogueGemmBiasRelu:
    """cuBLASLt's RELU_BIAS epilogue, bound to (a, b, bias) and planned once.

    cuBLASLt adds the bias along the rows of a column-major result, so the object computes the transposed
    product ``(B^T A^T)`` whose column-major result is the row-major ``relu(A B + bias)``: no copy either way.
    """

    def __init__(self, a, b, bias):
        _need_fp16(a=a, b=b, bias=bias)
        self.mm = Matmul(b.T, a.T, options=_options())
        self.mm.plan(epilog=MatmulEpilog.RELU_BIAS, epilog_inputs={"bias": bias})

    def __call__(self):
        return self.mm.execute().T

    def free(self) -> None:
        self.mm.free()

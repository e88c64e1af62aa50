"""The course's cuBLAS baselines, ``cublas.dgemm`` and ``cublas.igemm``, on CuPy arrays (CuPy imported lazily),
and their benchmark providers (``dgemm_provider``, ``igemm_provider``: zero-argument callables for ``bench``);
``bias_relu``, the elementwise kernel that the unfused library paths (2a, 2c) run after their GEMM.

``igemm`` is cuBLAS's int8 x int8 -> int32 GEMM (``cublasGemmEx``) with B column-major: integer GEMM in cuBLAS
is fast only in that layout (``instructor-notes/machinery.md`` has the measurement).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

_INT_MAX = 2**31 - 1
CUDA_R_32I = 10  # cudaDataType_t; cupy.cuda.runtime names CUDA_R_8I (3) but not this one


def _require(cond: bool, message: str) -> None:
    if not cond:
        raise ValueError(message)


def _check_matrix(x: Any, label: str, dtype: str, ndim: int = 2) -> None:
    import cupy

    if not isinstance(x, cupy.ndarray):
        raise TypeError(f"{label} must be a cupy.ndarray, got {type(x).__name__}")
    _require(x.dtype == cupy.dtype(dtype), f"{label} must be {dtype}, got {x.dtype}")
    _require(x.ndim == ndim, f"{label} must be {ndim}-D, got shape {x.shape}")
    _require(x.flags.c_contiguous, f"{label} must be C-contiguous (use cupy.ascontiguousarray)")
    _require(x.data.ptr % 4 == 0, f"{label} must start on a 4-byte boundary (a sliced view does not)")


def igemm(a8: Any, b8_colmajor: Any, out: Any | None = None) -> Any:
    """C = A @ B with int8 A (m, k) row-major and B (k, n) column-major, exact in int32 (m, n) row-major.

    Pass B column-major as the C-contiguous (n, k) array B^T (``cupy.ascontiguousarray(b.T)``).
    Requirements, checked here: int8 inputs, C-contiguous, 4-byte aligned; ``k`` a multiple of 4, since
    cuBLAS's integer GEMM (``CUBLAS_COMPUTE_32I``) asks that ``lda`` and ``ldb`` be multiples of 4 and
    both equal ``k`` here. Sums of ``k`` int8 products stay exact in int32 while ``k * 2**14 < 2**31``,
    i.e. ``k < 131072`` (the worst case is -128 * -128 in every term); beyond that they wrap.

    cuBLAS is column-major, so it is asked for C^T (n x m, column-major), whose memory is C row-major:
    C^T = B^T A^T = op(X) op(Y) with
      X = the (n, k) row-major buffer of B^T, which cuBLAS reads as the k x n column-major matrix B
          (ld = k); ``transa = T`` turns it back into B^T (n x k);
      Y = the (m, k) row-major buffer of A, read as the k x m column-major matrix A^T (ld = k); ``transb = N``;
      C^T is n x m column-major with ldc = n.
    So the call is ``gemmEx(T, N, n, m, k, 1, Bt, k, A, k, 0, C, n)``: the "TN" layout that cuBLAS's
    int8 tensor-core kernels are written for.
    """
    return _igemm(a8, b8_colmajor, out, batched=False)


def igemm_batched(a8: Any, b8_colmajor: Any, out: Any | None = None) -> Any:
    """``igemm`` on each of a batch: int8 A (batch, m, k) and B^T (batch, n, k), int32 C (batch, m, n), in one
    ``cublasGemmStridedBatchedEx`` call (same layout and requirements as ``igemm``)."""
    return _igemm(a8, b8_colmajor, out, batched=True)


def _igemm(a8: Any, b8_colmajor: Any, out: Any | None, batched: bool) -> Any:
    import cupy
    import numpy as np
    from cupy.cuda import cublas as libcublas
    from cupy.cuda import device, runtime

    ndim = 3 if batched else 2
    _check_matrix(a8, "a8", "int8", ndim)
    _check_matrix(b8_colmajor, "b8_colmajor", "int8", ndim)
    *lead, m, k = a8.shape
    *lead_b, n, kb = b8_colmajor.shape
    _require(lead == lead_b, f"batch sizes differ: a8 is {a8.shape}, b8_colmajor is {b8_colmajor.shape}")
    _require(kb == k, f"inner sizes differ: a8 is {a8.shape} (m, k), b8_colmajor is {b8_colmajor.shape} (n, k)")
    _require(min(m, n, k, *lead) > 0, f"empty product: m, n, k = {m}, {n}, {k}")
    _require(max(m, n, k) <= _INT_MAX, f"m, n, k must fit in int32, got {m}, {n}, {k}")
    _require(k % 4 == 0, f"k must be a multiple of 4 for cuBLAS's int8 GEMM (lda = ldb = k), got k = {k}")
    if out is None:
        out = cupy.empty((*lead, m, n), dtype=cupy.int32)
    else:
        _check_matrix(out, "out", "int32", ndim)
        _require(out.shape == (*lead, m, n), f"out must have shape {(*lead, m, n)}, got {out.shape}")
    alpha = np.array(1, dtype=np.int32)
    beta = np.array(0, dtype=np.int32)
    handle = device.get_cublas_handle()
    libcublas.setStream(handle, cupy.cuda.get_current_stream().ptr)
    mode = libcublas.getPointerMode(handle)
    libcublas.setPointerMode(handle, libcublas.CUBLAS_POINTER_MODE_HOST)
    T, N, r8, compute, algo = (
        libcublas.CUBLAS_OP_T,
        libcublas.CUBLAS_OP_N,
        runtime.CUDA_R_8I,
        libcublas.CUBLAS_COMPUTE_32I,
        libcublas.CUBLAS_GEMM_DEFAULT,
    )
    b_ptr, a_ptr, c_ptr = b8_colmajor.data.ptr, a8.data.ptr, out.data.ptr
    one, zero = alpha.ctypes.data, beta.ctypes.data
    try:
        if batched:
            libcublas.gemmStridedBatchedEx(
                handle,
                T,
                N,
                n,
                m,
                k,
                one,
                b_ptr,
                r8,
                k,
                n * k,
                a_ptr,
                r8,
                k,
                m * k,
                zero,
                c_ptr,
                CUDA_R_32I,
                n,
                m * n,
                lead[0],
                compute,
                algo,
            )
        else:
            libcublas.gemmEx(
                handle, T, N, n, m, k, one, b_ptr, r8, k, a_ptr, r8, k, zero, c_ptr, CUDA_R_32I, n, compute, algo
            )
    finally:
        libcublas.setPointerMode(handle, mode)
    return out


def dgemm(a: Any, b: Any, out: Any | None = None) -> Any:
    """C = A @ B in float64 through ``cupy.matmul`` (cuBLAS DGEMM); ``out`` (m, n) float64 is reused if given."""
    import cupy

    for x, label in ((a, "a"), (b, "b")):
        if not isinstance(x, cupy.ndarray):
            raise TypeError(f"{label} must be a cupy.ndarray, got {type(x).__name__}")
        _require(x.dtype == cupy.float64, f"{label} must be float64, got {x.dtype}")
        _require(x.ndim == 2, f"{label} must be 2-D, got shape {x.shape}")
    _require(a.shape[1] == b.shape[0], f"inner sizes differ: a is {a.shape}, b is {b.shape}")
    if out is not None:
        _require(
            isinstance(out, cupy.ndarray) and out.dtype == cupy.float64 and out.shape == (a.shape[0], b.shape[1]),
            f"out must be a float64 cupy.ndarray of shape {(a.shape[0], b.shape[1])}",
        )
    return cupy.matmul(a, b, out=out)


def dgemm_provider(a: Any, b: Any) -> Callable[[], object]:
    """``dgemm`` on CuPy float64 ``a`` (m, k) and ``b`` (k, n), writing into a buffer allocated once."""
    out = dgemm(a, b)
    return lambda: dgemm(a, b, out=out)


def igemm_provider(a8: Any, b8_colmajor: Any) -> Callable[[], object]:
    """``igemm`` on CuPy int8 ``a8`` (m, k) and ``b8_colmajor`` (n, k) = B^T, into one int32 buffer."""
    out = igemm(a8, b8_colmajor)
    return lambda: igemm(a8, b8_colmajor, out=out)


@functools.cache
def _bias_relu_kernel() -> Any:
    import cupy

    return cupy.ElementwiseKernel(
        "T x, T bias", "T y", "float v = (float)x + (float)bias; y = (T)(v > 0.0f ? v : 0.0f)", "fusion_bias_relu"
    )


def bias_relu(x: Any, bias: Any, out: Any) -> Any:
    """``out = relu(x + bias)`` in FP32, stored as ``out``'s type; ``bias`` broadcasts along the last axis."""
    return _bias_relu_kernel()(x, bias, out)

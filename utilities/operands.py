"""Checks on the operands a plan or a reference is called with: the error names the problem and the fix.

- host FP64 matrices of the DGEMM emulations (``check_matrix``), and the sentinel exponent of a line that holds a
  NaN or an Inf (``NONFINITE_SHIFT``), which both emulations' kernels and references share;
- GPU arrays of the plans (``require``, ``require_fp64_gemm``; CuPy imported lazily).
"""

from __future__ import annotations

from typing import Any

import numpy as np

NONFINITE_SHIFT = int(np.iinfo(np.int32).max)
"""Exponent shift of a row (column) that holds a NaN or an Inf; its digits are all zero."""


class InputDtypeError(TypeError):
    """An input matrix is not a NumPy float64 array."""


class InputShapeError(ValueError):
    """An input matrix is not 2-D, or the inner dimensions of A and B differ."""


class NonFiniteError(ValueError):
    """An input holds a NaN or an Inf and the policy is ``nonfinite="raise"``."""


def check_matrix(x: object, name: str) -> np.ndarray:
    """Return ``x`` if it is a 2-D float64 ndarray, else raise InputDtypeError or InputShapeError."""
    if not isinstance(x, np.ndarray):
        raise InputDtypeError(f"{name} must be a NumPy float64 array, got {type(x).__name__}: use np.asarray(...)")
    if x.dtype != np.float64:
        raise InputDtypeError(
            f"{name} has dtype {x.dtype}, the emulation needs float64: convert with .astype(np.float64)"
        )
    if x.ndim != 2:
        raise InputShapeError(f"{name} must be 2-D, got {x.ndim}-D with shape {x.shape}")
    return x


ALIGNMENT = 16  # bytes: every operand's first element (CuPy allocations start on 256)


def require(name: str, x: Any, dtype: Any, shape: tuple[int, ...], hint: str = "") -> None:
    """Raise unless ``x`` is a C-contiguous, 16-byte aligned CuPy array of this dtype and shape.

    ``hint`` follows a shape error.
    """
    import cupy as cp

    dtype = np.dtype(dtype)
    if not isinstance(x, cp.ndarray):
        raise TypeError(f"{name} must be a cupy.ndarray on the GPU, got {type(x).__name__}: use cupy.asarray")
    if x.dtype != dtype:
        raise TypeError(f"{name} must be {dtype}, got {x.dtype}: convert with .astype(cupy.{dtype})")
    if tuple(x.shape) != shape:
        raise ValueError(f"{name} has shape {tuple(x.shape)}, this plan was built for {shape}{hint}: build a new plan")
    if not x.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous (row-major): use cupy.ascontiguousarray({name})")
    if x.data.ptr % ALIGNMENT:
        raise ValueError(
            f"{name} must start on a {ALIGNMENT}-byte boundary (the kernels copy {ALIGNMENT} bytes at a time); this "
            f"view of a larger array does not: pass a fresh copy, {name}.copy()"
        )


def require_fp64_gemm(a: Any, b: Any, c: Any, beta: float, shape: tuple[int, int, int]) -> None:
    """Raise unless A (m x k) and B (k x n) are C-contiguous float64 CuPy arrays of the plan's ``shape`` (m, k, n),
    and C, when beta != 0, a float64 (m, n) array (the emulated DGEMMs' plans)."""
    import cupy as cp

    m, k, n = shape
    for name, x, want in (("A", a, (m, k)), ("B", b, (k, n))):
        if not isinstance(x, cp.ndarray):
            raise TypeError(f"{name} must be a cupy.ndarray on the GPU, got {type(x).__name__}: use cupy.asarray")
        if x.dtype != np.float64:
            raise TypeError(f"{name} must be float64, got {x.dtype}: convert with .astype(cupy.float64)")
        if tuple(x.shape) != want:
            raise ValueError(f"{name} has shape {tuple(x.shape)}, this plan was built for {want}: build a new plan")
        if not x.flags.c_contiguous:
            raise ValueError(f"{name} must be C-contiguous (row-major): use cupy.ascontiguousarray({name.lower()})")
    if beta != 0.0 and (c is None or tuple(c.shape) != (m, n) or c.dtype != np.float64):
        raise ValueError(f"beta != 0 needs C: a float64 ({m}, {n}) array")

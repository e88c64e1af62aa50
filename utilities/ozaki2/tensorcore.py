"""Ozaki-II DGEMM emulation on int8 tensor cores (GPU only): the plan ``Ozaki2Gemm``.

Stages (each compared with ``utilities.ozaki2.reference`` by the checkers):

1. scaling and residues: ``utilities.ozaki2.simt``'s row kernel on A and on B's transpose (one pass each);
2. N int8 products, one per modulus, on tensor cores through cuBLAS's int8 GEMM (``cublasGemmStridedBatchedEx``,
   B column-major: the layout its int8 kernels are fast in), int32 out;
3. the reconstruction: ``simt``'s kernel reduces each product to its CRT digit and rebuilds C.

The products stage is unfused: N int32 matrices go through device memory (4 bytes an entry each, written and read
once). The residues are int8 planes (N, m, kp) and (N, n, kp), K-contiguous, kp a multiple of 16.
``moduli="auto"`` chooses the count from the inputs (``utilities.ozaki2.precision``), from statistics computed on
the GPU, before the residues.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import cupy as cp
import numpy as np

from .. import cublas
from ..machinery import launch
from ..operands import require_fp64_gemm
from ..precision import Choice, LineNorms
from ..smem import ceil_to
from . import reference as ref
from . import simt
from .precision import moduli_needed_from

K_ALIGN = 16  # the residue planes' padded width: cuBLAS's int8 GEMM wants lda = ldb a multiple of 4 (16 B lines)


@dataclass(frozen=True)
class Kernels:
    """Kernel factories a plan uses instead of the course's (the exercises pass the attendee's), in stage order.

    None means the course's: ``make_residue`` and ``make_reconstruct_kernel`` (``utilities.ozaki2.simt``).
    """

    residue: Any = None
    reconstruct: Any = None

    def given(self) -> list[Any]:
        """The factories given, in stage order (for a checker's ``exercise=``)."""
        return [f for f in vars(self).values() if f is not None]


_WEIGHTED_SQUARES = _MAX_ABS = None


def _weighted_squares(x: Any, scale: float, weight: Any, axis: int) -> Any:
    """``sum (scale x)^2 weight`` along an axis, NaN and Inf counted as zero, ``weight`` broadcast against x (a CuPy
    reduction kernel: no temporary the size of x)."""
    global _WEIGHTED_SQUARES
    if _WEIGHTED_SQUARES is None:
        _WEIGHTED_SQUARES = cp.ReductionKernel(
            "float64 x, float64 s, float64 w", "float64 y", "isfinite(x) ? (x * s) * (x * s) * w : 0.0", "a + b",
            "y = a", "0", "course_weighted_squares",
        )  # fmt: skip
    return _WEIGHTED_SQUARES(x, cp.asarray(scale, cp.float64), cp.asarray(weight, cp.float64), axis=axis)


def line_norms(a: Any, b: Any) -> LineNorms:
    """``precision.LineNorms`` of CuPy A and B, on the GPU (six reductions, no temporary the size of A or B)."""

    global _MAX_ABS
    if _MAX_ABS is None:
        _MAX_ABS = cp.ReductionKernel("float64 x", "float64 y", "isfinite(x) ? fabs(x) : 0.0", "max(a, b)", "y = a",
                                      "0", "course_max_abs")  # fmt: skip

    def exponent(x: Any) -> int:
        return int(np.frexp(float(_MAX_ABS(x)))[1])

    ea, eb = exponent(a), exponent(b)
    sa, sb = math.ldexp(1.0, -ea), math.ldexp(1.0, -eb)
    a_cols, b_rows = _weighted_squares(a, sa, 1.0, 0), _weighted_squares(b, sb, 1.0, 1)
    parts = (
        _weighted_squares(a, sa, 1.0, 1), _weighted_squares(b, sb, 1.0, 0),
        _weighted_squares(a, sa, b_rows[None, :], 1), _weighted_squares(b, sb, a_cols[:, None], 0),
    )  # fmt: skip
    return LineNorms(*(cp.asnumpy(p) for p in parts), ea, eb)


def choose_moduli(a: Any, b: Any, bt: Any = None) -> Choice:
    """The count ``moduli="auto"`` picks for CuPy A and B: ``precision.moduli_needed`` from statistics taken on
    the GPU (each line's exact (E_max, S), and ``line_norms``); ``bt``, if given, is B's transpose, C-contiguous."""
    m, k = a.shape
    n = b.shape[1]
    kp = ceil_to(k, K_ALIGN)
    stats = []
    for x, lines in ((a, m), (cp.ascontiguousarray(b.T) if bt is None else bt, n)):
        e_max, s = cp.zeros(lines, cp.int32), cp.zeros(lines, cp.int64)
        step = simt.stats_launch(lines, k, kp)
        step.kernel[step.grid, step.block](x, e_max, s)
        stats.append((cp.asnumpy(e_max).astype(np.int64), cp.asnumpy(s)))
    return moduli_needed_from(stats[0], stats[1], line_norms(a, b), k)


class Ozaki2Gemm:
    """C = alpha A @ B + beta C emulated with ``moduli`` moduli (or ``"auto"``), for one problem shape.

    ``plan(a, b, c=None, alpha=1.0, beta=0.0, out=None)``; A and B float64, C-contiguous. With ``moduli="auto"``
    each call chooses the count from its inputs (``self.choice`` says what it chose and why). The buffers are
    allocated for the largest count this plan may use.
    """

    def __init__(self, m: int, n: int, k: int, moduli: int | str = 14, kernels: Kernels | None = None):
        if moduli != "auto":
            moduli = ref.check_moduli(moduli)
        if not 0 < k <= ref.MAX_K:
            raise ValueError(f"k = {k}: int8 products stay exact in int32 only for 0 < k <= {ref.MAX_K}")
        self.m, self.n, self.k, self.moduli = m, n, k, moduli
        self.kernels = kernels or Kernels()
        self.kp = ceil_to(k, K_ALIGN)
        top = ref.MAX_MODULI if moduli == "auto" else moduli
        self.a_res = cp.zeros((top, m, self.kp), cp.int8)
        self.b_res = cp.zeros((top, n, self.kp), cp.int8)
        self.mu, self.nu = cp.zeros(m, cp.int32), cp.zeros(n, cp.int32)
        self.bt = cp.empty((n, k))
        self.products_buffer = cp.empty((top, m, n), cp.int32)
        self.count = None if moduli == "auto" else moduli
        self.choice: Choice | None = None

    # -- stages ----------------------------------------------------------------------------------------------------
    def scale(self, a: Any, b: Any, transposed: bool = False) -> None:
        """Stage 1: exponents and residues of A (rows) and of B (columns, through its transpose, which is already in
        ``self.bt`` when ``transposed``)."""
        N = self.count
        if not transposed:
            cp.copyto(self.bt, b.T)
        for x, lines, res, shifts in ((a, self.m, self.a_res, self.mu), (self.bt, self.n, self.b_res, self.nu)):
            step = simt.residue_launch(lines, self.k, self.kp, N, self.kernels.residue)
            words = res[:N].view(cp.int32)
            launch.launch(step.kernel, step.grid, step.block, 0, x, words, shifts)

    def products(self) -> None:
        """Stage 2: one int8 GEMM per modulus (cuBLAS), exact in int32."""
        N = self.count
        cublas.igemm_batched(self.a_res[:N], self.b_res[:N], self.products_buffer[:N])

    def reconstruct(self, out: Any, c: Any, alpha: float, beta: float) -> None:
        """Stage 3: CRT digits and C."""
        step = simt.reconstruct_launch(self.m, self.n, self.count, self.kernels.reconstruct)
        args = (self.products_buffer[: self.count], self.mu, self.nu, float(alpha), float(beta), c, out)
        step.kernel[step.grid, step.block](*args)

    def __call__(self, a: Any, b: Any, c: Any = None, alpha: float = 1.0, beta: float = 0.0, out: Any = None) -> Any:
        require_fp64_gemm(a, b, c, beta, (self.m, self.k, self.n))
        if self.moduli == "auto":
            cp.copyto(self.bt, b.T)
            self.choice = choose_moduli(a, b, self.bt)
            self.count = self.choice.count
        out = cp.empty((self.m, self.n)) if out is None else out
        self.scale(a, b, transposed=self.moduli == "auto")
        self.products()
        self.reconstruct(out, out if c is None else c, alpha, beta)
        return out


def residues_on_gpu(x: np.ndarray, count: int, residue_factory: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """Stage 1 alone, for the checkers: the exponents (m,) and residues (count, m, k) of a host matrix's rows."""
    m, k = x.shape
    kp = ceil_to(k, K_ALIGN)
    res = cp.zeros((count, m, kp), cp.int8)
    mu = cp.zeros(m, cp.int32)
    step = simt.residue_launch(m, k, kp, count, residue_factory)
    step.kernel[step.grid, step.block](cp.asarray(x, dtype=cp.float64), res.view(cp.int32), mu)
    return cp.asnumpy(mu), cp.asnumpy(res[:, :, :k])


def reconstruct_on_gpu(products: np.ndarray, mu: np.ndarray, nu: np.ndarray, alpha: float, beta: float,
                       c: np.ndarray, reconstruct_factory: Any = None) -> np.ndarray:  # fmt: skip
    """Stage 3 alone, for the checkers: C from the int32 products (count, m, n), on the GPU."""
    count, m, n = products.shape
    out = cp.full((m, n), np.nan)
    step = simt.reconstruct_launch(m, n, count, reconstruct_factory)
    args = (cp.asarray(products), cp.asarray(mu), cp.asarray(nu), float(alpha), float(beta), cp.asarray(c), out)
    step.kernel[step.grid, step.block](*args)
    return cp.asnumpy(out)

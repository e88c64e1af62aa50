"""Ozaki-II DGEMM emulation on int8 tensor cores (GPU only): the plan ``Ozaki2Gemm``.

    plan = Ozaki2Gemm(m, n, k, moduli="auto")       # or a count, 2..20
    c = plan(a, b)                                  # CuPy float64, C-contiguous; plan.choice says what it chose

Stages (each compared with ``utilities.ozaki2.reference`` by the checkers):

0. the choice (``moduli="auto"``): the statistics of A's rows and B's columns (``utilities.precision_gpu``: each
   operand read twice, nothing written but a few vectors), every count's error estimate on the device, and one
   copy of about a hundred bytes to the host;
1. scaling and residues (``utilities.ozaki2.simt``): A's rows in one pass (statistics in registers, then the
   residues); B's columns from their statistics (read with the choice's, or alone for a fixed count), then B's
   residues in one pass, transposed through shared memory: every residue plane K-contiguous, int8, four to a store;
2. N int8 products on tensor cores through cuBLAS (``utilities.cublas``): one ``igemm`` per modulus (the default:
   on Hopper the batched call is slower for large n), or one strided-batched call; ``digits="early"`` reduces
   each int32 product to its one-byte CRT digit right after its GEMM, on a second stream so that it can run
   beside the next GEMM (``overlap``), ``digits="late"`` keeps all N int32 products for the reconstruction, which
   reads each once (fewer bytes); ``"auto"``, the default, takes late where the products fit;
3. the reconstruction: the digits (or products), the CRT in double-double, alpha and beta, into C.

The residues are int8 planes (N, m, kp) and (N, n, kp), kp a multiple of 16. Buffers are allocated for the largest
count the plan may use.
"""

from __future__ import annotations

from typing import Any

import cupy as cp
import numpy as np

from .. import cublas
from ..guard import Canvas, Written
from ..machinery import launch
from ..operands import require_fp64_gemm
from ..smem import ceil_to
from . import reference as ref
from . import simt
from .simt import DIGITS as DIGITS  # the plan's host side (plain Python): re-exported for its users
from .simt import K_ALIGN, Kernels
from .simt import PRODUCTS as PRODUCTS


class Ozaki2Gemm(simt.SimtPlan):
    """C = alpha A @ B + beta C emulated with ``moduli`` moduli (or ``"auto"``), for one problem shape.

    ``plan(a, b, c=None, alpha=1.0, beta=0.0, out=None)``; A and B float64, C-contiguous. With ``moduli="auto"``
    each call chooses the count from its inputs (``self.choice`` says what it chose and why). ``products``:
    "per-modulus" or "batched" cuBLAS calls; ``digits``: "early" (each product reduced to a byte after its GEMM),
    "late" (the reconstruction reads the int32 products) or "auto" (late where every int32 product fits in a
    quarter of the GPU's free memory: ``simt.digits_for``); ``overlap``: the early reductions on a second stream;
    ``statistics``: with ``moduli="auto"``, A's residues from the choice's row statistics ("reuse") or found again
    ("recompute"); ``columns``: B's residues in one pass ("direct") or from the rows of B^T ("by-rows");
    ``panels`` (late digits): A's rows in that many panels, each panel's reconstruction on a second stream beside
    the next panel's GEMMs (the same C bit for bit; "auto": ``simt.panels_for``, several above 8192 rows).
    The buffers, the choice, the residues, the digits and the reconstruction are ``utilities.ozaki2.simt``'s
    ``SimtPlan`` on CuPy (the tests run that part in numba's simulator); this adds cuBLAS's products.
    """

    def __init__(
        self,
        m: int,
        n: int,
        k: int,
        moduli: int | str = 14,
        kernels: Kernels | None = None,
        *,
        products: str = "per-modulus",
        digits: str = "auto",
        overlap: bool = True,
        statistics: str = "reuse",
        columns: str = "direct",
        panels: int | str = "auto",
    ):
        if digits == "auto":  # late where every int32 product fits (fewer bytes after the GEMMs), else early
            planes = ref.MAX_MODULI if moduli == "auto" else ref.check_moduli(moduli)
            free = cp.cuda.Device().mem_info[0] + cp.get_default_memory_pool().free_bytes()  # the pool's too
            digits = simt.digits_for(planes, m, n, free)
        super().__init__(
            m,
            n,
            k,
            moduli,
            kernels,
            products=products,
            digits=digits,
            statistics=statistics,
            columns=columns,
            panels=panels,
            xp=cp,
        )
        self.overlap = overlap and products == "per-modulus"
        # one second stream for the plan (its uses never overlap each other): the choice's passes over B, B's
        # scaling beside A's, each panel's reconstruction beside the next panel's GEMMs, and the early digits beside
        # the next GEMM. Only where every launch goes to CuPy's current stream (GemmStatistics.concurrent); the
        # early digits' overlap uses it regardless (cuBLAS and the digit kernels both launch on CuPy's streams)
        self.concurrent = self.stats.concurrent
        self.beside = self.stats.beside
        self._ready = [cp.cuda.Event(disable_timing=True) for _ in range(2)]
        self._read = [cp.cuda.Event(disable_timing=True) for _ in range(2)]

    # -- stages ----------------------------------------------------------------------------------------------------
    def scale(self, a: Any, b: Any, columns_known: bool = False, rows_known: bool = False) -> None:
        """Stage 1 (``SimtPlan.scale``); with ``concurrent``, B's columns on a second stream beside A's rows, after
        whatever was queued before on this stream, which then waits for both."""
        if not self.concurrent:
            super().scale(a, b, columns_known, rows_known)
            return
        with self.beside.follow():
            self.scale_columns(b, columns_known)
        self.scale_rows(a, rows_known)
        self.beside.join()

    def int8_gemm(self, t: int, plane: Any, rows: slice = slice(None)) -> None:
        cublas.igemm(self.a_res[t][rows], self.b_res[t], plane)

    def panels_run(self, a: Any, b: Any, out: Any, c: Any, alpha: float, beta: float) -> None:
        """Stages 2 and 3 by row panels: the GEMMs on this stream, panel after panel; each panel's reconstruction
        on the second stream as soon as its products exist, beside the next panel's GEMMs. This stream waits for
        the last reconstruction (the next call's GEMMs write the planes it reads). Without ``concurrent`` (numba's
        own launches, on its own stream), each panel's reconstruction on this stream after its GEMMs."""
        if not self.concurrent:
            super().panels_run(a, b, out, c, alpha, beta)
            return
        for q in range(len(self.row_panels)):
            self.panel_products(q)
            with self.beside.follow():
                self.reconstruct_panel(q, a, b, out, c, alpha, beta)
        self.beside.join()

    def products(self) -> None:
        """Stage 2: one int8 GEMM per modulus (or one batched call), exact in int32; with early digits each product
        becomes its one-byte CRT digit as soon as it exists, on a second stream beside the next GEMM (``overlap``)."""
        N = self.count
        if self.products_mode == "batched":
            cublas.igemm_batched(self.a_res[:N], self.b_res[:N], self.products_buffer[:N])
            if self.digits is not None:
                for t in range(N):
                    self.digits_of(self.product_plane(t), t)
            return
        if self.digits is None or not self.overlap:  # late digits, or early ones on this stream
            super().products()
            return
        main, side = cp.cuda.get_current_stream(), self.beside.stream
        for t in range(N):
            slot = t % 2
            plane = self.product_plane(t)
            if t >= 2:
                main.wait_event(self._read[slot])  # the digits of product t - 2 have been read out of this slot
            self.int8_gemm(t, plane)
            self._ready[slot].record(main)
            side.wait_event(self._ready[slot])
            with side:
                self.digits_of(plane, t)
            self._read[slot].record(side)
        for slot in range(min(2, N)):
            main.wait_event(self._read[slot])  # the reconstruction waits for the last digits

    def __call__(self, a: Any, b: Any, c: Any = None, alpha: float = 1.0, beta: float = 0.0, out: Any = None) -> Any:
        require_fp64_gemm(a, b, c, beta, (self.m, self.k, self.n))
        out = cp.empty((self.m, self.n)) if out is None else out
        self.run(a, b, out, out if c is None else c, alpha, beta)
        return out


def residues_on_gpu(x: np.ndarray, count: int, residue_factory: Any = None) -> tuple[Written, np.ndarray]:
    """Stage 1 alone, for the checkers: the exponents (m,) and residues (count, m, k) of a host matrix's rows (the
    residues inside a guard band: ``utilities.guard``)."""
    m, k = x.shape
    kp = ceil_to(k, K_ALIGN)
    res = Canvas((count, m, kp), cp.int8, xp=cp, fill=0)
    mu = Canvas((m,), cp.int32, xp=cp, fill=0)
    step = simt.residue_launch(m, k, kp, count, residue_factory)
    words = res.out.view(cp.int32)
    launch.launch(step.kernel, step.grid, step.block, 0, cp.asarray(x, dtype=cp.float64), words, mu.out)
    planes = res.written()
    return mu.written(), Written(planes.value[:, :, :k], planes.breaches)


def residue_values_on_gpu(w: np.ndarray, count: int, residue_factory: Any = None) -> Written:
    """The residue device function's own values (count, size) on the doubles w, for the checker (a byte store would
    hide a residue of 128 for p = 256)."""
    out = Canvas((count, w.size), cp.float64, xp=cp, fill=np.nan)
    step = simt.residue_values_launch(w.size, count, residue_factory)
    launch.launch(step.kernel, step.grid, step.block, 0, cp.asarray(w, dtype=cp.float64), out.out)
    return out.written()


def digits_on_gpu(products: np.ndarray, digit_factory: Any = None) -> Written:
    """Stage 2's reduction alone, for the checkers: the CRT digits (count, m, n) uint8 of int32 products (inside a
    guard band)."""
    count = products.shape[0]
    planes = cp.asarray(products, dtype=cp.int32)
    digits = Canvas(products.shape, cp.uint8, xp=cp, fill=0)
    for t in range(count):
        step = simt.digits_launch(planes[t].size, count, digit_factory)
        launch.launch(step.kernel, step.grid, step.block, 0, planes[t].ravel(), np.int64(t), digits.out[t].ravel())
    return digits.written()


def reconstruct_on_gpu(
    planes: np.ndarray,
    mu: np.ndarray,
    nu: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    alpha: float,
    beta: float,
    c: np.ndarray,
    reconstruct_factory: Any = None,
) -> Written:
    """Stage 3 alone, for the checkers: C (inside a guard band) from the planes (count, m, n), on the GPU. Both paths
    of the plan: uint8 CRT digits (``digits="early"``), or the int32 products, which the kernel built with
    ``from_products`` reduces itself (``digits="late"``)."""
    count, m, n = planes.shape
    late = np.asarray(planes).dtype == np.int32
    out = Canvas((m, n), cp.float64, xp=cp, fill=np.nan)
    step = simt.reconstruct_launch(m, n, count, reconstruct_factory, from_products=late)
    args = (
        cp.asarray(planes, dtype=cp.int32 if late else cp.uint8),
        cp.asarray(mu),
        cp.asarray(nu),
        cp.asarray(a),
        cp.asarray(b),
        np.float64(alpha),
        np.float64(beta),
        cp.asarray(c),
        out.out,
    )
    launch.launch(step.kernel, step.grid, step.block, 0, *args)
    return out.written()

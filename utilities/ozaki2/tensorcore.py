"""Ozaki-II DGEMM emulation on int8 tensor cores (GPU only): the plan ``Ozaki2Gemm``.

    plan = Ozaki2Gemm(m, n, k, moduli="auto")       # or a count, 2..20
    c = plan(a, b)                                  # CuPy float64, C-contiguous; plan.choice says what it chose

Stages (each compared with ``utilities.ozaki2.reference`` by the checkers):

0. the choice (``moduli="auto"``): the statistics of A's rows and B's columns (``utilities.precision_gpu``: each
   operand read twice, nothing written but a few vectors), every count's error estimate on the device, and one
   copy of about a hundred bytes to the host;
1. scaling and residues (``utilities.ozaki2.simt``): A's rows in one pass (statistics in registers, then the
   residues); B's columns from their statistics (read with the choice's, or alone for a fixed count), then B read
   once more and its residues written transposed: every residue plane K-contiguous, int8, four to a store;
2. N int8 products on tensor cores through cuBLAS (``utilities.cublas``): one ``igemm`` per modulus (the default:
   on Hopper the batched call is slower for large n), or one strided-batched call; ``digits="early"`` reduces
   each int32 product to its one-byte CRT digit right after its GEMM, on a second stream so that it can run
   beside the next GEMM (``overlap``), ``digits="late"`` keeps all N int32 products for the reconstruction;
3. the reconstruction: the digits (or products), the CRT in double-double, alpha and beta, into C.

The residues are int8 planes (N, m, kp) and (N, n, kp), kp a multiple of 16. Buffers are allocated for the largest
count the plan may use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cupy as cp
import numpy as np

from .. import cublas, plans
from ..guard import Canvas, Written
from ..machinery import launch
from ..operands import require_fp64_gemm
from ..precision import Choice
from ..precision_gpu import GemmStatistics, scheme_tables
from ..smem import ceil_to
from . import reference as ref
from . import simt
from .precision import SCHEME

K_ALIGN = 16  # the residue planes' padded width: cuBLAS's int8 GEMM wants lda = ldb a multiple of 4 (16 B lines)
PRODUCTS = ("per-modulus", "batched")
DIGITS = ("early", "late")


@dataclass(frozen=True)
class Kernels(plans.Kernels):
    """Kernel factories a plan uses instead of the course's (the exercises pass the attendee's), in stage order.

    None means the course's: ``make_residue``, ``make_digit`` and ``make_reconstruct_kernel``
    (``utilities.ozaki2.simt``).
    """

    residue: Callable[..., Any] | None = None
    digit: Callable[..., Any] | None = None
    reconstruct: Callable[..., Any] | None = None

    def course(self) -> dict[str, Callable[..., Any]]:
        return {"residue": simt.make_residue, "digit": simt.make_digit, "reconstruct": simt.make_reconstruct_kernel}


def _int(v: int) -> np.int64:
    return np.int64(v)


class Ozaki2Gemm:
    """C = alpha A @ B + beta C emulated with ``moduli`` moduli (or ``"auto"``), for one problem shape.

    ``plan(a, b, c=None, alpha=1.0, beta=0.0, out=None)``; A and B float64, C-contiguous. With ``moduli="auto"``
    each call chooses the count from its inputs (``self.choice`` says what it chose and why). ``products``:
    "per-modulus" or "batched" cuBLAS calls; ``digits``: "early" (each product reduced to a byte after its GEMM)
    or "late" (the reconstruction reads the int32 products); ``overlap``: the early reductions on a second stream.
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
        digits: str = "early",
        overlap: bool = True,
    ):
        if moduli != "auto":
            moduli = ref.check_moduli(moduli)
        if not 0 < k <= ref.MAX_K:
            raise ValueError(f"k = {k}: int8 products stay exact in int32 only for 0 < k <= {ref.MAX_K}")
        if products not in PRODUCTS or digits not in DIGITS:
            raise ValueError(
                f"products must be one of {PRODUCTS} and digits one of {DIGITS}, got {products!r}, {digits!r}"
            )
        self.m, self.n, self.k, self.moduli = m, n, k, moduli
        self.products_mode, self.digits_mode, self.overlap = products, digits, overlap and products == "per-modulus"
        self.kernels = kernels or Kernels()
        self.kp = ceil_to(k, K_ALIGN)
        top = ref.MAX_MODULI if moduli == "auto" else moduli
        self.a_res = cp.zeros((top, m, self.kp), cp.int8)
        self.b_res = cp.zeros((top, n, self.kp), cp.int8)
        self.mu, self.nu = cp.zeros(m, cp.int32), cp.zeros(n, cp.int32)
        self.stats = GemmStatistics(m, n, k)
        keep_all = digits == "late" or products == "batched"
        self.products_buffer = cp.empty((top if keep_all else 2, m, n), cp.int32)
        self.digits = cp.empty((top, m, n), cp.uint8) if digits == "early" else None
        self.count = None if moduli == "auto" else moduli
        self.choice: Choice | None = None
        self.tables = scheme_tables(SCHEME, k, simt.line_offset) if moduli == "auto" else None
        self._side = cp.cuda.Stream(non_blocking=True) if self.overlap else None
        self._ready = [cp.cuda.Event(disable_timing=True) for _ in range(2)]
        self._read = [cp.cuda.Event(disable_timing=True) for _ in range(2)]

    # -- stages ----------------------------------------------------------------------------------------------------
    def choose(self, a: Any, b: Any) -> Choice:
        """Stage 0: the statistics of A's rows and B's columns, and the count (``moduli="auto"``)."""
        if self.tables is None:
            raise RuntimeError(f"this plan has a fixed count ({self.moduli} moduli): it chooses nothing")
        self.stats.compute(a, b)
        self.choice = self.stats.choose(self.tables)
        self.count = self.choice.count
        return self.choice

    def scale(self, a: Any, b: Any, columns_known: bool = False) -> None:
        """Stage 1: exponents and residues of A (rows) and of B (columns, transposed). B's column statistics are
        computed first unless ``columns_known`` (the choice took them)."""
        N = self.count
        if not columns_known:
            self.stats.columns(b)
        residue = self.kernels.factory("residue")
        rows = simt.residue_launch(self.m, self.k, self.kp, N, residue)
        launch.launch(rows.kernel, rows.grid, rows.block, 0, a, self.a_res[:N].view(cp.int32), self.mu)
        cols = simt.residue_cols_launch(self.k, self.n, self.kp, N, residue)
        launch.launch(
            cols.kernel, cols.grid, cols.block, 0, b, self.stats.cols_i, self.b_res[:N].view(cp.int32), self.nu
        )

    def _digits_of(self, plane: Any, t: int) -> None:
        step = simt.digits_launch(self.m * self.n, self.count, self.kernels.factory("digit"))
        launch.launch(step.kernel, step.grid, step.block, 0, plane.ravel(), _int(t), self.digits[t].ravel())

    def products(self) -> None:
        """Stage 2: one int8 GEMM per modulus (or one batched call), exact in int32; with early digits each product
        becomes its one-byte CRT digit as soon as it exists."""
        N = self.count
        if self.products_mode == "batched":
            cublas.igemm_batched(self.a_res[:N], self.b_res[:N], self.products_buffer[:N])
            if self.digits is not None:
                for t in range(N):
                    self._digits_of(self.products_buffer[t], t)
            return
        if self.digits is None:  # late digits: the reconstruction reads every int32 product
            for t in range(N):
                cublas.igemm(self.a_res[t], self.b_res[t], self.products_buffer[t])
            return
        main = cp.cuda.get_current_stream()
        for t in range(N):
            slot = t % 2
            plane = self.products_buffer[slot]
            if self._side is None:
                cublas.igemm(self.a_res[t], self.b_res[t], plane)
                self._digits_of(plane, t)
                continue
            if t >= 2:
                main.wait_event(self._read[slot])  # the digits of product t - 2 have been read out of this slot
            cublas.igemm(self.a_res[t], self.b_res[t], plane)
            self._ready[slot].record(main)
            self._side.wait_event(self._ready[slot])
            with self._side:
                self._digits_of(plane, t)
            self._read[slot].record(self._side)
        if self._side is not None:
            for slot in range(min(2, N)):
                main.wait_event(self._read[slot])  # the reconstruction waits for the last digits

    def reconstruct(self, a: Any, b: Any, out: Any, c: Any, alpha: float, beta: float) -> None:
        """Stage 3: C from the digits (or the int32 products); the lines of A and B that hold a NaN or an Inf get
        DGEMM's result (FP64 dot products)."""
        N = self.count
        late = self.digits is None
        step = simt.reconstruct_launch(self.m, self.n, N, self.kernels.factory("reconstruct"), from_products=late)
        planes = self.products_buffer[:N] if late else self.digits[:N]
        launch.launch(
            step.kernel,
            step.grid,
            step.block,
            0,
            planes,
            self.mu,
            self.nu,
            a,
            b,
            np.float64(alpha),
            np.float64(beta),
            c,
            out,
        )

    def __call__(self, a: Any, b: Any, c: Any = None, alpha: float = 1.0, beta: float = 0.0, out: Any = None) -> Any:
        require_fp64_gemm(a, b, c, beta, (self.m, self.k, self.n))
        auto = self.tables is not None
        if auto:
            self.choose(a, b)
        out = cp.empty((self.m, self.n)) if out is None else out
        self.scale(a, b, columns_known=auto)
        self.products()
        self.reconstruct(a, b, out, out if c is None else c, alpha, beta)
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

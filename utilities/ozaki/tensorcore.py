"""Ozaki-I DGEMM emulation on int8 tensor cores (GPU only): unfused, partially fused and fully fused.

Stages (each compared bit for bit with ``utilities.ozaki``'s reference by the checkers):
1. shifts and slices: the plain numba kernels of ``utilities.ozaki.simt``;
2. slice products on int8 tensor cores through nvmath.device ``Matmul`` + ``DevicePipeline`` (TMA loads,
   WGMMA on Hopper): all S(S+1)/2 products (unfused), or the S anti-diagonals accumulated in the block
   (partially fused), or everything up to C inside the block (fully fused);
3. the FP64 epilogue: ``utilities.ozaki.simt.make_epilogue_kernel``, or inside the fused kernel.

The slices of A live in one int8 buffer (S, m, k) and those of B in (S, n, k); the pipeline sees them as 3-D
tensors (m, k, S) and (k, n, S), so ``reset_tile(tile, (i, s), (j, t))`` points one block's pipeline at the
tile pair of slices s and t without a new pipeline object.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cupy as cp
import numpy as np
from numba import cuda, float64, int32
from nvmath.device import Matmul
from nvmath.device.common import make_tensor
from nvmath.device.cublasdx_numba import pipeline_extensions

from .. import plans
from ..guard import Canvas, Written
from ..machinery import launch, pipelines
from ..operands import require_fp64_gemm
from ..smem import ceil_to
from ..tiles import pipeline_matmul
from . import simt as plain
from .simt import SLICE_CAPACITY as SLICE_CAPACITY  # the plan's host side (plain Python): re-exported for its users
from .simt import VARIANTS as VARIANTS
from .simt import OzakiConfig as OzakiConfig
from .simt import compute_capability as compute_capability
from .simt import grouped_tile
from .simt import tile_config as tile_config

NONFINITE_SHIFT = plain.NONFINITE_SHIFT


@dataclass(frozen=True)
class Kernels(plans.Kernels):
    """Kernel factories that a plan uses instead of the course's own (the exercises pass the attendee's).

    None means the course's: ``make_split_digits``, ``make_epilogue_kernel`` (``utilities.ozaki.simt``),
    ``make_products_kernel``, ``make_diagonals_kernel``, ``make_fused_kernel`` (this module). Fields are in the
    order the stages run, which is the order a checker reads their TODO regions in.
    """

    split_digits: Callable[..., Any] | None = None
    products: Callable[..., Any] | None = None
    diagonals: Callable[..., Any] | None = None
    fused: Callable[..., Any] | None = None
    epilogue: Callable[..., Any] | None = None

    def course(self) -> dict[str, Callable[..., Any]]:
        return {
            "split_digits": plain.make_split_digits,
            "products": make_products_kernel,
            "diagonals": make_diagonals_kernel,
            "fused": make_fused_kernel,
            "epilogue": plain.make_epilogue_kernel,
        }


def int8_matmul(cfg: OzakiConfig, sm: int | None = None) -> Matmul:
    """The block-level int8 x int8 -> int32 GEMM: A row-major, B column-major (both K-contiguous), C row-major.

    The pipelined block GEMM (``utilities.tiles.pipeline_matmul``, as track 1's library reference): each slice
    product is one more pass over the same tiles.
    """
    return pipeline_matmul("int8", cfg.tile_m, cfg.tile_n, cfg.threads, sm, tile_k=cfg.tile_k)


# ------------------------------------------------------------------------------------------------------------
# Kernels on tensor cores
# ------------------------------------------------------------------------------------------------------------


@functools.cache
def make_products_kernel(MM: Matmul):
    """Unfused: block (i, j, p) computes tile (i, j) of product p = (s, t), A_s @ B_t, into ``products[p]``."""
    TM, TN, _ = MM.size

    @cuda.jit(extensions=pipeline_extensions, launch_bounds=(MM.block_size, 1))
    def ozaki_products_kernel(products, device_pipeline):
        smem = cuda.shared.array(shape=(0,), dtype=np.byte, alignment=device_pipeline.buffer_alignment)
        (bx, by), p = grouped_tile(), cuda.blockIdx.z
        # TODO (about 6 lines): s and t, the slice of A and the slice of B that product p multiplies, from p alone
        # (the contract's order); integers only, and a loop with a bounded number of steps (a loop that never ends
        # hangs the GPU, and the notebook with it)
        # SKELETON: s, t = 0, 0
        # BEGIN SOLUTION
        d = 0  # the diagonal s + t of product p: the last one that starts at or before p
        for e in range(1, p + 1):  # diagonal e starts at e (e + 1) / 2 >= e: none after p starts by p
            if e * (e + 1) // 2 <= p:
                d = e
        s = p - d * (d + 1) // 2
        t = d - s
        # END SOLUTION
        tile = device_pipeline.get_tile(smem, (bx, int32(s)), (by, int32(t)))
        acc = MM.suggest_accumulator()
        tile.execute(acc)
        tile._del()
        out = make_tensor(
            products[p, bx * TM : (bx + 1) * TM, by * TN : (by + 1) * TN], MM.get_layout_gmem_c(products.shape[2])
        )
        if acc.is_thread_active():
            acc.partition_and_copy(acc.get_results(), out)

    return ozaki_products_kernel


@functools.cache
def make_diagonals_kernel(MM: Matmul):
    """Partially fused: block (i, j) accumulates each anti-diagonal d = s + t in int32 and writes it once.

    The number of slices is ``diagonals.shape[0]``: a run-time value, so one kernel serves every slice count.
    """
    TM, TN, _ = MM.size

    @cuda.jit(extensions=pipeline_extensions, launch_bounds=(MM.block_size, 1))
    def ozaki_diagonals_kernel(diagonals, device_pipeline):
        smem = cuda.shared.array(shape=(0,), dtype=np.byte, alignment=device_pipeline.buffer_alignment)
        bx, by = grouped_tile()
        tile = device_pipeline.get_tile(smem, (bx, int32(0)), (by, int32(0)))
        acc = MM.suggest_accumulator()
        for d in range(diagonals.shape[0]):
            acc.clear()
            # TODO (about 3 lines): accumulate the products A_s @ B_t with s + t == d into acc
            # BEGIN SOLUTION
            for s in range(d + 1):
                device_pipeline.reset_tile(tile, (bx, int32(s)), (by, int32(d - s)))
                tile.execute(acc)
            # END SOLUTION
            out = make_tensor(
                diagonals[d, bx * TM : (bx + 1) * TM, by * TN : (by + 1) * TN], MM.get_layout_gmem_c(diagonals.shape[2])
            )
            if acc.is_thread_active():
                acc.partition_and_copy(acc.get_results(), out)
        tile._del()

    return ozaki_diagonals_kernel


@functools.cache
def make_fused_kernel(MM: Matmul):
    """Fully fused: each diagonal's int32 sum becomes FP64 in registers, shifted and scaled into C; only C is written.

    Diagonals run from the smallest weight to the largest so that the FP64 sum is the reference's, bit for bit.
    ``slices`` is a run-time argument: one kernel serves every slice count.
    """
    TM, TN, _ = MM.size
    FRAGMENT = MM.suggest_layout_rmem_c().size

    @cuda.jit(extensions=pipeline_extensions, launch_bounds=(MM.block_size, 1))
    def ozaki_fused_kernel(alpha, beta, c, out, e, f, slices, device_pipeline):
        smem = cuda.shared.array(shape=(0,), dtype=np.byte, alignment=device_pipeline.buffer_alignment)
        bx, by = grouped_tile()
        tile = device_pipeline.get_tile(smem, (bx, int32(0)), (by, int32(0)))
        acc = MM.suggest_accumulator()
        total = cuda.local.array(FRAGMENT, float64)
        for i in range(FRAGMENT):
            total[i] = 0.0
        for d in range(slices - 1, -1, -1):
            acc.clear()
            for s in range(d + 1):
                device_pipeline.reset_tile(tile, (bx, int32(s)), (by, int32(d - s)))
                tile.execute(acc)
            # TODO (about 4 lines): add this diagonal, weighted by 2^(-8d), into the FP64 total
            # SKELETON: pass
            # BEGIN SOLUTION
            part = acc.get_results()
            weight = math.ldexp(1.0, -8 * d)
            for i in range(FRAGMENT):
                total[i] += float64(part[i]) * weight
            # END SOLUTION
        tile._del()
        if acc.is_thread_active():
            for i in range(FRAGMENT):
                r, q = acc.map_fragment_index(i)
                row, col = bx * TM + r, by * TN + q
                if row < out.shape[0] and col < out.shape[1]:
                    # TODO (about 7 lines): NaN where e[row] or f[col] is the sentinel NONFINITE_SHIFT (that row of A
                    # or column of B holds a NaN or an Inf); else alpha * ldexp(total[i], int(e[row] + f[col] - 14)),
                    # plus beta * c[row, col] only if beta != 0 (C is not read when beta == 0)
                    # SKELETON: out[row, col] = math.nan
                    # BEGIN SOLUTION
                    if e[row] == NONFINITE_SHIFT or f[col] == NONFINITE_SHIFT:
                        out[row, col] = math.nan
                    else:
                        value = alpha * math.ldexp(total[i], int(e[row] + f[col] - 14))
                        if beta != 0.0:
                            value += beta * c[row, col]
                        out[row, col] = value
                    # END SOLUTION

    return ozaki_fused_kernel


# ------------------------------------------------------------------------------------------------------------
# The plan: buffers, pipeline and kernels for one problem shape
# ------------------------------------------------------------------------------------------------------------


class OzakiGemm(plain.SimtPlan):
    """C = alpha A @ B + beta C emulated with ``slices`` int8 slices (or ``"auto"``: chosen from the inputs on every
    call, as ``Ozaki2Gemm(moduli="auto")`` chooses its moduli; ``self.choice`` says what and why), for one shape and
    one variant.

    Shapes that do not divide the tile are padded inside (the padding holds zero digits); the output is
    written only where C is. The buffers, the slicing, the epilogue and the choice are ``utilities.ozaki.simt``'s
    ``SimtPlan`` on CuPy (the tests run that part in numba's simulator); this adds the tensor-core stages. Building a
    plan builds its kernels (cached on disk by ``utilities.machinery.buildcache``).
    """

    def __init__(
        self,
        m: int,
        n: int,
        k: int,
        slices: int | str = 7,
        variant: str = "fused",
        cfg: OzakiConfig | None = None,
        kernels: Kernels | None = None,
    ):
        self.kernels = kernels or Kernels()
        split, epilogue = self.kernels.factory("split_digits"), self.kernels.factory("epilogue")
        super().__init__(m, n, k, slices, variant, cfg, split_digits=split, epilogue=epilogue, xp=cp)
        self.MM = int8_matmul(self.cfg)
        # the pipeline sees (m, k, S) and (k, n, S) views of the slice buffers
        self.pipeline = pipelines.device_pipeline(
            self.MM, self.cfg.depth, self.a_slices.transpose(1, 2, 0), self.b_slices.transpose(2, 1, 0)
        )

    def products(self) -> None:
        """Stage 2 of the unfused and partially fused variants: int32 products or anti-diagonals."""
        shared, block = self.pipeline.buffer_size, self.pipeline.block_dim
        # the DevicePipeline argument takes numba's dispatcher inside launch.launch: nvmath packs it, not the fast path
        if self.variant == "unfused":
            kernel = self.kernels.factory("products")(self.MM)
            grid = (*self.grid, self.terms.shape[0])
            launch.launch(kernel, grid, block, shared, self.terms, self.pipeline)
        elif self.variant == "partial":
            kernel = self.kernels.factory("diagonals")(self.MM)
            launch.launch(kernel, self.grid, block, shared, self.terms, self.pipeline)
        else:
            raise RuntimeError("the fused variant has no separate products stage")

    def fused(self, out: Any, c: Any, alpha: float, beta: float) -> None:
        """Stages 2 and 3 of the fused variant: one kernel from the slices to C."""
        kernel = self.kernels.factory("fused")(self.MM)
        args = (float(alpha), float(beta), c, out, self.e, self.f, self.slices, self.pipeline)
        # the DevicePipeline argument takes numba's dispatcher inside launch.launch: nvmath packs it, not the fast path
        launch.launch(kernel, self.grid, self.pipeline.block_dim, self.pipeline.buffer_size, *args)

    def __call__(self, a: Any, b: Any, c: Any = None, alpha: float = 1.0, beta: float = 0.0, out: Any = None) -> Any:
        require_fp64_gemm(a, b, c, beta, (self.m, self.k, self.n))
        if self.auto:
            self.choose(a, b)
        out = cp.empty((self.m, self.n), dtype=cp.float64) if out is None else out
        c_arg = out if c is None else c
        self.slice(a, b)
        if self.variant == "fused":
            self.fused(out, c_arg, float(alpha), float(beta))
        else:
            self.products()
            self.epilogue(out, c_arg, float(alpha), float(beta))
        return out


def slice_rows_on_gpu(
    a: np.ndarray, slices: int, split_digits_factory: Callable[[int], Any] | None = None
) -> tuple[Written, Written]:
    """Stage 1 alone, for the checkers: the row slices (S, m, k) and shifts (m,) of a host matrix, on the GPU, each
    from a guard band (``utilities.guard``)."""
    m, k = a.shape
    kp = ceil_to(k, 128)
    words = Canvas((slices, m, kp // 4), cp.int32, xp=cp, fill=0)  # in a guard band: a stray write shows
    e = Canvas((m,), cp.int32, xp=cp, fill=0)
    threads = plain.ROWS_THREADS
    kernel = plain.make_slice_rows_kernel(k, kp, slices, threads, split_digits_factory or plain.make_split_digits)
    launch.launch(kernel, m, threads, 0, cp.asarray(a, dtype=cp.float64), words.out, e.out)
    planes = words.written()
    return Written(planes.value.view(np.int8)[:, :, :k], planes.breaches), e.written()


def epilogue_on_gpu(
    terms: np.ndarray,
    offsets: np.ndarray,
    e: np.ndarray,
    f: np.ndarray,
    alpha: float,
    beta: float,
    c: np.ndarray,
    epilogue_factory: Callable[[], Any] | None = None,
) -> Written:
    """Stage 3 alone, for the checkers: C from the int32 terms (T, m, n), diagonal d's being
    ``terms[offsets[d]:offsets[d + 1]]`` (the unfused products or the partial variant's diagonals), on the GPU,
    from a guard band."""
    _, m, n = terms.shape
    out = Canvas((m, n), cp.float64, xp=cp, fill=np.nan)  # in a guard band: a stray write shows
    step = plain.epilogue_launch(m, n, epilogue_factory)
    args = (cp.asarray(terms), cp.asarray(offsets, dtype=cp.int32), cp.asarray(e), cp.asarray(f))
    scalars = (np.float64(alpha), np.float64(beta))
    launch.launch(step.kernel, step.grid, step.block, 0, *args, *scalars, cp.asarray(c), out.out)
    return out.written()

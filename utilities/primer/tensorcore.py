"""The primer's two kernels (GPU only): a block GEMM tile written by hand, and the same idea on a device pipeline.

Run it through notebook 0 (``solutions/0_primer.ipynb``), or ``python -m utilities.prebuild --jobs primer:tile``.

- ``make_tile_gemm_kernel`` (the exercise): each block computes one TM x TN tile of C = A @ B with all of K in one
  step. The block copies its tile of A and of B from global into shared memory, waits for the copies, runs the
  block ``Matmul`` on tensor cores into an accumulator held in registers, and stores the accumulator to C. The
  descriptor is notebook 2a's (FP16 operands, B row-major, FP32 accumulator, 128 x 128 x 64, 128 threads), whose
  K loop repeats this load and execute for every K stage.
- ``make_stack_sum_kernel``: C = sum over s of A_s @ B_s^T for a stack of int8 matrices, through cuBLASDx's
  device pipeline: ``get_tile`` gives the block a tile pipeline for the first pair, ``tile.execute`` runs its
  whole K loop into the accumulator, and ``reset_tile`` points the same tile pipeline at the next pair, as the
  Ozaki-I kernels of 3c and 3d do with the pairs of slices of an anti-diagonal.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cupy as cp
import numpy as np
from numba import cuda, int32
from nvmath.device import Matmul
from nvmath.device.common import copy, copy_wait, make_tensor
from nvmath.device.cublasdx_numba import pipeline_extensions

from .. import plans
from ..machinery import launch, pipelines
from ..machinery.aligned_copy import gmem_layout
from ..operands import require
from ..smem import fp16_segments
from ..tiles import block_matmul, pipeline_matmul

TILE = (128, 128, 64)  # (TM, TN, TK) of the exercise: notebook 2a's block GEMM, one K stage
THREADS = 128
PIPELINE_TILE = (128, 128, 64)  # the stack-sum kernel's tile: 64-deep K stages fit every GPU's shared memory
PIPELINE_THREADS = 128
PIPELINE_DEPTH = 2  # K stages in flight


@dataclass(frozen=True, kw_only=True)
class StackConfig(plans.TileConfig):
    """The stack-sum kernel's tile and the ``depth`` of its device pipeline (K stages in flight)."""

    depth: int = PIPELINE_DEPTH


TILE_CONFIG = plans.TileConfig(tile_m=TILE[0], tile_n=TILE[1], tile_k=TILE[2], threads=THREADS)
STACK_CONFIG = StackConfig(
    tile_m=PIPELINE_TILE[0], tile_n=PIPELINE_TILE[1], tile_k=PIPELINE_TILE[2], threads=PIPELINE_THREADS
)


@dataclass(frozen=True)
class Kernels(plans.Kernels):
    """Kernel factories the primer's plans use instead of the course's: ``tile_gemm`` (``TileGemm``'s,
    :func:`make_tile_gemm_kernel`) and ``stack_sum`` (``StackSum``'s, :func:`make_stack_sum_kernel`)."""

    tile_gemm: Callable[..., Any] | None = None
    stack_sum: Callable[..., Any] | None = None

    def course(self) -> dict[str, Callable[..., Any]]:
        return {"tile_gemm": make_tile_gemm_kernel, "stack_sum": make_stack_sum_kernel}


@functools.cache
def tile_matmul(cfg: plans.TileConfig = TILE_CONFIG) -> Matmul:
    """The exercise's block GEMM: FP16 A and B, both row-major, FP32 accumulator, one 128 x 128 x 64 tile."""
    return block_matmul("float16", cfg.tile, cfg.threads, b="row_major")


@functools.cache
def make_tile_gemm_kernel(MM: Matmul):
    """C = A @ B, one TM x TN tile of C per block, K = TK: copy both tiles in, wait, execute, store the accumulator."""
    TM, TN, _ = MM.size
    SA, SB = MM.suggest_layout_smem_a().cosize, MM.suggest_layout_smem_b().cosize
    (A_AT, B_AT), _ = fp16_segments(SA, SB)  # element offsets in shared memory, each on a 1 KiB boundary
    gmem_a, gmem_b = gmem_layout(MM, "a"), gmem_layout(MM, "b")  # promise 16-byte alignment: 16-byte copies

    @cuda.jit(launch_bounds=(MM.block_size, 1))
    def tile_gemm_kernel(a, b, c):
        smem = cuda.shared.array(shape=(0,), dtype=np.float16, alignment=1024)
        row0, col0 = cuda.blockIdx.x * TM, cuda.blockIdx.y * TN
        # global memory: views of this block's rows of A, columns of B and tile of C (nothing moves yet)
        a_tile = make_tensor(a[row0 : row0 + TM, :], gmem_a(a.shape[1]))
        b_tile = make_tensor(b[:, col0 : col0 + TN], gmem_b(b.shape[1]))
        c_tile = make_tensor(c[row0 : row0 + TM, col0 : col0 + TN], MM.get_layout_gmem_c(c.shape[1]))
        # shared memory: one tile of A and one of B, in the layouts cuBLASDx suggests for its tensor-core loads
        sa = make_tensor(smem[A_AT : A_AT + SA], MM.suggest_layout_smem_a())
        sb = make_tensor(smem[B_AT : B_AT + SB], MM.suggest_layout_smem_b())
        # registers: the accumulator, this thread's part of the C tile
        acc = MM.suggest_accumulator()
        acc.clear()
        # TODO (about 5 lines): copy a_tile into sa and b_tile into sb, wait for the copies, multiply the shared tiles
        # into acc, and store acc's results into c_tile
        # BEGIN SOLUTION
        copy(a_tile, sa)
        copy(b_tile, sb)
        copy_wait()  # this thread's copies have landed, then a barrier: every thread's have
        MM.execute(sa, sb, acc)
        acc.partition_and_copy(acc.get_results(), c_tile)
        # END SOLUTION

    return tile_gemm_kernel


class TileGemm:
    """C = A @ B for FP16 A (m, TK) and B (TK, n), FP32 C (m, n), with one block per tile of C (m, n multiples of
    the tile). ``cfg``: the tile (default ``TILE_CONFIG``, the exercise's); ``kernels=Kernels(tile_gemm=...)``
    replaces :func:`make_tile_gemm_kernel` (the exercise passes the attendee's)."""

    def __init__(self, m: int, n: int, cfg: plans.TileConfig | None = None, kernels: Kernels | None = None):
        self.MM = MM = tile_matmul(cfg or TILE_CONFIG)
        tm, tn, tk = MM.size
        if m % tm or n % tn:
            raise ValueError(f"m = {m} and n = {n} must be multiples of the tile's {tm} and {tn}: pad A and B")
        self.m, self.n, self.k = m, n, tk
        sa, sb = MM.suggest_layout_smem_a().cosize, MM.suggest_layout_smem_b().cosize
        self.shared_bytes = 2 * fp16_segments(sa, sb)[1]
        self.kernel = (kernels or Kernels()).factory("tile_gemm")(MM)
        self.grid = (m // tm, n // tn)

    def __call__(self, a: Any, b: Any, out: Any = None) -> Any:
        out = cp.empty((self.m, self.n), dtype=cp.float32) if out is None else out
        require("A", a, np.float16, (self.m, self.k))
        require("B", b, np.float16, (self.k, self.n))
        require("C", out, np.float32, (self.m, self.n))
        launch.launch(self.kernel, self.grid, self.MM.block_size, self.shared_bytes, a, b, out)
        return out


# ------------------------------------------------------------------------------------------------------------
# A device pipeline: the library's own K loop, re-pointed with reset_tile
# ------------------------------------------------------------------------------------------------------------


@functools.cache
def stack_matmul(cfg: StackConfig = STACK_CONFIG) -> Matmul:
    """The stack-sum kernel's pipelined block GEMM: int8 A row-major, B column-major, int32 accumulator."""
    return pipeline_matmul("int8", cfg.tile_m, cfg.tile_n, cfg.threads, tile_k=cfg.tile_k)


@functools.cache
def make_stack_sum_kernel(MM: Matmul):
    """C tile (i, j) = sum over s of A_s @ B_s: one tile pipeline per block, re-pointed at each pair by reset_tile."""
    TM, TN, _ = MM.size

    @cuda.jit(extensions=pipeline_extensions, launch_bounds=(MM.block_size, 1))
    def stack_sum_kernel(c, stack, device_pipeline):
        smem = cuda.shared.array(shape=(0,), dtype=np.byte, alignment=device_pipeline.buffer_alignment)
        bi, bj = int32(cuda.blockIdx.x), int32(cuda.blockIdx.y)
        tile = device_pipeline.get_tile(smem, (bi, int32(0)), (bj, int32(0)))  # A_0's row tile, B_0's column tile
        acc = MM.suggest_accumulator()
        acc.clear()
        tile.execute(acc)  # the whole K loop of A_0 @ B_0, stages streaming through shared memory
        for s in range(1, stack):
            device_pipeline.reset_tile(tile, (bi, int32(s)), (bj, int32(s)))  # same tile, the next pair
            tile.execute(acc)  # adds A_s @ B_s
        tile._del()
        out = make_tensor(c[bi * TM : (bi + 1) * TM, bj * TN : (bj + 1) * TN], MM.get_layout_gmem_c(c.shape[1]))
        if acc.is_thread_active():
            acc.partition_and_copy(acc.get_results(), out)

    return stack_sum_kernel


class StackSum:
    """C = sum over s of A_s @ B_s for int8 stacks ``a`` (S, m, k) and ``bt`` (S, n, k) (each B_s given as its
    transpose, K-contiguous), int32 C (m, n).

    The device pipeline is made here for these two arrays (its TMA descriptors hold their addresses): the plan
    computes with whatever they hold when it is called. It sees them as 3-D tensors, (m, k, S) and (k, n, S), so that
    a (tile, s) pair names one tile of one matrix of the stack. ``cfg``: the tile and depth (default
    ``STACK_CONFIG``); ``kernels=Kernels(stack_sum=...)`` replaces :func:`make_stack_sum_kernel`.
    """

    def __init__(self, a: Any, bt: Any, cfg: StackConfig | None = None, kernels: Kernels | None = None):
        stack, m, k = a.shape
        c = cfg or STACK_CONFIG
        tm, tn, tk, depth = c.tile_m, c.tile_n, c.tile_k, c.depth
        n = bt.shape[1]
        require("A", a, np.int8, (stack, m, k))
        require("B^T", bt, np.int8, (stack, n, k))
        if m % tm or n % tn or k % tk or k // tk < depth:
            raise ValueError(
                f"{m}x{n}x{k}: m and n must be multiples of {tm} and {tn}, k a multiple of {tk} and at least "
                f"{depth * tk} (one {tk}-deep stage for each of the {depth} in flight)"
            )
        self.MM = stack_matmul(c)
        self.a, self.bt, self.stack, self.m, self.n = a, bt, stack, m, n
        self.pipeline = pipelines.device_pipeline(self.MM, depth, a.transpose(1, 2, 0), bt.transpose(2, 1, 0))
        self.kernel = (kernels or Kernels()).factory("stack_sum")(self.MM)
        self.grid = (m // tm, n // tn)

    def __call__(self, out: Any = None) -> Any:
        out = cp.empty((self.m, self.n), dtype=cp.int32) if out is None else out
        p = self.pipeline
        # the DevicePipeline argument takes numba's dispatcher inside launch.launch: nvmath packs it, not the fast path
        launch.launch(self.kernel, self.grid, p.block_dim, p.buffer_size, out, self.stack, p)
        return out

"""Multi-pass tensorization on tensor cores (GPU only): a tile GEMM whose K loop runs phases of F fused passes.

cuBLASDx's block ``Matmul`` takes its operands from shared memory and walks its K depth in MMA steps (on sm_90a
the tensor API loads each step's fragments with ldmatrix and issues mma.sync; the pipeline API issues WGMMA),
so fusing passes is a trade at the global->shared level: one phase copies the A and B tiles of F passes into
shared memory (asynchronously, double-buffered), waits once, and runs one ``Matmul`` of depth F * PK over them.
Larger F: fewer waits and barriers, longer MMA bursts, more shared memory per block (fewer blocks per SM).

Also here, as reference points: the same GEMM through cuBLASDx's own pipeline (TMA + mbarriers, the kernels of
the Ozaki-I track, ``utilities.ozaki.tensorcore``) and the compiled kernels' resources (registers, spills,
shared memory, occupancy).
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
from nvmath.device.common import clear, copy, copy_fragment, copy_wait, make_tensor
from nvmath.device.cublasdx_numba import pipeline_extensions

from .. import plans, smem
from ..machinery import launch, pipelines
from ..machinery.aligned_copy import gmem_layout
from ..operands import require
from ..tiles import OUT_DTYPE, PIPELINE_TILE_K, block_matmul, pipeline_matmul
from .config import PassConfig, PipelineConfig, validate_problem

SMEM_ALIGN = smem.ALIGN_BYTES  # every shared buffer starts on 1 KiB: enough for any swizzled layout cuBLASDx suggests


@functools.cache
def matmul_for(cfg: PassConfig, sm: Any = None) -> Matmul:
    """The block-level ``Matmul`` of one phase: (tile_m, tile_n, F * PK), A row-major, B column-major."""
    return block_matmul(cfg.dtype, (cfg.tile_m, cfg.tile_n, cfg.phase_k), cfg.threads, sm=sm)


def smem_offsets(MM: Matmul) -> tuple[tuple[int, int, int, int], int]:
    """Element offsets of the buffers A0, B0, A1, B1 in shared memory, and the bytes they take in all."""
    item = np.dtype(MM.a_value_type).itemsize
    a_bytes = MM.suggest_layout_smem_a().cosize * item
    b_bytes = MM.suggest_layout_smem_b().cosize * item
    offsets, end = smem.segments(a_bytes, b_bytes, a_bytes, b_bytes)
    return tuple(o // item for o in offsets), end


@functools.cache
def make_multipass_kernel(MM: Matmul):
    """C tile (i, j) = sum over phases g of A[i, phase g] @ B[phase g, j]; each phase is F fused passes.

    ``a`` is (m, k) row-major, ``bt`` = B^T is (n, k) row-major (B column-major), ``c`` is (m, n) row-major.
    Two shared buffers per operand: while phase g's passes run from one, phase g + 1 is copied into the other.
    """
    TM, TN, TK = MM.size  # TK = F * PK: the K depth of one phase
    DTYPE = MM.a_value_type
    (A0, B0, A1, B1), _ = smem_offsets(MM)
    A_SIZE, B_SIZE = MM.suggest_layout_smem_a().cosize, MM.suggest_layout_smem_b().cosize
    C_SIZE = MM.suggest_layout_rmem_c().cosize
    # global-memory layouts that promise 16-byte alignment, so that ``copy`` moves 16 bytes per instruction
    gmem_a, gmem_b, gmem_c = gmem_layout(MM, "a"), gmem_layout(MM, "b"), gmem_layout(MM, "c")

    @cuda.jit(launch_bounds=(MM.block_size, 1))
    def multipass_kernel(a, bt, c):
        smem = cuda.shared.array(shape=(0,), dtype=DTYPE, alignment=SMEM_ALIGN)
        bm, bn = cuda.blockIdx.x, cuda.blockIdx.y
        k = a.shape[1]
        phases = k // TK
        a_rows = a[bm * TM : (bm + 1) * TM, :]  # the block's rows of A, all of K
        b_cols = bt[bn * TN : (bn + 1) * TN, :]  # the block's columns of B, all of K
        smem_a = make_tensor(smem[A0 : A0 + A_SIZE], MM.suggest_layout_smem_a())
        smem_b = make_tensor(smem[B0 : B0 + B_SIZE], MM.suggest_layout_smem_b())
        next_a = make_tensor(smem[A1 : A1 + A_SIZE], MM.suggest_layout_smem_a())
        next_b = make_tensor(smem[B1 : B1 + B_SIZE], MM.suggest_layout_smem_b())
        acc = make_tensor(cuda.local.array(shape=(C_SIZE,), dtype=MM.c_value_type), MM.suggest_layout_rmem_c())
        clear(acc)
        # phase 0 in flight before the loop
        copy(make_tensor(a_rows[:, 0:TK], gmem_a(k)), smem_a)
        copy(make_tensor(b_cols[:, 0:TK], gmem_b(k)), smem_b)
        for g in range(phases):
            # TODO (about 8 lines): phase g. Wait for its copies (copy_wait, which ends with a block barrier);
            # unless g is the last phase, copy phase g + 1 (K from (g + 1) * TK) into next_a / next_b; run
            # MM.execute on phase g's buffers into acc; swap the current and next buffers.
            # SKELETON: pass
            # BEGIN SOLUTION
            copy_wait()  # this thread's copies landed, then a barrier: every thread's did, and phase g - 1 is done
            if g + 1 < phases:
                k1 = (g + 1) * TK
                copy(make_tensor(a_rows[:, k1 : k1 + TK], gmem_a(k)), next_a)
                copy(make_tensor(b_cols[:, k1 : k1 + TK], gmem_b(k)), next_b)
            MM.execute(smem_a, smem_b, acc)
            smem_a, next_a = next_a, smem_a
            smem_b, next_b = next_b, smem_b
            # END SOLUTION
        copy_wait()
        out = make_tensor(c[bm * TM : (bm + 1) * TM, bn * TN : (bn + 1) * TN], gmem_c(c.shape[1]))
        copy_fragment(acc, out)

    return multipass_kernel


# ------------------------------------------------------------------------------------------------------------
# The plan
# ------------------------------------------------------------------------------------------------------------


def _as_colmajor_b(b: Any, n: int, k: int) -> Any:
    """B^T as a C-contiguous (n, k) array: ``b`` is that array, or its transpose (a (k, n) column-major B)."""
    if tuple(b.shape) == (k, n) and b.flags.f_contiguous and not b.flags.c_contiguous:
        return b.T
    return b


def check_operands(a: Any, bt: Any, m: int, n: int, k: int, dtype: str) -> None:
    require("A", a, dtype, (m, k))
    require("B^T", bt, dtype, (n, k), hint=" (pass B column-major: the (n, k) array B^T, or B.T of one)")


@dataclass(frozen=True)
class Kernels(plans.Kernels):
    """The kernel factory ``PassGemm`` uses instead of the course's :func:`make_multipass_kernel`."""

    multipass: Callable[..., Any] | None = None

    def course(self) -> dict[str, Callable[..., Any]]:
        return {"multipass": make_multipass_kernel}


class PassGemm:
    """C = A @ B with the multi-pass kernel of ``cfg``: int8 -> int32 or FP16 -> FP32, B column-major.

    Call it as ``plan(a, bt)`` with A (m, k) row-major and B given column-major: the (n, k) array B^T (or
    ``b`` itself when it is a column-major (k, n) array). ``kernels=Kernels(multipass=...)`` replaces
    :func:`make_multipass_kernel` (the exercise passes the attendee's).
    """

    def __init__(self, m: int, n: int, k: int, cfg: PassConfig | None = None, kernels: Kernels | None = None):
        self.cfg = cfg or PassConfig()
        self.phases = validate_problem(m, n, k, self.cfg)
        self.m, self.n, self.k = m, n, k
        self.MM = matmul_for(self.cfg)
        _, self.shared = smem_offsets(self.MM)
        self.kernel = (kernels or Kernels()).factory("multipass")(self.MM)
        self.grid = (m // self.cfg.tile_m, n // self.cfg.tile_n)
        self.block = self.MM.block_dim

    def __call__(self, a: Any, b: Any, out: Any = None) -> Any:
        bt = _as_colmajor_b(b, self.n, self.k)
        check_operands(a, bt, self.m, self.n, self.k, self.cfg.dtype)
        out = cp.empty((self.m, self.n), dtype=OUT_DTYPE[self.cfg.dtype]) if out is None else out
        launch.launch(self.kernel, self.grid, self.block, self.shared, a, bt, out)
        return out

    def resources(self) -> dict[str, Any]:
        """Registers, spills, shared memory and occupancy of the compiled kernel (builds it if needed)."""
        a = cp.empty((self.m, self.k), dtype=self.cfg.dtype)
        bt = cp.empty((self.n, self.k), dtype=self.cfg.dtype)
        out = cp.empty((self.m, self.n), dtype=OUT_DTYPE[self.cfg.dtype])
        return launch.resources(self.kernel, self.cfg.threads, self.shared, a, bt, out)


# ------------------------------------------------------------------------------------------------------------
# Reference point: the same GEMM through cuBLASDx's own pipeline (TMA + mbarriers)
# ------------------------------------------------------------------------------------------------------------


@functools.cache
def make_pipeline_kernel(MM: Matmul):
    """Block (i, j) runs the device pipeline over all of K for tile (i, j) of C: the library's own loop."""
    TM, TN, _ = MM.size

    @cuda.jit(extensions=pipeline_extensions, launch_bounds=(MM.block_size, 1))
    def pipeline_gemm_kernel(c, device_pipeline):
        smem = cuda.shared.array(shape=(0,), dtype=np.byte, alignment=device_pipeline.buffer_alignment)
        bm, bn = int32(cuda.blockIdx.x), int32(cuda.blockIdx.y)
        tile = device_pipeline.get_tile(smem, bm, bn)
        acc = MM.suggest_accumulator()
        acc.clear()
        tile.execute(acc)
        tile._del()
        out = make_tensor(c[bm * TM : (bm + 1) * TM, bn * TN : (bn + 1) * TN], MM.get_layout_gmem_c(c.shape[1]))
        if acc.is_thread_active():
            acc.partition_and_copy(acc.get_results(), out)

    return pipeline_gemm_kernel


class PipelineGemm:
    """C = A @ B through cuBLASDx's device pipeline, same operands as :class:`PassGemm`; ``cfg`` (a
    ``PipelineConfig``) gives the tile, threads and depth (default: 128 x 128, 256 threads, three stages).

    The pipeline is built for the operand buffers given here (its TMA descriptors point at them), so this plan
    computes the product of ``a`` and ``bt`` each time it is called; copy new values into them to reuse it.
    """

    def __init__(self, a: Any, bt: Any, dtype: str = "int8", cfg: PipelineConfig | None = None):
        m, k = a.shape
        n = bt.shape[0]
        check_operands(a, bt, m, n, k, dtype)
        self.cfg = c = cfg or PipelineConfig()
        tk, depth = c.tile_k or PIPELINE_TILE_K[dtype], c.depth
        if m % c.tile_m or n % c.tile_n or k % tk or k // tk < depth:
            raise ValueError(
                f"{m}x{n}x{k}: m, n must be multiples of {(c.tile_m, c.tile_n)} and k a multiple of {tk} with "
                f"k >= {depth * tk}"
            )
        self.m, self.n, self.k, self.dtype = m, n, k, dtype
        self.MM = pipeline_matmul(dtype, c.tile_m, c.tile_n, c.threads, tile_k=c.tile_k)
        self.a, self.bt = a, bt
        self.pipeline = pipelines.device_pipeline(self.MM, depth, a, bt.T)
        self.kernel = make_pipeline_kernel(self.MM)
        self.grid = (m // c.tile_m, n // c.tile_n)

    def __call__(self, out: Any = None) -> Any:
        out = cp.empty((self.m, self.n), dtype=OUT_DTYPE[self.dtype]) if out is None else out
        p = self.pipeline
        # the DevicePipeline argument takes numba's dispatcher inside launch.launch: nvmath packs it, not the fast path
        launch.launch(self.kernel, self.grid, p.block_dim, p.buffer_size, out, p)
        return out

    def resources(self) -> dict[str, Any]:
        out = cp.empty((self.m, self.n), dtype=OUT_DTYPE[self.dtype])
        p = self.pipeline
        return launch.resources(self.kernel, self.MM.block_size, p.buffer_size, out, p)

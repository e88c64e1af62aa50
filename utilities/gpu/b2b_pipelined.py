"""Back-to-back GEMMs with GEMM 0 on cuBLASDx's device pipeline (TMA loads, WGMMA on sm_90), GEMM 1 a block GEMM.

A persistent kernel: one wave of blocks, each walking row tiles ``blockIdx.x``, ``blockIdx.x + gridDim.x``, ...
For each tile the block's tile pipeline computes ``acc0 = A0[tile] @ B0`` over all N0 columns (the pipeline's
tile is TM x N0), the block turns it into FP16 ``D0 = relu(alpha0 * acc0)`` in shared memory, points the
pipeline at its next tile (``reset_tile``), and runs GEMM 1 (``mma``-based, both operands in shared memory) on D0
and the resident B1, with the epilogue on C1. D0 never leaves the block; B1 is loaded once per block.

Why: in ``blockfusion``'s persistent kernel both GEMMs are ``mma``-based block GEMMs, and at (64, 256, 64) it
reaches about 150 TFLOP/s. Moving GEMM 0 to the pipeline (WGMMA, TMA) took (64, 256, 64) at M = 2^18 from 111.9
to 98.5 us on an H100; at (576, 64, 128), where the traffic is mostly A0, it did not help (206 us in a trial,
against 203 for the streaming kernel). See the fusion report in ``results/``. GEMM 1 cannot follow: a pipeline
multiplies arrays in global memory, and GEMM 1's A operand is D0 in shared memory.

The pipeline is built for the A0 and B0 arrays given to the plan (its TMA descriptors hold their addresses, and
its type their shapes), like ``multipass.PipelineGemm``: a call computes with their current values.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import cupy as cp
import numpy as np
from numba import cuda, float32, int32
from nvmath.device import Matmul
from nvmath.device.common import copy, copy_fragment, copy_wait, make_tensor
from nvmath.device.cublasdx_numba import pipeline_extensions

from ..fusion import layout
from . import launch
from .aligned_copy import gmem_layout
from .blockfusion import BlockConfig, _fits_shared_memory, b2b_constraints, fp16_matmul, one_wave_grid
from .operands import require


@dataclass(frozen=True)
class PipelineConfig:
    """Row tile and threads of the block, K depth and stages of GEMM 0's pipeline."""

    tile_m: int = 64
    threads: int = 128
    tile_k: int = 32
    depth: int = 2


def smem_layout(MM1: Matmul, pipeline_bytes: int) -> tuple[list[int], int]:
    """FP16 offsets of D0, B1 and the C1 / D1 tile after the pipeline's ``pipeline_bytes``, and where they end."""
    sizes = (MM1.suggest_layout_smem_a().cosize, MM1.suggest_layout_smem_b().cosize, MM1.suggest_layout_smem_c().cosize)
    return layout.after_pipeline(pipeline_bytes, *sizes)


@functools.cache
def make_b2b_pipelined_kernel(MMP: Matmul, MM1: Matmul, pipeline_bytes: int):
    """The persistent kernel; ``pipeline_bytes`` of shared memory at offset 0 belong to the pipeline."""
    TM, N0, _ = MMP.size
    _, N1, K1 = MM1.size
    assert K1 == N0 and MM1.size[0] == TM and MMP.block_size == MM1.block_size
    SD, SW = MM1.suggest_layout_smem_a().cosize, MM1.suggest_layout_smem_b().cosize
    SC = MM1.suggest_layout_smem_c().cosize
    (D_AT, W_AT, C_AT), _ = smem_layout(MM1, pipeline_bytes)
    F0 = MMP.suggest_layout_rmem_c().cosize
    F1 = MM1.suggest_layout_rmem_c().cosize
    gmem_b1, gmem_c1 = gmem_layout(MM1, "b"), gmem_layout(MM1, "c")

    @cuda.jit(extensions=pipeline_extensions, launch_bounds=(MM1.block_size, 1))
    def b2b_pipelined_kernel(b1, c1, alpha0, alpha1, beta1, d1, device_pipeline):
        raw = cuda.shared.array(shape=(0,), dtype=np.byte, alignment=1024)
        smem = cuda.shared.array(shape=(0,), dtype=np.float16, alignment=1024)  # the same memory, as FP16
        z, step = int32(cuda.blockIdx.y), int32(cuda.gridDim.x)
        t = int32(cuda.blockIdx.x)
        tiles = c1.shape[1] // TM
        read_c1 = beta1 != 0
        sd = make_tensor(smem[D_AT : D_AT + SD], MM1.suggest_layout_smem_a())
        sw = make_tensor(smem[W_AT : W_AT + SW], MM1.suggest_layout_smem_b())
        sc = make_tensor(smem[C_AT : C_AT + SC], MM1.suggest_layout_smem_c())
        copy(make_tensor(b1[z], gmem_b1(N1)), sw)
        tile = device_pipeline.get_tile(raw, (t, z), (int32(0), z))
        acc0 = MMP.suggest_accumulator()
        acc1 = MM1.suggest_accumulator()
        while t < tiles:
            row0 = t * TM
            if read_c1:
                copy(make_tensor(c1[z, row0 : row0 + TM, :], gmem_c1(N1)), sc)
            acc0.clear()
            tile.execute(acc0)
            r0 = acc0.get_results()
            d0_tile = make_tensor(cuda.local.array(F0, np.float16), MMP.suggest_layout_rmem_c())
            for i in range(F0):
                x = alpha0 * r0[i]
                d0_tile[i] = x if x > 0 else float32(0)
            copy_fragment(d0_tile, sd)
            nxt = int32(t + step)  # int32 + int32 is int64 in numba; the tile indices are int32 pairs
            if nxt < tiles:
                device_pipeline.reset_tile(tile, (nxt, z), (int32(0), z))
            copy_wait()  # C1 (and, the first time, B1) has landed; D0 is complete
            acc1.clear()
            MM1.execute(sd, sw, acc1)
            r1 = acc1.get_results()
            out = make_tensor(cuda.local.array(F1, np.float16), MM1.suggest_layout_rmem_c())
            if read_c1:
                c_part = cuda.local.array(F1, np.float16)
                copy_fragment(sc, make_tensor(c_part, MM1.suggest_layout_rmem_c()))
                for i in range(F1):
                    x = alpha1 * r1[i] + beta1 * float32(c_part[i])
                    out[i] = x if x > 0 else float32(0)
            else:
                for i in range(F1):
                    x = alpha1 * r1[i]
                    out[i] = x if x > 0 else float32(0)
            cuda.syncthreads()  # every thread has read its part of C1, and GEMM 1 is done with D0
            copy_fragment(out, sc)
            cuda.syncthreads()
            copy(sc, make_tensor(d1[z, row0 : row0 + TM, :], gmem_c1(N1)))
            copy_wait()
            t = nxt
        tile._del()

    return b2b_pipelined_kernel


class PipelinedBackToBack:
    """D1 = relu(alpha1 * relu(alpha0 * A0 @ B0) @ B1 + beta1 * C1) with GEMM 0 on the device pipeline.

    The plan is built for ``a0`` and ``b0`` (3-D: batch, rows, columns); each call computes with their current
    values and the B1, C1 given to it.
    """

    def __init__(self, a0: Any, b0: Any, n1: int, cfg: PipelineConfig | None = None):
        self.cfg = c = cfg or PipelineConfig()
        if getattr(a0, "ndim", 0) != 3 or getattr(b0, "ndim", 0) != 3:
            raise ValueError("a0 and b0 must be 3-D (batch, rows, columns): pass a0[None] and b0[None] for one problem")
        nb, m, k0 = a0.shape
        n0 = b0.shape[2]
        require("a0", a0, np.float16, (nb, m, k0))
        require("b0", b0, np.float16, (nb, k0, n0))
        b2b_constraints(m, k0, n0, n1, BlockConfig(tile_m=c.tile_m, tile_k=c.tile_k))
        if k0 // c.tile_k < c.depth:
            raise ValueError(f"K0 = {k0} is too small for a {c.depth}-stage pipeline of {c.tile_k}-deep tiles: use "
                             "a PipelineConfig with a smaller depth or tile_k")  # fmt: skip
        self.m, self.k0, self.n0, self.n1, self.nb = m, k0, n0, n1, nb
        self.a0, self.b0 = a0, b0
        self.MMP = fp16_matmul(c.tile_m, n0, c.tile_k, c.threads, pipeline=True)
        self.MM1 = fp16_matmul(c.tile_m, n1, n0, c.threads)
        self.pipeline = self.MMP.suggest_device_pipeline(c.depth, a0.transpose(1, 2, 0), b0.transpose(1, 2, 0))
        p = self.pipeline
        if p.buffer_alignment > 1024:
            raise RuntimeError(f"the pipeline asks for {p.buffer_alignment}-byte aligned shared memory, the kernel "
                               "gives 1024: this libmathdx is not the verified one")  # fmt: skip
        self.kernel = make_b2b_pipelined_kernel(self.MMP, self.MM1, p.buffer_size)
        self.shared_bytes = 2 * smem_layout(self.MM1, p.buffer_size)[1]
        fix = "B1 (N0 x N1), D0 and the pipeline's stages stay in shared memory: use BackToBack, or fewer stages"
        _fits_shared_memory(self.shared_bytes, f"(K0, N0, N1) = ({k0}, {n0}, {n1}) with {c}", fix)
        self.grid: tuple[int, int] | None = None  # one wave of blocks: known once the kernel is compiled

    def __call__(self, b1: Any, c1: Any, alpha0: float = 1.0, alpha1: float = 1.0, beta1: float = 0.0,
                 out: Any = None) -> Any:  # fmt: skip
        nb, m, n0, n1 = self.nb, self.m, self.n0, self.n1
        out = cp.empty((nb, m, n1), dtype=cp.float16) if out is None else out
        require("b1", b1, np.float16, (nb, n0, n1))
        require("c1", c1, np.float16, (nb, m, n1))
        require("out", out, np.float16, (nb, m, n1))
        args = (b1, c1, np.float32(alpha0), np.float32(alpha1), np.float32(beta1), out, self.pipeline)
        if self.grid is None:
            tiles, threads = m // self.cfg.tile_m, self.MM1.block_size
            self.grid = one_wave_grid(self.kernel, threads, self.shared_bytes, args, tiles, nb, "use BackToBack")
        launch.launch(self.kernel, self.grid, self.pipeline.block_dim, self.shared_bytes, *args)
        return out

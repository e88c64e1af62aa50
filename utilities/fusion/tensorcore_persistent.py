"""Persistent back-to-back GEMM kernels (GPU only): one wave of blocks walks the row tiles, B0 and B1 resident.

Both compute ``D1 = relu(alpha1 * relu(alpha0 * A0 @ B0) @ B1 + beta1 * C1)`` with the arithmetic of the
streaming kernel (``tensorcore.make_b2b_kernel``) in the same order, so the results agree bit for bit:

- ``make_b2b_persistent_kernel`` (``PersistentBackToBack``): each block loads B0 and B1 into shared memory once
  and walks row tiles ``blockIdx.x``, ``blockIdx.x + gridDim.x``, ... The A0 stages of all its tiles form one
  stream, ``depth`` buffers deep, with the A0 (and C1) loads of later tiles in flight ``depth - 1`` stages ahead
  (``utilities.machinery.cp_async`` groups). It pays where B0 and B1 are a large share of each block's loads, as
  at (64, 256, 64), and keeps its tensor cores busy only a fraction of the time (each tile's two GEMMs and
  epilogues run one after another).
- ``make_b2b_pipelined_kernel`` (``PipelinedBackToBack``): GEMM 0 on cuBLASDx's device pipeline (TMA loads, WGMMA
  on sm_90). For each tile the block's tile pipeline computes ``acc0 = A0[tile] @ B0`` over all N0 columns, the
  block turns it into FP16 D0 in shared memory, points the pipeline at its next tile (``reset_tile``), and runs
  GEMM 1 (``mma``-based, both operands in shared memory) on D0 and the resident B1. GEMM 1 cannot follow onto
  the pipeline: a pipeline multiplies arrays in global memory, and GEMM 1's A operand is D0 in shared memory.
  It pays at (64, 256, 64); at (576, 64, 128), where the traffic is mostly A0, it did not help (the fusion report
  in ``results/`` and ``instructor-notes/fusion.md`` have the times).

The pipelined plan is built for the A0 and B0 arrays given to it (its TMA descriptors hold their addresses, and
its type their shapes), like ``utilities.multipass.tensorcore.PipelineGemm``: a call computes with their current
values. Both epilogues are the device functions of :func:`make_b2b_epilogues`.
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

from ..machinery import cp_async, launch, pipelines
from ..machinery.aligned_copy import gmem_layout
from ..operands import require
from . import layout
from .tensorcore import BackToBack, BlockConfig, Kernels, b2b_constraints, fp16_matmul, kloop_smem


@functools.cache
def make_b2b_epilogues(MM0: Matmul, MM1: Matmul) -> tuple[Any, Any]:
    """The two epilogues of the persistent back-to-back kernels, as device functions ``(d0_epilogue, d1_epilogue)``.

    - ``d0_epilogue(acc0, alpha0, sd)``: D0 = relu(alpha0 * acc0) in FP16, stored into ``sd`` (shared memory, the
      A operand of GEMM 1);
    - ``d1_epilogue(acc1, alpha1, beta1, read_c1, sc)``: D1 = relu(alpha1 * acc1 + beta1 * C1) in FP16 into ``sc``,
      the shared tile that holds this row tile's C1 (read only when ``read_c1``), between two barriers.

    The exercise's kernel (``tensorcore.make_b2b_kernel``) writes the same arithmetic inline: its TODO regions are
    these lines. Same operations in the same order, so every kernel gives the same bits.
    """
    F0 = MM0.suggest_layout_rmem_c().cosize
    F1 = MM1.suggest_layout_rmem_c().cosize

    @cuda.jit(device=True, forceinline=True)
    def d0_epilogue(acc0, alpha0, sd):
        r0 = acc0.get_results()
        d0_tile = make_tensor(cuda.local.array(F0, np.float16), MM0.suggest_layout_rmem_c())
        for i in range(F0):
            x = alpha0 * r0[i]
            d0_tile[i] = x if x > 0 else float32(0)
        copy_fragment(d0_tile, sd)

    @cuda.jit(device=True, forceinline=True)
    def d1_epilogue(acc1, alpha1, beta1, read_c1, sc):
        r1 = acc1.get_results()
        out = make_tensor(cuda.local.array(F1, np.float16), MM1.suggest_layout_rmem_c())
        if read_c1:
            c_part = cuda.local.array(F1, np.float16)
            copy_fragment(sc, make_tensor(c_part, MM1.suggest_layout_rmem_c()))
            for i in range(F1):
                x = alpha1 * r1[i] + beta1 * float32(c_part[i])
                out[i] = x if x > 0 else float32(0)
        else:  # C1 is not read when beta1 == 0
            for i in range(F1):
                x = alpha1 * r1[i]
                out[i] = x if x > 0 else float32(0)
        cuda.syncthreads()  # every thread has read its part of C1 (and is done with what it read before)
        copy_fragment(out, sc)
        cuda.syncthreads()

    return d0_epilogue, d1_epilogue


# ------------------------------------------------------------------------------------------------------------
# Persistent, both GEMMs on mma: B0 and B1 stay in shared memory while the block walks its row tiles
# ------------------------------------------------------------------------------------------------------------


def b2b_persistent_layout(MM0: Matmul, MM1: Matmul, k0: int, depth: int) -> layout.PersistentLayout:
    """Where the persistent kernel keeps B0, B1, D0, ``depth`` A0 stages and its C1 / D1 tiles."""
    sa, sb = kloop_smem(MM0)
    sd, sw = MM1.suggest_layout_smem_a().cosize, MM1.suggest_layout_smem_b().cosize
    sc = MM1.suggest_layout_smem_c().cosize
    return layout.persistent_layout(sa, sb, sd, sw, sc, stages=k0 // MM0.size[2], depth=depth)


@functools.cache
def make_b2b_persistent_kernel(MM0: Matmul, MM1: Matmul, k0: int, depth: int = 3):
    """The back-to-back kernel as a persistent loop: each block loads B0 and B1 once, then computes row tiles
    ``blockIdx.x``, ``blockIdx.x + gridDim.x``, ... The A0 stages of all its tiles form one stream, ``depth``
    buffers deep: while the tensor cores work on stage q, the copies of stages q + 1 ... q + depth - 1 are in
    flight (``cp_async.wait_prior``), across row tiles, so GEMM 1 and the epilogue of one tile hide the loads of
    the next. The arithmetic per tile is ``make_b2b_kernel``'s, in the same order, so the results are the same.
    """
    TM, N0, TK = MM0.size
    _, N1, K1 = MM1.size
    assert K1 == N0 and MM1.size[0] == TM and MM0.block_size == MM1.block_size and k0 % TK == 0 and depth >= 2
    NS = k0 // TK
    L = b2b_persistent_layout(MM0, MM1, k0, depth)
    B0_AT, B0_STEP, W_AT, D_AT = L.b0, L.b0_stage, L.b1, L.d0  # plain ints: numba reads globals, not dataclasses
    A_AT, A_STEP, C_AT, C_STEP, CBUF = L.a0, L.a0_stage, L.c, L.c_tile, L.c_buffers
    SA, SB = kloop_smem(MM0)
    SD, SW = MM1.suggest_layout_smem_a().cosize, MM1.suggest_layout_smem_b().cosize
    SC = MM1.suggest_layout_smem_c().cosize
    d0_epilogue, d1_epilogue = make_b2b_epilogues(MM0, MM1)
    gmem_a0, gmem_b0 = gmem_layout(MM0, "a"), gmem_layout(MM0, "b")
    gmem_b1, gmem_c1 = gmem_layout(MM1, "b"), gmem_layout(MM1, "c")
    wait_oldest = cp_async.wait_prior(depth - 2)
    commit = cp_async.commit

    @cuda.jit(device=True, inline=True)
    def issue(smem, a0z, c1z, q, t0, step, tiles, read_c1):
        """Start the copies of stream stage q: an A0 stage, and with a tile's first stage its C1 tile."""
        tile = t0 + (q // NS) * step
        s = q % NS
        if tile < tiles:
            row0 = tile * TM
            at = A_AT + (q % depth) * A_STEP
            sa = make_tensor(smem[at : at + SA], MM0.suggest_layout_smem_a())
            copy(make_tensor(a0z[row0 : row0 + TM, s * TK : s * TK + TK], gmem_a0(NS * TK)), sa)
            if s == 0 and read_c1:
                ct = C_AT + ((q // NS) % CBUF) * C_STEP
                copy(
                    make_tensor(c1z[row0 : row0 + TM, :], gmem_c1(N1)),
                    make_tensor(smem[ct : ct + SC], MM1.suggest_layout_smem_c()),
                )
        commit()  # an empty group past the end keeps the count of groups per stage at one

    @cuda.jit(launch_bounds=(MM0.block_size, 1))
    def b2b_persistent_kernel(a0, b0, b1, c1, alpha0, alpha1, beta1, d1):
        smem = cuda.shared.array(shape=(0,), dtype=np.float16, alignment=1024)
        z, t0, step = cuda.blockIdx.y, cuda.blockIdx.x, cuda.gridDim.x
        tiles = a0.shape[1] // TM
        a0z, c1z, d1z, b0z = a0[z], c1[z], d1[z], b0[z]
        read_c1 = beta1 != 0  # C1 is not read when beta1 == 0
        for s in range(NS):  # the resident operands, in the first group
            at = B0_AT + s * B0_STEP
            copy(
                make_tensor(b0z[s * TK : s * TK + TK, :], gmem_b0(N0)),
                make_tensor(smem[at : at + SB], MM0.suggest_layout_smem_b()),
            )
        sw = make_tensor(smem[W_AT : W_AT + SW], MM1.suggest_layout_smem_b())
        copy(make_tensor(b1[z], gmem_b1(N1)), sw)
        for q in range(depth - 1):
            issue(smem, a0z, c1z, q, t0, step, tiles, read_c1)
        sd = make_tensor(smem[D_AT : D_AT + SD], MM1.suggest_layout_smem_a())
        acc0 = MM0.suggest_accumulator()
        acc1 = MM1.suggest_accumulator()
        q = 0
        tile = t0
        while tile < tiles:
            acc0.clear()
            for s in range(NS):
                wait_oldest()  # this thread's copies of stage q have landed ...
                cuda.syncthreads()  # ... and everyone's; every warp is done with stage q - 1's buffer
                issue(smem, a0z, c1z, q + depth - 1, t0, step, tiles, read_c1)  # into stage q - 1's buffer
                at = A_AT + (q % depth) * A_STEP
                bt = B0_AT + s * B0_STEP
                MM0.execute(make_tensor(smem[at : at + SA], MM0.suggest_layout_smem_a()),
                            make_tensor(smem[bt : bt + SB], MM0.suggest_layout_smem_b()), acc0)  # fmt: skip
                q += 1
            # D0 into shared memory (GEMM 1 of the last tile is done with sd: a barrier of the K loop came after it)
            d0_epilogue(acc0, alpha0, sd)
            cuda.syncthreads()
            acc1.clear()
            MM1.execute(sd, sw, acc1)
            ct = C_AT + (((q - 1) // NS) % CBUF) * C_STEP
            sc = make_tensor(smem[ct : ct + SC], MM1.suggest_layout_smem_c())
            d1_epilogue(acc1, alpha1, beta1, read_c1, sc)
            row0 = tile * TM
            copy(sc, make_tensor(d1z[row0 : row0 + TM, :], gmem_c1(N1)))
            tile += step
        copy_wait()  # the empty groups past the end, and every store

    return b2b_persistent_kernel


class PersistentBackToBack(BackToBack):
    """``BackToBack``'s product with the persistent kernel: one wave of blocks, B0 and B1 loaded once per block.

    Same operands and results (bit for bit) as the streaming plan; it takes no ``kernels`` and cannot keep D0.
    """

    def __init__(self, m: int, k0: int, n0: int, n1: int, batch: int | None = None, cfg: BlockConfig | None = None):
        super().__init__(m, k0, n0, n1, batch=batch, cfg=cfg)
        self.grid = None  # one wave of blocks: known once the kernel is compiled

    def _build(self, kernels: Kernels) -> None:
        c, k0, n0, n1 = self.cfg, self.k0, self.n0, self.n1
        self.shared_bytes = b2b_persistent_layout(self.MM0, self.MM1, k0, c.depth).nbytes
        _fits_shared_memory(self.shared_bytes, f"(K0, N0, N1) = ({k0}, {n0}, {n1}) with {c}")
        self.kernel = make_b2b_persistent_kernel(self.MM0, self.MM1, k0, c.depth)

    def __call__(
        self,
        a0: Any,
        b0: Any,
        b1: Any,
        c1: Any,
        alpha0: float = 1.0,
        alpha1: float = 1.0,
        beta1: float = 0.0,
        out: Any = None,
    ) -> Any:
        args, out = self.kernel_args(a0, b0, b1, c1, alpha0, alpha1, beta1, out)
        if self.grid is None:
            tiles, nb = self.m // self.cfg.tile_m, self.batch or 1
            self.grid = one_wave_grid(self.kernel, self.MM0.block_size, self.shared_bytes, args, tiles, nb)
        launch.launch(self.kernel, self.grid, self.MM0.block_size, self.shared_bytes, *args)
        return out


def one_wave_grid(
    kernel: Any,
    threads: int,
    shared_bytes: int,
    args: tuple[Any, ...],
    tiles: int,
    batch: int,
    fix: str = "use BackToBack (the streaming kernel)",
) -> tuple[int, int]:
    """A persistent kernel's grid: as many blocks as fit on the GPU at once (at most one per row tile), shared
    among the batch; RuntimeError, naming ``fix``, when not one block fits an SM."""
    per_sm = launch.resources(kernel, threads, shared_bytes, *args)["blocks_per_sm"]
    if per_sm < 1:
        raise RuntimeError(
            f"the persistent kernel does not fit an SM ({shared_bytes} bytes of shared memory, "
            f"{threads} threads): {fix}"
        )
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    return (max(1, min(tiles, sms * per_sm // batch)), batch)


def _fits_shared_memory(nbytes: int, what: str, fix: str = "") -> None:
    """Raise ValueError, naming the fix, when a block needs more shared memory than this GPU gives one block."""
    limit = cp.cuda.Device().attributes["MaxSharedMemoryPerBlockOptin"]
    if nbytes > limit:
        raise ValueError(
            f"the persistent kernel for {what} needs {nbytes // 1024} KiB of shared memory a block, this GPU gives "
            f"{limit // 1024} KiB: "
            + (
                fix
                or "B0 (K0 x N0) and B1 stay in shared memory, so use BackToBack (the streaming kernel) "
                "for a K0 x N0 this large, or a smaller depth or row tile"
            )
        )


# ------------------------------------------------------------------------------------------------------------
# Persistent, GEMM 0 on cuBLASDx's device pipeline
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class PipelineConfig(BlockConfig):
    """The block of the pipelined back-to-back kernel: row tile, threads, and the K depth (``tile_k``) and stages
    (``depth``) of GEMM 0's pipeline. Whole rows, as every back-to-back block (``tile_n`` None)."""

    tile_m: int = 64
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
    d0_epilogue, d1_epilogue = make_b2b_epilogues(MMP, MM1)
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
            d0_epilogue(acc0, alpha0, sd)
            nxt = int32(t + step)  # int32 + int32 is int64 in numba; the tile indices are int32 pairs
            if nxt < tiles:
                device_pipeline.reset_tile(tile, (nxt, z), (int32(0), z))
            copy_wait()  # C1 (and, the first time, B1) has landed; D0 is complete
            acc1.clear()
            MM1.execute(sd, sw, acc1)
            d1_epilogue(acc1, alpha1, beta1, read_c1, sc)  # its first barrier: GEMM 1 is done with D0 too
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
        b2b_constraints(m, k0, n0, n1, c)
        if k0 // c.tile_k < c.depth:
            raise ValueError(
                f"K0 = {k0} is too small for a {c.depth}-stage pipeline of {c.tile_k}-deep tiles: use "
                "a PipelineConfig with a smaller depth or tile_k"
            )
        self.m, self.k0, self.n0, self.n1, self.nb = m, k0, n0, n1, nb
        self.a0, self.b0 = a0, b0
        self.MMP = fp16_matmul(c.tile_m, n0, c.tile_k, c.threads, pipeline=True)
        self.MM1 = fp16_matmul(c.tile_m, n1, n0, c.threads)
        self.pipeline = pipelines.device_pipeline(self.MMP, c.depth, a0.transpose(1, 2, 0), b0.transpose(1, 2, 0))
        p = self.pipeline
        if p.buffer_alignment > 1024:
            raise RuntimeError(
                f"the pipeline asks for {p.buffer_alignment}-byte aligned shared memory, the kernel "
                "gives 1024: this libmathdx is not the verified one"
            )
        self.kernel = make_b2b_pipelined_kernel(self.MMP, self.MM1, p.buffer_size)
        self.shared_bytes = 2 * smem_layout(self.MM1, p.buffer_size)[1]
        fix = "B1 (N0 x N1), D0 and the pipeline's stages stay in shared memory: use BackToBack, or fewer stages"
        _fits_shared_memory(self.shared_bytes, f"(K0, N0, N1) = ({k0}, {n0}, {n1}) with {c}", fix)
        self.grid: tuple[int, int] | None = None  # one wave of blocks: known once the kernel is compiled

    def __call__(
        self, b1: Any, c1: Any, alpha0: float = 1.0, alpha1: float = 1.0, beta1: float = 0.0, out: Any = None
    ) -> Any:
        nb, m, n0, n1 = self.nb, self.m, self.n0, self.n1
        out = cp.empty((nb, m, n1), dtype=cp.float16) if out is None else out
        require("b1", b1, np.float16, (nb, n0, n1))
        require("c1", c1, np.float16, (nb, m, n1))
        require("out", out, np.float16, (nb, m, n1))
        args = (b1, c1, np.float32(alpha0), np.float32(alpha1), np.float32(beta1), out, self.pipeline)
        if self.grid is None:
            tiles, threads = m // self.cfg.tile_m, self.MM1.block_size
            fix = "use PersistentBackToBack or BackToBack"
            self.grid = one_wave_grid(self.kernel, threads, self.shared_bytes, args, tiles, nb, fix)
        # the DevicePipeline argument takes numba's dispatcher inside launch.launch: nvmath packs it, not the fast path
        launch.launch(self.kernel, self.grid, self.pipeline.block_dim, self.shared_bytes, *args)
        return out

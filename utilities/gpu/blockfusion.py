"""Block-resident fusion on FP16 tensor cores: GEMM + bias + ReLU, and back-to-back GEMMs.

Both kernels are plain numba kernels around nvmath.device ``Matmul`` (cuBLASDx) block GEMMs:

- ``make_gemm_bias_relu_kernel``: one block computes a TM x TN tile of ``relu(A @ B + bias)``; the K loop is
  double-buffered in shared memory (the copies of stage s + 1 are issued before stage s runs on the tensor
  cores) and the bias and ReLU are applied to the FP32 accumulator before the only store.
- ``make_b2b_kernel``: one block owns a TM-row tile of ``D0 = relu(alpha0 * A0 @ B0)`` with all N0 columns,
  turns it to FP16 in shared memory, and uses it as the A operand of the second GEMM,
  ``D1 = relu(alpha1 * D0 @ B1 + beta1 * C1)``. D0 never touches global memory (unless asked to, for checking).
- ``make_b2b_persistent_kernel``: the same arithmetic, but one wave of blocks loads B0 and B1 into shared memory
  once and walks the row tiles, with the A0 (and C1) loads of later tiles in flight ``depth - 1`` stages ahead
  (``cp_async`` groups). It pays where B0 and B1 are a large share of each block's loads, as at (64, 256, 64).

Constraints (checked by the plans, with the fix in the message): the block GEMMs' shapes are fixed when the
kernel is built, so N0 and N1 are whole tiles of the block (at most ``MAX_N``), M is a multiple of the row
tile, and K0 a multiple of the K tile. All operands are FP16, C-contiguous (row-major) and 16-byte aligned;
accumulation is FP32.

Loads: the global-memory layouts come from ``aligned_copy.gmem_layout`` (16-byte alignment), so cuBLASDx's
``copy`` issues 16-byte ``cp.async``; with nvmath's own layouts it moved one element per instruction and these
kernels ran 1.6-4x slower on an H100. Operands must therefore start on a 16-byte boundary (checked). The output
tiles (and C1) go through shared memory, so that global stores are 16-byte copies. Known limits, measured there
(see the fusion report in ``results/``): the streaming kernel keeps two K stages in flight and its registers
allow two blocks an SM, so at (576, 64, 128) cuBLASLt's fused epilogues still win; the persistent kernel beats
them at (64, 256, 64) but keeps its tensor cores busy only a fraction of the time (each tile's two GEMMs and
epilogues run one after another).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import cupy as cp
import numpy as np
from numba import cuda, float32
from nvmath.device import Matmul
from nvmath.device.common import copy, copy_fragment, copy_wait, make_tensor

from ..fusion import layout
from . import launch
from .aligned_copy import gmem_layout
from .operands import require

MAX_N = 256  # widest N0 / N1 a block holds: a 128 x 256 FP32 accumulator is 256 registers per thread at 128 threads
SMEM_ALIGN = layout.SMEM_ALIGN  # shared-memory segments start on 1 KiB boundaries (counted in FP16 elements)


@dataclass(frozen=True)
class BlockConfig:
    """Row tile, K tile and threads of the block GEMMs."""

    tile_m: int = 128
    tile_k: int = 64
    threads: int = 128
    depth: int = 3  # A0 stages in flight in the persistent kernel (the streaming kernel always has two)


@functools.cache
def fp16_matmul(m: int, n: int, k: int, threads: int, pipeline: bool = False) -> Matmul:
    """A block GEMM of FP16 row-major operands with an FP32 accumulator (``pipeline``: for a device pipeline)."""
    streaming = {"with_pipeline": True, "enable_input_streaming": True} if pipeline else {}
    return Matmul(
        size=(m, n, k),
        precision=(np.float16, np.float16, np.float32),
        data_type="real",
        arrangement=("row_major", "row_major", "row_major"),
        execution="Block",
        block_size=threads,
        alignment=(16, 16, 16),
        static_block_dim=True,
        **streaming,
    )


_ceil_to, _segments = layout.ceil_to, layout.segments  # (FP16 elements, 1 KiB aligned segments)


def _kloop_smem(MM: Matmul) -> tuple[int, int]:
    return MM.suggest_layout_smem_a().cosize, MM.suggest_layout_smem_b().cosize


# ------------------------------------------------------------------------------------------------------------
# Warm-up: GEMM with bias and ReLU in the epilogue
# ------------------------------------------------------------------------------------------------------------


@functools.cache
def make_gemm_bias_relu_kernel(MM: Matmul):
    """out = relu(a @ b + bias) for one TM x TN tile per block, the K loop double-buffered in shared memory."""
    TM, TN, TK = MM.size
    SA, SB = _kloop_smem(MM)
    (A0, B0, A1, B1), kloop_end = _segments(SA, SB, SA, SB)
    FRAGMENT = MM.suggest_layout_rmem_c().cosize
    SC = MM.suggest_layout_smem_c().cosize
    assert SC <= kloop_end, "the output tile is staged in the K loop's buffers"
    gmem_a, gmem_b, gmem_c = gmem_layout(MM, "a"), gmem_layout(MM, "b"), gmem_layout(MM, "c")

    @cuda.jit(launch_bounds=(MM.block_size, 1))
    def gemm_bias_relu_kernel(a, b, bias, out):
        smem = cuda.shared.array(shape=(0,), dtype=np.float16, alignment=1024)
        row0, col0 = cuda.blockIdx.x * TM, cuda.blockIdx.y * TN
        lda, ldb = a.shape[1], b.shape[1]
        sa = make_tensor(smem[A0 : A0 + SA], MM.suggest_layout_smem_a())
        sb = make_tensor(smem[B0 : B0 + SB], MM.suggest_layout_smem_b())
        sa_next = make_tensor(smem[A1 : A1 + SA], MM.suggest_layout_smem_a())
        sb_next = make_tensor(smem[B1 : B1 + SB], MM.suggest_layout_smem_b())
        copy(make_tensor(a[row0 : row0 + TM, 0:TK], gmem_a(lda)), sa)
        copy(make_tensor(b[0:TK, col0 : col0 + TN], gmem_b(ldb)), sb)
        acc = MM.suggest_accumulator()
        acc.clear()
        for stage in range(1, lda // TK):
            copy_wait()  # stage - 1 has landed, and every thread is done with the other buffers
            k0 = stage * TK
            copy(make_tensor(a[row0 : row0 + TM, k0 : k0 + TK], gmem_a(lda)), sa_next)
            copy(make_tensor(b[k0 : k0 + TK, col0 : col0 + TN], gmem_b(ldb)), sb_next)
            MM.execute(sa, sb, acc)
            sa, sa_next = sa_next, sa
            sb, sb_next = sb_next, sb
        copy_wait()
        MM.execute(sa, sb, acc)

        # the epilogue: bias and ReLU on the FP32 accumulator, then one FP16 tile
        result = acc.get_results()
        tile = make_tensor(cuda.local.array(FRAGMENT, np.float16), MM.suggest_layout_rmem_c())  # FP16 twin
        for i in range(FRAGMENT):
            # TODO (about 3 lines): tile[i] = relu(result[i] + bias of this element's column)
            # SKELETON: tile[i] = result[i]
            # BEGIN SOLUTION
            _, col = acc.map_fragment_index(i)
            x = result[i] + float32(bias[col0 + col])
            tile[i] = x if x > 0 else float32(0)
            # END SOLUTION
        # the store goes through shared memory (the K loop's buffers, free now), for 16-byte global stores
        cuda.syncthreads()  # every warp is done reading the last stage
        sc = make_tensor(smem[0:SC], MM.suggest_layout_smem_c())
        copy_fragment(tile, sc)
        cuda.syncthreads()
        copy(sc, make_tensor(out[row0 : row0 + TM, col0 : col0 + TN], gmem_c(out.shape[1])))
        copy_wait()

    return gemm_bias_relu_kernel


class GemmBiasRelu:
    """out = relu(a @ b + bias): FP16 operands, FP32 accumulation and epilogue, FP16 output."""

    def __init__(self, m: int, n: int, k: int, tile: tuple[int, int, int] = (128, 128, 64), threads: int = 128,
                 kernel_factory: Any = None):  # fmt: skip
        tm, tn, tk = tile
        for name, size, t in (("m", m, tm), ("n", n, tn), ("k", k, tk)):
            if size % t:
                raise ValueError(f"{name} = {size} is not a multiple of the block tile's {t}: pad it, or pick a tile")
        self.m, self.n, self.k = m, n, k
        self.MM = fp16_matmul(tm, tn, tk, threads)
        sa, sb = _kloop_smem(self.MM)
        self.shared_bytes = 2 * _segments(sa, sb, sa, sb)[1]
        self.kernel = (kernel_factory or make_gemm_bias_relu_kernel)(self.MM)
        self.grid = (m // tm, n // tn)

    def __call__(self, a: Any, b: Any, bias: Any, out: Any = None) -> Any:
        out = cp.empty((self.m, self.n), dtype=cp.float16) if out is None else out
        shapes = {"a": (self.m, self.k), "b": (self.k, self.n), "bias": (self.n,), "out": (self.m, self.n)}
        for name, x in (("a", a), ("b", b), ("bias", bias), ("out", out)):
            require(name, x, np.float16, shapes[name])
        launch.launch(self.kernel, self.grid, self.MM.block_size, self.shared_bytes, a, b, bias, out)
        return out


# ------------------------------------------------------------------------------------------------------------
# Back-to-back GEMMs: D0 stays in the block
# ------------------------------------------------------------------------------------------------------------


@functools.cache
def make_b2b_kernel(MM0: Matmul, MM1: Matmul, keep_d0: bool = False):
    """D1 = relu(alpha1 * relu(alpha0 * A0 @ B0) @ B1 + beta1 * C1), one TM-row tile per block.

    GEMM 0 is (TM, N0, TK) per K stage; its FP32 result becomes FP16 D0 in shared memory, laid out as the A
    operand of GEMM 1, (TM, N1, N0). D0 reuses the shared memory of GEMM 0's K loop. Arrays are 3-D
    (batch, rows, columns); ``cuda.blockIdx.y`` is the batch. With ``keep_d0`` the block also writes its D0
    tile to ``d0`` (for checking the first stage); otherwise ``d0`` is not touched.
    """
    TM, N0, TK = MM0.size
    _, N1, K1 = MM1.size
    assert K1 == N0 and MM1.size[0] == TM and MM0.block_size == MM1.block_size
    SA, SB = _kloop_smem(MM0)
    SD, SW = MM1.suggest_layout_smem_a().cosize, MM1.suggest_layout_smem_b().cosize
    SC = MM1.suggest_layout_smem_c().cosize
    (A0, B0, A1, B1), _ = _segments(SA, SB, SA, SB)
    D_AT = 0  # D0 overwrites GEMM 0's buffers once they are consumed
    W_AT, C_AT, _ = b2b_smem_layout(MM0, MM1)
    F0 = MM0.suggest_layout_rmem_c().cosize
    F1 = MM1.suggest_layout_rmem_c().cosize
    gmem_a0, gmem_b0, gmem_d0 = gmem_layout(MM0, "a"), gmem_layout(MM0, "b"), gmem_layout(MM0, "c")
    gmem_b1, gmem_c1 = gmem_layout(MM1, "b"), gmem_layout(MM1, "c")

    @cuda.jit(launch_bounds=(MM0.block_size, 1))
    def b2b_kernel(a0, b0, b1, c1, alpha0, alpha1, beta1, d1, d0):
        smem = cuda.shared.array(shape=(0,), dtype=np.float16, alignment=1024)
        row0, z = cuda.blockIdx.x * TM, cuda.blockIdx.y
        k0_total = a0.shape[2]
        a_rows, b0z = a0[z, row0 : row0 + TM, :], b0[z]
        sa = make_tensor(smem[A0 : A0 + SA], MM0.suggest_layout_smem_a())
        sb = make_tensor(smem[B0 : B0 + SB], MM0.suggest_layout_smem_b())
        sa_next = make_tensor(smem[A1 : A1 + SA], MM0.suggest_layout_smem_a())
        sb_next = make_tensor(smem[B1 : B1 + SB], MM0.suggest_layout_smem_b())
        sw = make_tensor(smem[W_AT : W_AT + SW], MM1.suggest_layout_smem_b())
        copy(make_tensor(a_rows[:, 0:TK], gmem_a0(k0_total)), sa)
        copy(make_tensor(b0z[0:TK, :], gmem_b0(N0)), sb)
        copy(make_tensor(b1[z], gmem_b1(N1)), sw)
        sc = make_tensor(smem[C_AT : C_AT + SC], MM1.suggest_layout_smem_c())
        if beta1 != 0:  # 16-byte copies into shared memory, under GEMM 0; C1 is not read when beta1 == 0
            copy(make_tensor(c1[z, row0 : row0 + TM, :], gmem_c1(N1)), sc)

        # GEMM 0 over K0, double-buffered
        acc0 = MM0.suggest_accumulator()
        acc0.clear()
        for stage in range(1, k0_total // TK):
            copy_wait()
            k0 = stage * TK
            copy(make_tensor(a_rows[:, k0 : k0 + TK], gmem_a0(k0_total)), sa_next)
            copy(make_tensor(b0z[k0 : k0 + TK, :], gmem_b0(N0)), sb_next)
            MM0.execute(sa, sb, acc0)
            sa, sa_next = sa_next, sa
            sb, sb_next = sb_next, sb
        copy_wait()
        MM0.execute(sa, sb, acc0)
        cuda.syncthreads()  # every warp is done reading GEMM 0's buffers: D0 may overwrite them

        # D0 = relu(alpha0 * acc0) in FP16, written into shared memory as GEMM 1's A operand
        r0 = acc0.get_results()
        d0_tile = make_tensor(cuda.local.array(F0, np.float16), MM0.suggest_layout_rmem_c())
        for i in range(F0):
            # TODO (about 2 lines): d0_tile[i] = relu(alpha0 * r0[i])
            # SKELETON: d0_tile[i] = r0[i]
            # BEGIN SOLUTION
            x = alpha0 * r0[i]
            d0_tile[i] = x if x > 0 else float32(0)
            # END SOLUTION
        sd = make_tensor(smem[D_AT : D_AT + SD], MM1.suggest_layout_smem_a())
        # TODO (about 1 line): store this thread's part of D0 into sd
        # BEGIN SOLUTION
        copy_fragment(d0_tile, sd)
        # END SOLUTION
        if keep_d0:
            acc0.partition_and_copy(d0_tile, make_tensor(d0[z, row0 : row0 + TM, :], gmem_d0(N0)))
        cuda.syncthreads()  # D0 is complete in shared memory (and B1 landed with the last copy_wait)

        # GEMM 1 from shared memory, then D1 = relu(alpha1 * acc1 + beta1 * C1)
        acc1 = MM1.suggest_accumulator()
        acc1.clear()
        # TODO (about 1 line): acc1 += D0 @ B1, both operands already in shared memory
        # BEGIN SOLUTION
        MM1.execute(sd, sw, acc1)
        # END SOLUTION
        r1 = acc1.get_results()
        out = make_tensor(cuda.local.array(F1, np.float16), MM1.suggest_layout_rmem_c())
        if beta1 != 0:
            c_part = cuda.local.array(F1, np.float16)  # this thread's elements of C1, from shared memory
            copy_fragment(sc, make_tensor(c_part, MM1.suggest_layout_rmem_c()))
            for i in range(F1):
                # TODO (about 2 lines): out[i] = relu(alpha1 * r1[i] + beta1 * c_part[i])
                # SKELETON: out[i] = r1[i]
                # BEGIN SOLUTION
                x = alpha1 * r1[i] + beta1 * float32(c_part[i])
                out[i] = x if x > 0 else float32(0)
                # END SOLUTION
        else:  # C1 is not read when beta1 == 0
            for i in range(F1):
                x = alpha1 * r1[i]
                out[i] = x if x > 0 else float32(0)
        # D1 through shared memory, so that the global stores are 16-byte copies, not one FP16 element each
        cuda.syncthreads()  # every thread has read its part of C1 from sc
        copy_fragment(out, sc)
        cuda.syncthreads()
        copy(sc, make_tensor(d1[z, row0 : row0 + TM, :], gmem_c1(N1)))
        copy_wait()

    return b2b_kernel


def b2b_smem_layout(MM0: Matmul, MM1: Matmul) -> tuple[int, int, int]:
    """Where ``make_b2b_kernel`` puts B1 and the C1 / D1 tile in shared memory, and where it ends (FP16 elements).

    GEMM 0's two K stages come first (D0 overwrites them once they are consumed); B1 lives beside them, its load
    starting with the first stage; then C1's tile, loaded with the first stage, which later holds D1's tile.
    """
    sa, sb = _kloop_smem(MM0)
    kloop_end = _segments(sa, sb, sa, sb)[1]
    sd, sw = MM1.suggest_layout_smem_a().cosize, MM1.suggest_layout_smem_b().cosize
    w_at = _ceil_to(max(kloop_end, sd), SMEM_ALIGN)
    c_at = w_at + _ceil_to(sw, SMEM_ALIGN)
    return w_at, c_at, c_at + MM1.suggest_layout_smem_c().cosize


def b2b_shared_bytes(MM0: Matmul, MM1: Matmul) -> int:
    """Dynamic shared memory of ``make_b2b_kernel``, in bytes."""
    return 2 * b2b_smem_layout(MM0, MM1)[2]


# ------------------------------------------------------------------------------------------------------------
# Back-to-back GEMMs, persistent: B0 and B1 stay in shared memory while the block walks its row tiles
# ------------------------------------------------------------------------------------------------------------


def b2b_persistent_layout(MM0: Matmul, MM1: Matmul, k0: int, depth: int) -> layout.PersistentLayout:
    """Where the persistent kernel keeps B0, B1, D0, ``depth`` A0 stages and its C1 / D1 tiles."""
    sa, sb = _kloop_smem(MM0)
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
    from . import cp_async

    TM, N0, TK = MM0.size
    _, N1, K1 = MM1.size
    assert K1 == N0 and MM1.size[0] == TM and MM0.block_size == MM1.block_size and k0 % TK == 0 and depth >= 2
    NS = k0 // TK
    L = b2b_persistent_layout(MM0, MM1, k0, depth)
    B0_AT, B0_STEP, W_AT, D_AT = L.b0, L.b0_stage, L.b1, L.d0  # plain ints: numba reads globals, not dataclasses
    A_AT, A_STEP, C_AT, C_STEP, CBUF = L.a0, L.a0_stage, L.c, L.c_tile, L.c_buffers
    SA, SB = _kloop_smem(MM0)
    SD, SW = MM1.suggest_layout_smem_a().cosize, MM1.suggest_layout_smem_b().cosize
    SC = MM1.suggest_layout_smem_c().cosize
    F0 = MM0.suggest_layout_rmem_c().cosize
    F1 = MM1.suggest_layout_rmem_c().cosize
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
            # D0 = relu(alpha0 * acc0) in FP16, GEMM 1's A operand (GEMM 1 of the last tile is done with sd:
            # a barrier of the K loop above came after it)
            r0 = acc0.get_results()
            d0_tile = make_tensor(cuda.local.array(F0, np.float16), MM0.suggest_layout_rmem_c())
            for i in range(F0):
                x = alpha0 * r0[i]
                d0_tile[i] = x if x > 0 else float32(0)
            copy_fragment(d0_tile, sd)
            cuda.syncthreads()
            acc1.clear()
            MM1.execute(sd, sw, acc1)
            r1 = acc1.get_results()
            ct = C_AT + (((q - 1) // NS) % CBUF) * C_STEP
            sc = make_tensor(smem[ct : ct + SC], MM1.suggest_layout_smem_c())
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
            cuda.syncthreads()  # every thread has read its part of C1
            copy_fragment(out, sc)
            cuda.syncthreads()
            row0 = tile * TM
            copy(sc, make_tensor(d1z[row0 : row0 + TM, :], gmem_c1(N1)))
            tile += step
        copy_wait()  # the empty groups past the end, and every store

    return b2b_persistent_kernel


def b2b_constraints(m: int, k0: int, n0: int, n1: int, cfg: BlockConfig) -> None:
    """Raise ValueError, naming the fix, for a problem the fused kernel cannot hold in one block."""
    for name, n in (("N0", n0), ("N1", n1)):
        if n > MAX_N:
            raise ValueError(
                f"{name} = {n} does not fit one block (at most {MAX_N}): a block holds a whole row tile of "
                f"D0 (TM x N0) and of D1 (TM x N1) in its accumulators; split {name} over several kernels or use "
                "the library path"
            )
        if n % 16:
            raise ValueError(f"{name} = {n} must be a multiple of 16 (the tensor-core tile): pad it with zeros")
    if m % cfg.tile_m:
        raise ValueError(f"M = {m} is not a multiple of the row tile {cfg.tile_m}: pad A0 and C1 with zero rows")
    if k0 % cfg.tile_k:
        raise ValueError(f"K0 = {k0} is not a multiple of the K tile {cfg.tile_k}: pad A0 and B0 with zeros")


class BackToBack:
    """D1 = relu(alpha1 * relu(alpha0 * A0 @ B0) @ B1 + beta1 * C1) in one kernel, D0 kept in the block.

    ``batch=None`` takes 2-D operands; ``batch=b`` takes a leading batch dimension of b on every operand.
    ``keep_d0=True`` also writes D0 to ``self.d0`` so that a checker can test the first GEMM on its own.
    """

    def __init__(self, m: int, k0: int, n0: int, n1: int, batch: int | None = None, keep_d0: bool = False,
                 cfg: BlockConfig | None = None, kernel_factory: Any = None, persistent: bool = False):  # fmt: skip
        self.cfg = cfg or BlockConfig(tile_m=128 if max(n0, n1) <= 128 else 64)
        b2b_constraints(m, k0, n0, n1, self.cfg)
        if persistent and (keep_d0 or kernel_factory is not None):
            raise ValueError("persistent=True runs the course's persistent kernel: it takes no kernel_factory and "
                             "does not write D0 (keep_d0); check the stages with the streaming kernel")  # fmt: skip
        self.m, self.k0, self.n0, self.n1, self.batch, self.keep_d0 = m, k0, n0, n1, batch, keep_d0
        self.persistent = persistent
        c = self.cfg
        self.MM0 = fp16_matmul(c.tile_m, n0, c.tile_k, c.threads)
        self.MM1 = fp16_matmul(c.tile_m, n1, n0, c.threads)
        nb = batch or 1
        self.d0 = cp.zeros((nb, m, n0), dtype=cp.float16) if keep_d0 else cp.zeros((1, 1, n0), dtype=cp.float16)
        if persistent:
            self.shared_bytes = b2b_persistent_layout(self.MM0, self.MM1, k0, c.depth).nbytes
            _fits_shared_memory(self.shared_bytes, f"(K0, N0, N1) = ({k0}, {n0}, {n1}) with {c}")
            self.kernel = make_b2b_persistent_kernel(self.MM0, self.MM1, k0, c.depth)
            self.grid: tuple[int, int] | None = None  # one wave of blocks: known once the kernel is compiled
        else:
            self.shared_bytes = b2b_shared_bytes(self.MM0, self.MM1)
            self.kernel = (kernel_factory or make_b2b_kernel)(self.MM0, self.MM1, keep_d0)
            self.grid = (m // c.tile_m, nb)

    def _shapes(self) -> dict[str, tuple[int, ...]]:
        lead = () if self.batch is None else (self.batch,)
        m, k0, n0, n1 = self.m, self.k0, self.n0, self.n1
        return {"a0": (*lead, m, k0), "b0": (*lead, k0, n0), "b1": (*lead, n0, n1), "c1": (*lead, m, n1)}

    def __call__(self, a0: Any, b0: Any, b1: Any, c1: Any, alpha0: float = 1.0, alpha1: float = 1.0,
                 beta1: float = 0.0, out: Any = None) -> Any:  # fmt: skip
        shapes = self._shapes()
        out = cp.empty(shapes["c1"], dtype=cp.float16) if out is None else out
        for name, x in (("a0", a0), ("b0", b0), ("b1", b1), ("c1", c1), ("out", out)):
            require(name, x, np.float16, shapes["c1" if name == "out" else name])  # D1 has C1's shape
        as3 = (lambda x: x[None]) if self.batch is None else (lambda x: x)
        args = (*(as3(x) for x in (a0, b0, b1, c1)), np.float32(alpha0), np.float32(alpha1), np.float32(beta1))
        args = (*args, as3(out)) if self.persistent else (*args, as3(out), self.d0)
        if self.grid is None:
            tiles, nb = self.m // self.cfg.tile_m, self.batch or 1
            self.grid = one_wave_grid(self.kernel, self.MM0.block_size, self.shared_bytes, args, tiles, nb)
        launch.launch(self.kernel, self.grid, self.MM0.block_size, self.shared_bytes, *args)
        return out


def one_wave_grid(kernel: Any, threads: int, shared_bytes: int, args: tuple[Any, ...], tiles: int, batch: int,
                  fix: str = "use persistent=False") -> tuple[int, int]:  # fmt: skip
    """A persistent kernel's grid: as many blocks as fit on the GPU at once (at most one per row tile), shared
    among the batch; RuntimeError, naming ``fix``, when not one block fits an SM."""
    per_sm = launch.resources(kernel, threads, shared_bytes, *args)["blocks_per_sm"]
    if per_sm < 1:
        raise RuntimeError(f"the persistent kernel does not fit an SM ({shared_bytes} bytes of shared memory, "
                           f"{threads} threads): {fix}")  # fmt: skip
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    return (max(1, min(tiles, sms * per_sm // batch)), batch)


def _fits_shared_memory(nbytes: int, what: str, fix: str = "") -> None:
    """Raise ValueError, naming the fix, when a block needs more shared memory than this GPU gives one block."""
    limit = cp.cuda.Device().attributes["MaxSharedMemoryPerBlockOptin"]
    if nbytes > limit:
        raise ValueError(
            f"the persistent kernel for {what} needs {nbytes // 1024} KiB of shared memory a block, this GPU gives "
            f"{limit // 1024} KiB: "
            + (fix or "B0 (K0 x N0) and B1 stay in shared memory, so use persistent=False (the streaming kernel) "
               "for a K0 x N0 this large, or a smaller depth or row tile")
        )  # fmt: skip

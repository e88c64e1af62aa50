"""Block-resident fusion on FP16 tensor cores (GPU only): GEMM + bias + ReLU, and back-to-back GEMMs.

Both kernels (the exercises of notebooks 2a and 2b) are plain numba kernels around nvmath.device ``Matmul``
(cuBLASDx) block GEMMs:

- ``make_gemm_bias_relu_kernel``: one block computes a TM x TN tile of ``relu(A @ B + bias)``; the K loop is
  double-buffered in shared memory (the copies of stage s + 1 are issued before stage s runs on the tensor
  cores) and the bias and ReLU are applied to the FP32 accumulator before the only store.
- ``make_b2b_kernel``: one block owns a TM-row tile of ``D0 = relu(alpha0 * A0 @ B0)`` with all N0 columns,
  turns it to FP16 in shared memory, and uses it as the A operand of the second GEMM,
  ``D1 = relu(alpha1 * D0 @ B1 + beta1 * C1)``. D0 never touches global memory (unless asked to, for checking).

The persistent kernels, which walk row tiles with B0 and B1 resident, are in ``tensorcore_persistent``.

Constraints (checked by the plans, with the fix in the message): the block GEMMs' shapes are fixed when the
kernel is built, so N0 and N1 are whole tiles of the block (at most ``MAX_N``), M is a multiple of the row
tile, and K0 a multiple of the K tile. All operands are FP16, C-contiguous (row-major) and 16-byte aligned;
accumulation is FP32.

Loads: the global-memory layouts come from ``utilities.machinery.aligned_copy.gmem_layout`` (16-byte
alignment), so cuBLASDx's ``copy`` issues 16-byte ``cp.async``; with nvmath's own layouts it moved one element
per instruction, several times slower (``instructor-notes/fusion.md``, "Load width"). Operands must therefore
start on a 16-byte boundary (checked). The output tiles (and C1) go through shared memory, so that global stores
are 16-byte copies. Known limits (the fusion report in ``results/``): the streaming kernel keeps two K stages in
flight and its registers allow two blocks an SM, so at (576, 64, 128) cuBLASLt's fused epilogues still win.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cupy as cp
import numpy as np
from numba import cuda, float32
from nvmath.device import Matmul
from nvmath.device.common import copy, copy_fragment, copy_wait, make_tensor

from .. import plans
from ..machinery import launch
from ..machinery.aligned_copy import gmem_layout
from ..operands import require
from ..tiles import block_matmul
from .layout import SMEM_ALIGN, ceil_to, segments

MAX_N = 256  # widest N0 / N1 a block holds: a 128 x 256 FP32 accumulator is 256 registers per thread at 128 threads


@dataclass(frozen=True, kw_only=True)
class BlockConfig(plans.TileConfig):
    """The block of the fusion kernels: row tile, column tile, K tile, threads, and ``depth``, the A0 stages in
    flight in the persistent back-to-back kernel (the streaming kernels always have two).

    ``tile_n`` None: the back-to-back kernels hold whole rows (all N0 and N1 columns); ``GemmBiasRelu`` needs one.
    """

    tile_n: int | None = None
    depth: int = 3


EPILOGUE_BLOCK = BlockConfig(tile_m=128, tile_n=128, tile_k=64, threads=128)  # GemmBiasRelu's block


@functools.cache
def fp16_matmul(m: int, n: int, k: int, threads: int, pipeline: bool = False) -> Matmul:
    """A block GEMM of FP16 row-major operands with an FP32 accumulator (``pipeline``: for a device pipeline)."""
    return block_matmul("float16", (m, n, k), threads, b="row_major", pipeline=pipeline)


def kloop_smem(MM: Matmul) -> tuple[int, int]:
    """FP16 elements of one K stage's A and B tiles in shared memory (the layouts cuBLASDx suggests)."""
    return MM.suggest_layout_smem_a().cosize, MM.suggest_layout_smem_b().cosize


# ------------------------------------------------------------------------------------------------------------
# Warm-up: GEMM with bias and ReLU in the epilogue
# ------------------------------------------------------------------------------------------------------------


@functools.cache
def make_gemm_bias_relu_kernel(MM: Matmul):
    """out = relu(a @ b + bias) for one TM x TN tile per block, the K loop double-buffered in shared memory."""
    TM, TN, TK = MM.size
    SA, SB = kloop_smem(MM)
    (A0, B0, A1, B1), kloop_end = segments(SA, SB, SA, SB)
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


@dataclass(frozen=True)
class Kernels(plans.Kernels):
    """Kernel factories the fusion plans use instead of the course's: ``gemm_bias_relu`` (``GemmBiasRelu``'s,
    :func:`make_gemm_bias_relu_kernel`) and ``b2b`` (``BackToBack``'s, :func:`make_b2b_kernel`)."""

    gemm_bias_relu: Callable[..., Any] | None = None
    b2b: Callable[..., Any] | None = None

    def course(self) -> dict[str, Callable[..., Any]]:
        return {"gemm_bias_relu": make_gemm_bias_relu_kernel, "b2b": make_b2b_kernel}


class GemmBiasRelu:
    """out = relu(a @ b + bias): FP16 operands, FP32 accumulation and epilogue, FP16 output.

    ``cfg``: the block (default ``EPILOGUE_BLOCK``, a 128 x 128 x 64 tile on 128 threads); ``kernels``: the
    attendee's ``Kernels(gemm_bias_relu=...)``.
    """

    def __init__(self, m: int, n: int, k: int, cfg: BlockConfig | None = None, kernels: Kernels | None = None):
        self.cfg = c = cfg or EPILOGUE_BLOCK
        if c.tile_n is None:
            raise ValueError("GemmBiasRelu's block needs a column tile: give the BlockConfig a tile_n")
        for name, size, t in (("m", m, c.tile_m), ("n", n, c.tile_n), ("k", k, c.tile_k)):
            if size % t:
                raise ValueError(f"{name} = {size} is not a multiple of the block tile's {t}: pad it, or pick a tile")
        self.m, self.n, self.k = m, n, k
        self.MM = fp16_matmul(c.tile_m, c.tile_n, c.tile_k, c.threads)
        sa, sb = kloop_smem(self.MM)
        self.shared_bytes = 2 * segments(sa, sb, sa, sb)[1]
        self.kernel = (kernels or Kernels()).factory("gemm_bias_relu")(self.MM)
        self.grid = (m // c.tile_m, n // c.tile_n)

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
    SA, SB = kloop_smem(MM0)
    SD, SW = MM1.suggest_layout_smem_a().cosize, MM1.suggest_layout_smem_b().cosize
    SC = MM1.suggest_layout_smem_c().cosize
    (A0, B0, A1, B1), _ = segments(SA, SB, SA, SB)
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
    sa, sb = kloop_smem(MM0)
    kloop_end = segments(sa, sb, sa, sb)[1]
    sd, sw = MM1.suggest_layout_smem_a().cosize, MM1.suggest_layout_smem_b().cosize
    w_at = ceil_to(max(kloop_end, sd), SMEM_ALIGN)
    c_at = w_at + ceil_to(sw, SMEM_ALIGN)
    return w_at, c_at, c_at + MM1.suggest_layout_smem_c().cosize


def b2b_shared_bytes(MM0: Matmul, MM1: Matmul) -> int:
    """Dynamic shared memory of ``make_b2b_kernel``, in bytes."""
    return 2 * b2b_smem_layout(MM0, MM1)[2]


def b2b_constraints(m: int, k0: int, n0: int, n1: int, cfg: plans.TileConfig) -> None:
    """Raise ValueError, naming the fix, for a problem the fused kernel cannot hold in one block."""
    if cfg.tile_n is not None:
        raise ValueError(
            f"tile_n = {cfg.tile_n}: a back-to-back block holds whole rows of D0 and D1 (all N0 and N1 columns); "
            "leave tile_n None"
        )
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

    One row tile per block (the exercise's kernel, ``make_b2b_kernel``). ``batch=None`` takes 2-D operands;
    ``batch=b`` takes a leading batch dimension of b on every operand. ``keep_d0=True`` also writes D0 to
    ``self.d0`` so that a checker can test the first GEMM on its own. ``kernels``: the attendee's
    ``Kernels(b2b=...)``. The persistent kernels of ``utilities.fusion.tensorcore_persistent`` take the same
    operands.
    """

    def __init__(
        self,
        m: int,
        k0: int,
        n0: int,
        n1: int,
        batch: int | None = None,
        keep_d0: bool = False,
        cfg: BlockConfig | None = None,
        kernels: Kernels | None = None,
    ):
        self.cfg = c = cfg or BlockConfig(tile_m=128 if max(n0, n1) <= 128 else 64)
        b2b_constraints(m, k0, n0, n1, c)
        self.m, self.k0, self.n0, self.n1, self.batch, self.keep_d0 = m, k0, n0, n1, batch, keep_d0
        self.MM0 = fp16_matmul(c.tile_m, n0, c.tile_k, c.threads)
        self.MM1 = fp16_matmul(c.tile_m, n1, n0, c.threads)
        nb = batch or 1
        self.d0 = cp.zeros((nb, m, n0), dtype=cp.float16) if keep_d0 else cp.zeros((1, 1, n0), dtype=cp.float16)
        self.grid: tuple[int, int] | None = (m // c.tile_m, nb)
        self._build(kernels or Kernels())

    def _build(self, kernels: Kernels) -> None:
        """The kernel and its dynamic shared memory (the persistent plan builds its own)."""
        self.shared_bytes = b2b_shared_bytes(self.MM0, self.MM1)
        self.kernel = kernels.factory("b2b")(self.MM0, self.MM1, self.keep_d0)

    def kernel_args(
        self, a0: Any, b0: Any, b1: Any, c1: Any, alpha0: float, alpha1: float, beta1: float, out: Any
    ) -> tuple[tuple[Any, ...], Any]:
        """The operands checked (FP16, shapes of this plan, C-contiguous, 16-byte aligned) as the kernel takes them
        (3-D arrays, FP32 scalars, D1's buffer), and D1 as the caller gets it (allocated when ``out`` is None)."""
        lead = () if self.batch is None else (self.batch,)
        m, k0, n0, n1 = self.m, self.k0, self.n0, self.n1
        shapes = {"a0": (*lead, m, k0), "b0": (*lead, k0, n0), "b1": (*lead, n0, n1), "c1": (*lead, m, n1)}
        out = cp.empty(shapes["c1"], dtype=cp.float16) if out is None else out
        for name, x in (("a0", a0), ("b0", b0), ("b1", b1), ("c1", c1), ("out", out)):
            require(name, x, np.float16, shapes["c1" if name == "out" else name])  # D1 has C1's shape
        as3 = (lambda x: x[None]) if self.batch is None else (lambda x: x)
        scalars = (np.float32(alpha0), np.float32(alpha1), np.float32(beta1))
        return (*(as3(x) for x in (a0, b0, b1, c1)), *scalars, as3(out)), out

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
        launch.launch(self.kernel, self.grid, self.MM0.block_size, self.shared_bytes, *args, self.d0)
        return out

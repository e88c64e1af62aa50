"""3x3 convolution + bias + ReLU as an implicit GEMM on FP16 tensor cores (GPU only): the kernel of notebook 2c.

One block computes a TM x TN tile of the output, TM output pixels (GEMM rows) by TN output channels, over K =
9 C_in in stages of TK: a stage is one tap (r, s) and TK of its input channels (TK divides C_in). Per block:

1. the index map: for each of its TM pixels and each tap, ``neighbor`` (``utilities.conv.simt``, the exercise)
   gives the input pixel the tap reads, or -1 in the padding; the table (9 x TM int32) sits in shared memory;
2. the K loop, double-buffered: the A tile of stage s + 1 is gathered from the NHWC input through the table,
   8 bytes (4 channels) a load, zeros for the padding, into registers while stage s runs on the tensor cores,
   then stored to shared memory; the filters' tile (a plain TK x TN block of B) comes by cuBLASDx's ``copy``;
3. the epilogue: bias and ReLU on the FP32 accumulator, one FP16 tile through shared memory to HBM. Built with
   ``fused=False``, the same kernel stores the convolution alone (the unfused path's first kernel).

The A tiles live in shared memory in the layout cuBLASDx suggests for them, an XOR swizzle of 16-byte chunks that
keeps the tensor cores' row reads out of each other's banks; the gather writes it by hand
(``utilities.machinery.swizzle``, measured with ``tools/smem_layout_probe.py``). The kernel's numba type does
not depend on the problem's shape (B, H, W and C_in are run-time arguments): one build per tile serves every
image size.

Constraints (checked by the plan, with the fix in the message): B H W a multiple of TM, C_in and C_out multiples
of 32; FP16, C-contiguous operands, 16-byte aligned.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cupy as cp
import numpy as np
from numba import cuda, float32, int32, int64, uint64
from nvmath.device import Matmul
from nvmath.device.common import copy, copy_fragment, copy_wait, make_tensor

from .. import plans
from ..machinery import launch, swizzle
from ..machinery.aligned_copy import gmem_layout
from ..operands import require
from ..smem import fp16_segments
from ..tiles import block_matmul
from .reference import TAPS, ConvShape
from .simt import neighbor as course_neighbor
from .tensorcore_persistent import make_conv_b2b_kernel

UNIT = 4  # FP16 channels per gathered load (8 bytes, one uint64)


@dataclass(frozen=True, kw_only=True)
class ConvConfig(plans.TileConfig):
    """The two-stage kernel's block: TM output pixels by TN output channels, TK input channels a stage, and its
    threads (two K stages, always)."""

    tile_n: int = 64

    @classmethod
    def for_shape(cls, shape: ConvShape) -> ConvConfig:
        """64-wide tiles where the channels allow, else 32 (C_in and C_out must be multiples of 32)."""
        return cls(tile_n=64 if shape.c_out % 64 == 0 else 32, tile_k=64 if shape.c_in % 64 == 0 else 32)


@dataclass(frozen=True)
class Kernels(plans.Kernels):
    """Kernel factories (and the index map) the convolution plans use instead of the course's: ``neighbor`` and
    ``conv`` (``Conv3x3``'s: ``utilities.conv.simt.neighbor``, :func:`make_conv_kernel`), ``conv_b2b``
    (``ConvB2B``'s: ``tensorcore_persistent.make_conv_b2b_kernel``)."""

    neighbor: Callable[..., Any] | None = None
    conv: Callable[..., Any] | None = None
    conv_b2b: Callable[..., Any] | None = None

    def course(self) -> dict[str, Callable[..., Any]]:
        return {"neighbor": course_neighbor, "conv": make_conv_kernel, "conv_b2b": make_conv_b2b_kernel}


@functools.cache
def conv_matmul(cfg: ConvConfig) -> Matmul:
    """The block GEMM: FP16 row-major operands, FP32 accumulator."""
    return block_matmul("float16", (cfg.tile_m, cfg.tile_n, cfg.tile_k), cfg.threads, b="row_major")


def smem_plan(MM: Matmul) -> tuple[list[int], int]:
    """Offsets (FP16 elements) of the two A and two B stages in dynamic shared memory, and where they end."""
    sa, sb = MM.suggest_layout_smem_a().cosize, MM.suggest_layout_smem_b().cosize
    return fp16_segments(sa, sb, sa, sb)


@functools.cache
def make_conv_kernel(MM: Matmul, fused: bool = True, neighbor: Any = None):
    """out = relu(conv3x3(x) + bias) (``fused``) or conv3x3(x), for one TM x TN tile per block.

    Arguments: ``x4``, the NHWC input as a flat uint64 array (4 channels an element); ``w``, the filters as the
    (9 C_in) x C_out FP16 matrix B; ``bias`` (C_out,); ``out``, the (B H W) x C_out FP16 result; ``height``,
    ``width``; ``c4`` = C_in / 4. ``neighbor``: the index map (default: the course's).
    """
    TM, TN, TK = MM.size
    THREADS = MM.block_size
    SA = MM.suggest_layout_smem_a().cosize
    TABLE = TAPS * TM  # the index map: 9 taps of TM pixels
    (A0, B0, A1, B1), kloop_end = smem_plan(MM)
    SB = MM.suggest_layout_smem_b().cosize
    SC = MM.suggest_layout_smem_c().cosize
    CPR = TK // 8  # 16-byte chunks in an A row
    swizzle_a = swizzle.a_tile(TK)  # where cuBLASDx's suggested layout keeps each 16-byte chunk of an A row
    FRAGMENT = MM.suggest_layout_rmem_c().cosize
    assert SC <= kloop_end, "the output tile is staged in the K loop's buffers"
    assert A0 % UNIT == 0 and A1 % UNIT == 0
    ROW_UNITS = TK // UNIT  # loads per A row
    ROWS_PER_PASS = THREADS // ROW_UNITS
    PER_THREAD = TM // ROWS_PER_PASS  # loads per thread and stage
    assert ROW_UNITS * ROWS_PER_PASS == THREADS and PER_THREAD * ROWS_PER_PASS == TM
    gmem_b, gmem_c = gmem_layout(MM, "b"), gmem_layout(MM, "c")
    index_map = neighbor or course_neighbor

    @cuda.jit(device=True)
    def gather(x4, table, regs, k0, c4, first_row, unit):
        """This thread's loads of A's stage starting at column k0: rows first_row + j ROWS_PER_PASS, 4 channels."""
        tap = k0 // (c4 * UNIT)
        at = (k0 - tap * c4 * UNIT) // UNIT + unit  # the uint64 within the pixel
        for j in range(PER_THREAD):
            pixel = table[tap * TM + first_row + j * ROWS_PER_PASS]
            regs[j] = x4[int64(pixel) * c4 + at] if pixel >= 0 else uint64(0)

    @cuda.jit(device=True)
    def put(smem4, regs, at4, first_row, unit):
        """Store the gathered loads into the A stage that starts at uint64 ``at4``, in the tile's layout."""
        for j in range(PER_THREAD):
            row = first_row + j * ROWS_PER_PASS
            smem4[at4 + 2 * swizzle_a(row * CPR + unit // 2) + unit % 2] = regs[j]  # 2 loads a 16-byte chunk

    @cuda.jit(launch_bounds=(THREADS, 1))
    def conv_kernel(x4, w, bias, out, height, width, c4):
        smem = cuda.shared.array(shape=(0,), dtype=np.float16, alignment=1024)
        smem4 = cuda.shared.array(shape=(0,), dtype=np.uint64, alignment=1024)  # the same bytes, 8 at a time
        table = cuda.shared.array(TABLE, dtype=np.int32)
        tid = cuda.threadIdx.x
        row0, col0 = cuda.blockIdx.x * TM, cuda.blockIdx.y * TN
        for i in range(tid, TABLE, THREADS):  # the index map of this block's pixels
            tap = i // TM
            table[i] = int32(index_map(row0 + i % TM, tap // 3, tap % 3, height, width))
        first_row, unit = tid // ROW_UNITS, tid % ROW_UNITS
        ldb = w.shape[1]
        sa = make_tensor(smem[A0 : A0 + SA], MM.suggest_layout_smem_a())
        sb = make_tensor(smem[B0 : B0 + SB], MM.suggest_layout_smem_b())
        sa_next = make_tensor(smem[A1 : A1 + SA], MM.suggest_layout_smem_a())
        sb_next = make_tensor(smem[B1 : B1 + SB], MM.suggest_layout_smem_b())
        at4, at4_next = A0 // UNIT, A1 // UNIT
        regs = cuda.local.array(PER_THREAD, np.uint64)
        cuda.syncthreads()  # the table is complete
        gather(x4, table, regs, 0, c4, first_row, unit)
        copy(make_tensor(w[0:TK, col0 : col0 + TN], gmem_b(ldb)), sb)
        put(smem4, regs, at4, first_row, unit)
        acc = MM.suggest_accumulator()
        acc.clear()
        copy_wait()
        cuda.syncthreads()  # stage 0 of A (plain stores) is visible to every thread
        for stage in range(1, TAPS * c4 * UNIT // TK):
            k0 = stage * TK
            gather(x4, table, regs, k0, c4, first_row, unit)  # in flight while the tensor cores run
            copy(make_tensor(w[k0 : k0 + TK, col0 : col0 + TN], gmem_b(ldb)), sb_next)
            MM.execute(sa, sb, acc)
            put(smem4, regs, at4_next, first_row, unit)
            copy_wait()
            cuda.syncthreads()  # stage s is in place, and every warp is done with stage s - 1's buffers
            sa, sa_next = sa_next, sa
            sb, sb_next = sb_next, sb
            at4, at4_next = at4_next, at4
        MM.execute(sa, sb, acc)

        result = acc.get_results()
        tile = make_tensor(cuda.local.array(FRAGMENT, np.float16), MM.suggest_layout_rmem_c())
        if fused:
            for i in range(FRAGMENT):
                # TODO (about 3 lines): tile[i] = relu(result[i] + bias[c]), c the output channel of element i.
                # The accumulator's map_fragment_index(i) gives the (row, column) of register element i within
                # this block's TM x TN tile; the tile's column 0 is output channel col0.
                # SKELETON: tile[i] = result[i]
                # BEGIN SOLUTION
                _, col = acc.map_fragment_index(i)
                v = result[i] + float32(bias[col0 + col])
                tile[i] = v if v > 0 else float32(0)
                # END SOLUTION
        else:
            for i in range(FRAGMENT):
                tile[i] = result[i]
        cuda.syncthreads()  # every warp is done reading the last stage: its buffers hold the output tile
        sc = make_tensor(smem[0:SC], MM.suggest_layout_smem_c())
        copy_fragment(tile, sc)
        cuda.syncthreads()
        copy(sc, make_tensor(out[row0 : row0 + TM, col0 : col0 + TN], gmem_c(out.shape[1])))
        copy_wait()

    return conv_kernel


def conv_constraints(shape: ConvShape, tile: ConvConfig) -> None:
    """Raise ValueError, naming the fix, for a convolution this kernel cannot compute."""
    for name, c in (("C_in", shape.c_in), ("C_out", shape.c_out)):
        if c % 32:
            raise ValueError(
                f"{name} = {c} must be a multiple of 32 (a K stage or an N tile): pad the channels with "
                "zeros (zero filters for the extra outputs)"
            )
    if shape.c_in % tile.tile_k or shape.c_out % tile.tile_n:
        raise ValueError(
            f"the tile {tile} does not divide C_in = {shape.c_in} and C_out = {shape.c_out}: use "
            "ConvConfig.for_shape(shape)"
        )
    if shape.m % tile.tile_m:
        raise ValueError(
            f"B*H*W = {shape.m} is not a multiple of the row tile {tile.tile_m}: pad the batch with a "
            "zero image, or pick a height and width whose product with the batch is"
        )


class Conv3x3:
    """relu(conv3x3(x, w) + bias), stride 1, padding 1, NHWC: FP16 in and out, FP32 accumulation and epilogue.

    ``fused=False``: the convolution alone (no bias, no ReLU), as the unfused path's first kernel. The plan takes
    x (B, H, W, C_in), w (3, 3, C_in, C_out), bias (C_out,) and returns (B, H, W, C_out). ``cfg``: the block
    (default ``ConvConfig.for_shape(shape)``); ``kernels``: the attendee's ``Kernels(neighbor=..., conv=...)``.
    """

    def __init__(
        self, shape: ConvShape, fused: bool = True, cfg: ConvConfig | None = None, kernels: Kernels | None = None
    ):
        self.shape, self.fused = shape, fused
        self.cfg = cfg or ConvConfig.for_shape(shape)
        conv_constraints(shape, self.cfg)
        self.MM = conv_matmul(self.cfg)
        self.shared_bytes = 2 * smem_plan(self.MM)[1]
        k = kernels or Kernels()
        self.kernel = k.factory("conv")(self.MM, fused, k.factory("neighbor"))
        self.grid = (shape.m // self.cfg.tile_m, shape.c_out // self.cfg.tile_n)

    def _args(self, x: Any, w: Any, bias: Any, out: Any) -> tuple[Any, ...]:
        s = self.shape
        shapes = {
            "x": (s.batch, s.height, s.width, s.c_in),
            "w": (3, 3, s.c_in, s.c_out),
            "bias": (s.c_out,),
            "out": (s.batch, s.height, s.width, s.c_out),
        }
        for name, v in (("x", x), ("w", w), ("bias", bias), ("out", out)):
            require(name, v, np.float16, shapes[name])
        return (
            x.reshape(-1).view(cp.uint64),
            w.reshape(s.k, s.c_out),
            bias,
            out.reshape(s.m, s.c_out),
            np.int32(s.height),
            np.int32(s.width),
            np.int32(s.c_in // UNIT),
        )

    def __call__(self, x: Any, w: Any, bias: Any, out: Any = None) -> Any:
        s = self.shape
        out = cp.empty((s.batch, s.height, s.width, s.c_out), cp.float16) if out is None else out
        launch.launch(self.kernel, self.grid, self.cfg.threads, self.shared_bytes, *self._args(x, w, bias, out))
        return out

    def resources(self, x: Any, w: Any, bias: Any, out: Any) -> dict[str, Any]:
        """Registers, spills, shared memory and blocks an SM of the compiled kernel (``launch.resources``)."""
        return launch.resources(self.kernel, self.cfg.threads, self.shared_bytes, *self._args(x, w, bias, out))

"""The halo implicit GEMM (GPU only): each row tile's input read once, its nine taps multiplied from shared memory.

The pipelined kernel (``tensorcore_persistent``) gathers each tap's A tile on its own: every input pixel is copied nine
times from L2, and its gathers alone took longer than its MMAs alone (``instructor-notes/conv.md``). Here a block copies
a row tile's *halo* (``utilities.conv.halo``: three input rows, TM + 2 pixels, TK channels), 3 (TM + 2) / (9 TM), about
a third, of those bytes, in 16-byte ``cp.async`` copies of contiguous channels with no per-tap address arithmetic; then
the nine taps' GEMMs read their A tiles as windows of it (tap (r, s): halo row r from pixel s, leading dimension TK +
8), back to back, with no wait or barrier between them.

Persistent blocks walk row tiles ``blockIdx.x``, ``+ gridDim.x``, ... of their column tile ``blockIdx.y``; a tile
is ``C_in / TK`` phases (one halo each). Two halo buffers: phase p + 1's copies are issued right after phase p's
barrier and land while the tensor cores run phase p's nine GEMMs. The filters of the block's columns stay in shared
memory. One wait and one barrier a phase, two more a tile for the output, staged in FP32 in the halo buffer the
tile's last phase read (``halo.HaloLayout``): the epilogue adds the bias by each value's row and channel there,
so it needs no map from the accumulator's fragment to columns (nvmath's map is the suggested layouts', and this
kernel's layouts are plain ones).

``make_halo_conv_kernel`` (plan :class:`HaloConv`): out = relu(conv3x3(x) + bias), or the convolution alone.
``make_halo_b2b_kernel`` (plan :class:`HaloConvB2B`): notebook 2d's chain, relu(conv1x1(relu(conv3x3(x))) + bias1),
D0 kept in the halo buffer a tile last read. Both run on the same stream (:func:`make_halo_stream`).

Constraints (the plans check them and name the fix, ``halo.halo_constraints``, ``halo.halo_b2b_constraints``): the
image width a multiple of TM, C_in of TK, C_out (C_mid) of TN, C-contiguous FP16 operands on 16-byte boundaries, the
plan within the GPU's shared memory (the filters stay resident: C_in = 64 at 64 columns a block, 128 at 32).
"""

from __future__ import annotations

import functools
from typing import Any

import cupy as cp
import numpy as np
from numba import cuda, float32, int32, int64
from nvmath.device import Matmul
from nvmath.device.common import copy, copy_fragment, copy_wait, make_tensor

from ..machinery import cp_async, padded_layouts
from ..machinery.aligned_copy import gmem_layout
from ..tiles import block_matmul
from .halo import (
    PAD,
    TAPS,
    HaloB2BLayout,
    HaloConfig,
    HaloLayout,
    chunks,
    halo_b2b_constraints,
    halo_b2b_layout,
    halo_constraints,
    halo_layout,
)
from .reference import B2BShape, ConvShape
from .simt import halo_copy, make_epilogue, pixel_coords
from .tensorcore_persistent import PARTS, PersistentB2B, PersistentConv, smem_limit


def padded_matmul(size: tuple[int, int, int], threads: int, lds: tuple[int, int, int], fix: str) -> Matmul:
    """A block GEMM on plain row-major layouts with leading dimensions ``lds`` (A's, B's, C's). cuBLASDx takes the
    operands of one ``execute`` all in its suggested layouts or all in plain ones, and nvmath's tensor API keeps a
    leading dimension only through ``machinery.padded_layouts``: checked here, since a dense layout would be read
    silently wrong. ``fix``: the kernel to use instead, named in the errors."""
    why = padded_layouts.unavailable()
    if why is not None:
        raise ValueError(f"the halo kernels cannot run here: {why}; use {fix}")
    padded_layouts.install()
    m, n, k = size
    MM = padded_layouts.pad(block_matmul("float16", size, threads, b="row_major", leading_dimension=lds))
    want = {"A": (m - 1) * lds[0] + k, "B": (k - 1) * lds[1] + n, "C": (m - 1) * lds[2] + n}
    got = {"A": MM.get_layout_smem_a().cosize, "B": MM.get_layout_smem_b().cosize, "C": MM.get_layout_smem_c().cosize}
    if got != want:
        raise RuntimeError(
            f"cuBLASDx's shared-memory layouts ignore the leading dimensions {lds} (sizes {got}, padded ones would "
            f"be {want}): utilities.machinery.padded_layouts no longer works with this nvmath-python; use {fix}"
        )
    return MM


@functools.cache
def halo_matmul(cfg: HaloConfig, padded_c: bool = False) -> Matmul:
    """The block GEMM of one tap: A a window of the halo (leading dimension TK + 8), B a filter stage (TN + 8), C
    dense, or padded as GEMM 1's A (``padded_c``: the back-to-back kernel's D0)."""
    tm, tn, tk = cfg.tile
    lds = (cfg.ld, cfg.ld_b, tn + PAD if padded_c else tn)
    return padded_matmul((tm, tn, tk), cfg.threads, lds, "the pipelined kernels (PipelinedConv, ConvB2B)")


@functools.cache
def b2b_matmul(tile_m: int, c_mid: int, c_out: int, threads: int) -> Matmul:
    """GEMM 1 of the back-to-back kernel: D0 (TM x C_mid, as GEMM 0 leaves it) times W1 (C_mid x C_out)."""
    lds = (c_mid + PAD, c_out + PAD, c_out)
    return padded_matmul((tile_m, c_out, c_mid), threads, lds, "ConvB2B")


def plan_layout(MM: Matmul, cfg: HaloConfig, n_chunks: int) -> HaloLayout:
    """The plan of ``halo.halo_layout``, the output tile in FP32 (two FP16 places a value)."""
    return halo_layout(cfg, n_chunks, MM.get_layout_smem_b().cosize, 2 * MM.get_layout_smem_c().cosize)


def plan_b2b_layout(MM0: Matmul, MM1: Matmul, cfg: HaloConfig, n_chunks: int) -> HaloB2BLayout:
    """The plan of ``halo.halo_b2b_layout``."""
    sb, sw, sd = MM0.get_layout_smem_b().cosize, MM1.get_layout_smem_b().cosize, MM0.get_layout_smem_c().cosize
    return halo_b2b_layout(cfg, n_chunks, sb, sw, sd, 2 * MM1.get_layout_smem_c().cosize)


@functools.cache
def make_halo_stream(MM: Matmul, cfg: HaloConfig, n_chunks: int, L: Any, parts: str = "all") -> tuple[Any, Any, Any]:
    """Device functions ``(load_filters, issue, kloop)`` of the halo stream (the module's docstring) in the plan
    ``L`` (its ``halo``, ``halo_step``, ``b``, ``b_step``).

    ``load_filters(smem, w, col0)`` starts the copies of every filter stage of the block's columns;
    ``issue(smem, x, p, t0, step, tiles, c_in, height, width)`` starts phase p's halo; ``kloop(..., acc)`` runs the
    phases of one tile into ``acc`` and returns the next phase. ``parts`` "gather" copies the halos and skips the
    GEMMs, "mma" runs the GEMMs on whatever shared memory holds: what each costs alone (wrong results)."""
    TM, TN, TK = MM.size
    THREADS = MM.block_size
    assert parts in PARTS, f"parts must be one of {PARTS}, got {parts!r}"
    GATHER, MMA = parts in ("all", "gather"), parts in ("all", "mma")
    NCH, HW, LD, CPP, COPIES = n_chunks, cfg.halo_width, cfg.ld, TK // 8, cfg.copies
    PER_THREAD = -(-COPIES // THREADS)
    H_AT, H_STEP, B_AT, B_STEP = L.halo, L.halo_step, L.b, L.b_step
    SA, SB = MM.get_layout_smem_a().cosize, MM.get_layout_smem_b().cosize
    assert (2 * HW + 2) * LD + SA <= 3 * HW * LD, "the last tap's window (halo row 2, pixel 2) ends inside the halo"
    copy16, commit, wait_all = cp_async.copy16, cp_async.commit, cp_async.wait_prior(0)
    gmem_b = gmem_layout(MM, "b")

    @cuda.jit(device=True, forceinline=True)
    def load_filters(smem, w, col0):
        for s in range(TAPS * NCH):  # resident: in phase 0's group
            at = B_AT + s * B_STEP
            copy(make_tensor(w[s * TK : s * TK + TK, col0 : col0 + TN], gmem_b(w.shape[1])),
                 make_tensor(smem[at : at + SB], MM.get_layout_smem_b()))  # fmt: skip

    @cuda.jit(device=True, forceinline=True)
    def issue(smem, x, p, t0, step, tiles, c_in, height, width):
        """Start phase p's copies (halo ``p % NCH`` of the block's tile ``p // NCH``) into buffer ``p % 2``."""
        it = p // NCH
        c0 = int32((p - it * NCH) * TK)
        tile = int32(t0 + it * step)
        if GATHER and tile < tiles:
            m0 = int32(tile * TM)
            h0, w0 = pixel_coords(m0, height, width)
            h0, w0 = int32(h0), int32(w0)
            at = int32(H_AT + (p % 2) * H_STEP)
            tid = int32(cuda.threadIdx.x)
            for i in range(PER_THREAD):
                k = int32(tid + i * THREADS)
                if k < COPIES:
                    dst, src, ok, unit = halo_copy(k, m0, h0, w0, height, width, CPP, HW, LD)
                    copy16(smem, int32(at + dst), x, int64(src) * c_in + int32(c0 + unit * 8), int32(ok * 16))
        commit()  # one group a phase; an empty one past the last tile keeps the count

    @cuda.jit(device=True, forceinline=True)
    def kloop(smem, x, p, t0, step, tiles, c_in, height, width, acc):
        for c in range(NCH):
            wait_all()  # this thread's copies of phase p (and the filters, at the first) have landed ...
            cuda.syncthreads()  # ... and everyone's; every warp is done with phase p - 1's buffer
            issue(smem, x, p + 1, t0, step, tiles, c_in, height, width)
            if MMA:
                at = H_AT + (p % 2) * H_STEP
                for tap in range(TAPS):
                    r = tap // 3
                    a_at = at + (r * HW + tap - 3 * r) * LD  # halo row r, pixel s = tap - 3 r
                    b_at = B_AT + (tap * NCH + c) * B_STEP  # GEMM rows tap C_in + c TK ...
                    MM.execute(make_tensor(smem[a_at : a_at + SA], MM.get_layout_smem_a()),
                               make_tensor(smem[b_at : b_at + SB], MM.get_layout_smem_b()), acc)  # fmt: skip
            p += 1
        return p

    return load_filters, issue, kloop


@functools.cache
def make_halo_conv_kernel(MM: Matmul, cfg: HaloConfig, n_chunks: int, fused: bool = True, parts: str = "all"):
    """out = relu(conv3x3(x, w) + bias) (``fused``) or conv3x3(x, w).

    Arguments: ``x`` the NHWC input, flat FP16; ``w`` the filters as the (9 C_in) x C_out matrix B; ``bias``
    (C_out,); ``out`` the (B H W) x C_out result; ``height``, ``width``. ``parts``: see :func:`make_halo_stream`.
    """
    TM, TN, _ = MM.size
    THREADS = MM.block_size
    L = plan_layout(MM, cfg, n_chunks)
    load_filters, issue, kloop = make_halo_stream(MM, cfg, n_chunks, L, parts)
    epilogue = make_epilogue(TM, TN, THREADS, fused)
    H_AT, H_STEP, C_AT, IN_HALO = L.halo, L.halo_step, L.c, L.c_in_halo
    SC = MM.get_layout_smem_c().cosize
    assert SC == TM * TN, "the output tile is dense in shared memory (leading dimension TN)"

    @cuda.jit(launch_bounds=(THREADS, 1))
    def halo_conv_kernel(x, w, bias, out, height, width):
        smem = cuda.shared.array(shape=(0,), dtype=np.float16, alignment=1024)
        smem32 = cuda.shared.array(shape=(0,), dtype=np.float32, alignment=1024)  # the same bytes, as FP32
        t0, step, col0 = int32(cuda.blockIdx.x), int32(cuda.gridDim.x), int32(cuda.blockIdx.y) * TN
        tiles = int32(out.shape[0] // TM)
        c_in = int32(w.shape[0] // TAPS)
        load_filters(smem, w, col0)
        issue(smem, x, 0, t0, step, tiles, c_in, height, width)
        acc = MM.get_accumulator()
        p = 0
        tile = t0
        while tile < tiles:
            acc.clear()
            p = kloop(smem, x, p, t0, step, tiles, c_in, height, width, acc)
            # the FP32 tile through shared memory, then bias and ReLU by row and channel: no fragment-to-column
            # map needed, one rounding. In the halo buffer of the phase just read, once every warp is past its
            # GEMMs; the next phase's barrier comes before that buffer is refilled (and before the last tile's
            # epilogue is overwritten, in a buffer of its own)
            if IN_HALO:
                cuda.syncthreads()
                c32 = int32((H_AT + ((p - 1) % 2) * H_STEP) // 2)
            else:
                c32 = int32(C_AT // 2)
            copy_fragment(acc.get_results(), make_tensor(smem32[c32 : c32 + SC], MM.get_layout_smem_c()))
            cuda.syncthreads()
            epilogue(smem32, c32, bias, out, tile * TM, col0)
            tile += step
        copy_wait()  # the empty group past the end

    return halo_conv_kernel


@functools.cache
def make_halo_b2b_kernel(MM0: Matmul, MM1: Matmul, cfg: HaloConfig, n_chunks: int, keep_d0: bool = False):
    """D1 = relu(D0 @ W1 + bias1) with D0 = relu(conv3x3(x, w0)), one row tile at a time, persistent: GEMM 0 is the
    halo stream over all C_mid columns; its FP32 result becomes FP16 D0 in the halo buffer its last phase read,
    laid out as GEMM 1's A (``halo_matmul(padded_c=True)``); W1 stays in shared memory; D1's FP32 tile goes beside
    D0 (or in its own buffer), and the epilogue adds bias1 by channel. Arguments as ``ConvB2B``'s kernel:
    ``x`` flat NHWC; ``w0`` (9 C_in) x C_mid; ``w1`` C_mid x C_out; ``bias1``; ``out`` (B H W) x C_out; ``height``,
    ``width``; ``d0`` (B H W) x C_mid, written only with ``keep_d0``."""
    TM, N0, _ = MM0.size
    _, N1, K1 = MM1.size
    THREADS = MM0.block_size
    assert K1 == N0 and MM1.size[0] == TM and MM1.block_size == THREADS
    L = plan_b2b_layout(MM0, MM1, cfg, n_chunks)
    load_filters, issue, kloop = make_halo_stream(MM0, cfg, n_chunks, L)
    epilogue = make_epilogue(TM, N1, THREADS, True)
    H_AT, H_STEP, W_AT, C_AT, C_IN_HALO = L.halo, L.halo_step, L.w1, L.c, L.c_in_halo
    SD, SW, SC = MM0.get_layout_smem_c().cosize, MM1.get_layout_smem_b().cosize, MM1.get_layout_smem_c().cosize
    assert SD == MM1.get_layout_smem_a().cosize and SC == TM * N1
    F0, LD0, UNITS0 = MM0.get_layout_rmem_c().cosize, N0 + PAD, N0 // 8
    KEEP = TM * UNITS0 // THREADS  # D0's 8-channel units a thread copies out (keep_d0)
    assert KEEP * THREADS == TM * UNITS0, "D0's 8-channel units spread evenly over the threads (halo_b2b_constraints)"
    gmem_w1 = gmem_layout(MM1, "b")

    @cuda.jit(launch_bounds=(THREADS, 1))
    def halo_b2b_kernel(x, w0, w1, bias1, out, height, width, d0):
        smem = cuda.shared.array(shape=(0,), dtype=np.float16, alignment=1024)
        smem32 = cuda.shared.array(shape=(0,), dtype=np.float32, alignment=1024)
        t0, step = int32(cuda.blockIdx.x), int32(cuda.gridDim.x)
        tid = int32(cuda.threadIdx.x)
        tiles = int32(out.shape[0] // TM)
        c_in = int32(w0.shape[0] // TAPS)
        load_filters(smem, w0, 0)
        sw = make_tensor(smem[W_AT : W_AT + SW], MM1.get_layout_smem_b())
        copy(make_tensor(w1, gmem_w1(N1)), sw)  # with the 3x3 filters, in phase 0's group
        issue(smem, x, 0, t0, step, tiles, c_in, height, width)
        acc0 = MM0.get_accumulator()
        acc1 = MM1.get_accumulator()
        p = 0
        tile = t0
        while tile < tiles:
            acc0.clear()
            p = kloop(smem, x, p, t0, step, tiles, c_in, height, width, acc0)
            cuda.syncthreads()  # every warp is past its GEMMs on the buffer just read: D0 and D1 go there
            at = int32(H_AT + ((p - 1) % 2) * H_STEP)  # D0 at the buffer's start
            r0 = acc0.get_results()
            d0_tile = make_tensor(cuda.local.array(F0, np.float16), MM0.get_layout_rmem_c())
            for i in range(F0):
                v = r0[i]
                d0_tile[i] = v if v > 0 else float32(0)
            copy_fragment(d0_tile, make_tensor(smem[at : at + SD], MM0.get_layout_smem_c()))
            cuda.syncthreads()  # D0 is complete
            row0 = tile * TM
            if keep_d0:
                for i in range(KEEP):
                    k = int32(tid + i * THREADS)
                    row = k // UNITS0
                    col = int32((k - row * UNITS0) * 8)
                    for j in range(8):
                        d0[row0 + row, col + j] = smem[at + row * LD0 + col + j]
            acc1.clear()
            MM1.execute(make_tensor(smem[at : at + SD], MM1.get_layout_smem_a()), sw, acc1)
            c32 = int32((at + C_AT) // 2) if C_IN_HALO else int32(C_AT // 2)  # beside D0: no barrier needed
            copy_fragment(acc1.get_results(), make_tensor(smem32[c32 : c32 + SC], MM1.get_layout_smem_c()))
            cuda.syncthreads()
            epilogue(smem32, c32, bias1, out, row0, 0)
            tile += step  # the next phase's barrier comes before this buffer is refilled
        copy_wait()

    return halo_b2b_kernel


class HaloConv(PersistentConv):
    """relu(conv3x3(x, w) + bias) (``fused``) or conv3x3(x, w) with the halo kernel: stride 1, padding 1, ``w`` of
    shape (3, 3, C_in, C_out), NHWC FP16 in and out.

    ``parts`` "gather" or "mma": a diagnostic kernel doing only that part of the work (wrong results). ``blocks``
    caps the blocks along x (default: one wave), so that a check at a small shape has each block walk several row
    tiles. ``resources`` (after the first call): registers, spills, shared memory and blocks an SM."""

    def __init__(
        self,
        shape: ConvShape,
        fused: bool = True,
        cfg: HaloConfig | None = None,
        parts: str = "all",
        blocks: int | None = None,
    ):
        if parts not in PARTS:
            raise ValueError(f"parts must be one of {PARTS}, got {parts!r}")
        self.shape, self.fused = shape, fused
        self.cfg = c = cfg or HaloConfig(tile_n=64 if shape.c_out % 64 == 0 else 32)
        self.n_chunks = chunks(shape.c_in, c)
        self.MM = halo_matmul(c)
        self.layout = plan_layout(self.MM, c, self.n_chunks)
        halo_constraints(shape, c, self.layout, smem_limit())
        self.kernel = make_halo_conv_kernel(self.MM, c, self.n_chunks, fused, parts)
        self.grid: tuple[int, int] | None = None
        self.max_blocks = blocks
        self.resources: dict[str, Any] = {}


class HaloConvB2B(PersistentB2B):
    """relu(conv1x1(relu(conv3x3(x, w0)), w1) + bias1) in one halo kernel, D0 kept in the block: ``ConvB2B``'s
    interface (``w1`` a (C_mid, C_out) matrix; ``keep_d0`` also writes D0 to ``self.d0`` for the checker; ``blocks``
    caps the blocks). ``cfg`` defaults to 128-pixel tiles of all C_mid channels, 256 threads."""

    def __init__(
        self, shape: B2BShape, cfg: HaloConfig | None = None, keep_d0: bool = False, blocks: int | None = None
    ):
        c = cfg or HaloConfig(tile_n=shape.c_mid)
        self.shape, self.cfg, self.keep_d0 = shape, c, keep_d0
        self.n_chunks = chunks(shape.c_in, c)
        self.MM0 = halo_matmul(c, padded_c=True)
        self.MM1 = b2b_matmul(c.tile_m, shape.c_mid, shape.c_out, c.threads)
        self.layout = plan_b2b_layout(self.MM0, self.MM1, c, self.n_chunks)
        halo_b2b_constraints(shape, c, self.layout, self.MM0.get_layout_smem_c().cosize, smem_limit())
        self.kernel = make_halo_b2b_kernel(self.MM0, self.MM1, c, self.n_chunks, keep_d0)
        self.d0 = cp.zeros((shape.m if keep_d0 else c.tile_m, shape.c_mid), cp.float16)
        self.grid: tuple[int, int] | None = None
        self.max_blocks = blocks
        self.resources: dict[str, Any] = {}

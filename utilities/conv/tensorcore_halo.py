"""The halo implicit GEMM (GPU only): each row tile's input read once, its nine taps multiplied from shared memory.

The pipelined kernel (``tensorcore_persistent``) gathers each tap's A tile on its own: every input pixel is copied
nine times from L2, and its gathers alone took longer than its MMAs alone (issue 44's H200 run: 0.546 against
0.410 ms). Here a block copies a row tile's *halo* (``utilities.conv.halo``: three input rows, TM + 2 pixels, TK
channels), 3 (TM + 2) / (9 TM), about a third, of those bytes, in 16-byte ``cp.async`` copies of contiguous
channels with no per-tap address arithmetic; then the nine taps' GEMMs read their A tiles as windows of it (tap
(r, s): halo row r from pixel s, leading dimension TK + 8), back to back, with no wait or barrier between them.

Persistent blocks walk row tiles ``blockIdx.x``, ``+ gridDim.x``, ... of their column tile ``blockIdx.y``; a tile
is ``C_in / TK`` phases (one halo each). Two halo buffers: phase p + 1's copies are issued right after phase p's
barrier and land while the tensor cores run phase p's nine GEMMs. The filters of the block's columns stay in shared
memory. One wait and one barrier a phase, one more barrier a tile for the output, staged in FP32 in shared memory:
the epilogue adds the bias by each value's row and channel there, so it needs no map from the accumulator's
fragment to columns (nvmath's map is the suggested layouts', and this kernel's layouts are plain ones).

Constraints (the plan checks them and names the fix, ``halo.halo_constraints``): the image width a multiple of
TM, C_in of TK, C_out of TN, B H W C-contiguous FP16 on 16-byte boundaries, the plan within the GPU's shared
memory.
"""

from __future__ import annotations

import functools
from typing import Any

import cupy as cp
import numpy as np
from numba import cuda, float32, int32, int64
from nvmath.device import Matmul
from nvmath.device.common import copy, copy_fragment, copy_wait, make_tensor

from ..machinery import cp_async, launch, padded_layouts
from ..machinery.aligned_copy import gmem_layout
from ..operands import require
from ..tiles import block_matmul
from .halo import TAPS, HaloConfig, HaloLayout, chunks, halo_constraints, halo_layout
from .reference import ConvShape
from .simt import halo_copy, pixel_coords
from .tensorcore_persistent import PARTS, one_wave


@functools.cache
def halo_matmul(cfg: HaloConfig) -> Matmul:
    """The block GEMM of one tap: A a window of the halo (leading dimension TK + 8), B a filter stage (TN + 8).
    cuBLASDx takes the operands of one ``execute`` all in its suggested layouts or all in these plain ones, and
    nvmath's tensor API keeps a leading dimension only through ``machinery.padded_layouts``: checked here, since a
    dense layout would be read silently wrong."""
    why = padded_layouts.unavailable()
    if why is not None:
        raise ValueError(f"the halo kernel cannot run here: {why}; use the pipelined kernel (PipelinedConv)")
    padded_layouts.install()
    tm, tn, tk = cfg.tile
    lds = (cfg.ld, cfg.ld_b, tn)
    MM = block_matmul("float16", (tm, tn, tk), cfg.threads, b="row_major", leading_dimension=lds)
    want = {"A": (tm - 1) * cfg.ld + tk, "B": (tk - 1) * cfg.ld_b + tn}
    got = {"A": MM.get_layout_smem_a().cosize, "B": MM.get_layout_smem_b().cosize}
    if got != want:
        raise RuntimeError(
            f"cuBLASDx's shared-memory layouts ignore the leading dimensions {lds[:2]} (sizes {got}, padded ones "
            f"would be {want}): utilities.machinery.padded_layouts no longer works with this nvmath-python; use "
            "the pipelined kernel (PipelinedConv)"
        )
    return MM


def plan_layout(MM: Matmul, cfg: HaloConfig, n_chunks: int) -> HaloLayout:
    """The plan of ``halo.halo_layout``, the output tile in FP32 (two FP16 places a value)."""
    return halo_layout(cfg, n_chunks, MM.get_layout_smem_b().cosize, 2 * MM.get_layout_smem_c().cosize)


@functools.cache
def make_halo_conv_kernel(MM: Matmul, cfg: HaloConfig, n_chunks: int, fused: bool = True, parts: str = "all"):
    """out = relu(conv3x3(x, w) + bias) (``fused``) or conv3x3(x, w).

    Arguments: ``x`` the NHWC input, flat FP16; ``w`` the filters as the (9 C_in) x C_out matrix B; ``bias``
    (C_out,); ``out`` the (B H W) x C_out result; ``height``, ``width``. ``parts`` "gather" copies the halos and
    skips the GEMMs, "mma" runs the GEMMs on whatever shared memory holds: what each costs alone (wrong results).
    """
    TM, TN, TK = MM.size
    THREADS = MM.block_size
    assert parts in PARTS, f"parts must be one of {PARTS}, got {parts!r}"
    GATHER, MMA = parts in ("all", "gather"), parts in ("all", "mma")
    L = plan_layout(MM, cfg, n_chunks)
    NCH, HW, LD, CPP, COPIES = n_chunks, cfg.halo_width, cfg.ld, TK // 8, cfg.copies
    PER_THREAD = -(-COPIES // THREADS)
    H_AT, H_STEP, B_AT, B_STEP, C_AT = L.halo, L.halo_step, L.b, L.b_step, L.c
    SA, SB, SC = MM.get_layout_smem_a().cosize, MM.get_layout_smem_b().cosize, MM.get_layout_smem_c().cosize
    assert SC == TM * TN, "the output tile is dense in shared memory (leading dimension TN)"
    C32_AT, UNITS = C_AT // 2, TN // 8  # the FP32 output tile (FP32 elements); 8-channel units in its row
    EPILOGUE = TM * UNITS // THREADS
    assert EPILOGUE * THREADS == TM * UNITS
    assert 2 * HW * LD + SA <= 3 * HW * LD, "the last tap's window ends inside the halo"
    copy16, commit, wait_all = cp_async.copy16, cp_async.commit, cp_async.wait_prior(0)
    gmem_b = gmem_layout(MM, "b")

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
        """The phases of one tile into ``acc``, each one's successor issued as it starts; the next phase."""
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

    @cuda.jit(launch_bounds=(THREADS, 1))
    def halo_conv_kernel(x, w, bias, out, height, width):
        smem = cuda.shared.array(shape=(0,), dtype=np.float16, alignment=1024)
        smem32 = cuda.shared.array(shape=(0,), dtype=np.float32, alignment=1024)  # the same bytes, as FP32
        t0, step, col0 = int32(cuda.blockIdx.x), int32(cuda.gridDim.x), int32(cuda.blockIdx.y) * TN
        tid = int32(cuda.threadIdx.x)
        tiles = int32(out.shape[0] // TM)
        c_in = int32(w.shape[0] // TAPS)
        for s in range(TAPS * NCH):  # the block's filters, resident: in phase 0's group
            at = B_AT + s * B_STEP
            copy(make_tensor(w[s * TK : s * TK + TK, col0 : col0 + TN], gmem_b(w.shape[1])),
                 make_tensor(smem[at : at + SB], MM.get_layout_smem_b()))  # fmt: skip
        issue(smem, x, 0, t0, step, tiles, c_in, height, width)
        acc = MM.get_accumulator()
        sc = make_tensor(smem32[C32_AT : C32_AT + SC], MM.get_layout_smem_c())
        p = 0
        tile = t0
        while tile < tiles:
            acc.clear()
            p = kloop(smem, x, p, t0, step, tiles, c_in, height, width, acc)
            # the FP32 tile through shared memory (the last tile's epilogue read it before this tile's first
            # barrier), then bias and ReLU by row and channel: no fragment-to-column map needed, one rounding
            copy_fragment(acc.get_results(), sc)
            cuda.syncthreads()
            row0 = tile * TM
            for i in range(EPILOGUE):
                k = int32(tid + i * THREADS)
                row = k // UNITS
                col = int32((k - row * UNITS) * 8)
                at = int32(C32_AT + row * TN + col)
                for j in range(8):
                    v = smem32[at + j]
                    if fused:
                        v = v + float32(bias[col0 + col + j])
                        v = v if v > 0 else float32(0)
                    out[row0 + row, col0 + col + j] = v
            tile += step
        copy_wait()  # the empty group past the end

    return halo_conv_kernel


class HaloConv:
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
        halo_constraints(shape, c, self.layout, int(cp.cuda.Device().attributes["MaxSharedMemoryPerBlockOptin"]))
        self.kernel = make_halo_conv_kernel(self.MM, c, self.n_chunks, fused, parts)
        self.grid: tuple[int, int] | None = None
        self.max_blocks = blocks
        self.resources: dict[str, Any] = {}

    def __call__(self, x: Any, w: Any, bias: Any, out: Any = None) -> Any:
        s = self.shape
        out = cp.empty((s.batch, s.height, s.width, s.c_out), cp.float16) if out is None else out
        shapes = {
            "x": (s.batch, s.height, s.width, s.c_in),
            "w": (3, 3, s.c_in, s.c_out),
            "bias": (s.c_out,),
            "out": (s.batch, s.height, s.width, s.c_out),
        }
        for name, v in (("x", x), ("w", w), ("bias", bias), ("out", out)):
            require(name, v, np.float16, shapes[name])
        args = (
            x.reshape(-1),
            w.reshape(TAPS * s.c_in, s.c_out),
            bias,
            out.reshape(s.m, s.c_out),
            np.int32(s.height),
            np.int32(s.width),
        )
        if self.grid is None:
            columns = s.c_out // self.cfg.tile_n
            blocks, self.resources = one_wave(
                self.kernel, self.cfg.threads, self.layout.nbytes, args, s.m // self.cfg.tile_m, columns
            )
            self.grid = (min(blocks, self.max_blocks or blocks), columns)
        launch.launch(self.kernel, self.grid, self.cfg.threads, self.layout.nbytes, *args)
        return out

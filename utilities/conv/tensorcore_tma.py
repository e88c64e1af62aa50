"""The pipelined implicit GEMM with its A tiles fetched by the tensor memory accelerator (GPU only, sm_90).

The same persistent blocks, ring of phases, streamed or resident filters and epilogue as
``tensorcore_persistent`` (its docstring says how they work), with one change: the A stage of a tap is no longer
gathered by every thread in 16-byte ``cp.async`` copies (an address, a bounds test and an instruction for each),
but fetched by one thread in one tensor copy (``machinery.tma``). A row tile of TM pixels lies in one image row, or
is whole rows of one image (``tma.box_of``), so tap (r, s) of the tile is one box of the NHWC input at
``(c0, w + s - 1, h + r - 1, b)``: the copy engine fills the padding with zeros where the box hangs over the
image's edge, and writes the box swizzled as cuBLASDx's suggested layout reads it (128-byte swizzle for rows of
64 channels, 64-byte for 32: the pattern ``machinery.swizzle`` measured, ``tests/test_conv_tma.py`` compares them).

Each slot of the ring has a transaction barrier: the issuing thread arrives on it saying how many bytes are coming,
and every thread waits on the slot's barrier, with the parity of the slot's use, before its MMAs read the slot.
The block-wide barrier a phase stays: it tells the issuing thread that every warp is done with the slot it is
about to refill (and covers the streamed filters' ``cp.async`` copies, as before).

``make_tma_conv_kernel``: out = relu(conv(x) + bias) (``fused``) or conv(x), a 3x3 or 1x1 convolution; arguments
``(tmap, w, bias, out, height, width)``, ``tmap`` the input's tensor map (``tma.nhwc_map``). One build serves every
image size: the box's shape lives in the map, and its bytes are TM x TK x 2 whatever the shape.
"""

from __future__ import annotations

import functools
from typing import Any

import cupy as cp
import numpy as np
from numba import cuda, float32, int32
from nvmath.device import Matmul
from nvmath.device.common import copy, copy_fragment, copy_wait, make_tensor

from ..machinery import cp_async, launch, tma
from ..machinery.aligned_copy import gmem_layout
from ..operands import require
from .layout import PipeConfig, PipeLayout, min_blocks
from .reference import ConvShape
from .simt import box_coords, stage_tap
from .tensorcore_persistent import PARTS, PipelinedConv, conv_layout, one_wave, resident_filters

MAPS_KEPT = 8  # tensor maps a plan keeps, one per input array


def barrier_at(L: PipeLayout) -> int:
    """Where the ring's transaction barriers start (an FP16 index, 8-byte aligned): after the plan's buffers."""
    return -(-L.end // 4) * 4


def shared_bytes(L: PipeLayout, cfg: PipeConfig) -> int:
    """The plan's shared memory with one 8-byte barrier a slot of the A ring."""
    return 2 * barrier_at(L) + 8 * cfg.depth * cfg.group


@functools.cache
def make_tma_stream(
    MM: Matmul, cfg: PipeConfig, taps: int, n_stages: int, L: PipeLayout, parts: str = "all"
) -> tuple[Any, Any]:
    """Device functions ``(issue, kloop)``, as ``tensorcore_persistent.make_stream``'s, with A by tensor copies.

    ``issue(smem, tmap, w, p, t0, step, tiles, col0, c_in, height, width)`` starts phase p (thread 0 its A boxes,
    every thread the streamed filters); ``kloop(..., acc)`` runs one tile's phases into ``acc`` and returns the
    stream's next phase. ``parts``: "gather" copies and waits without MMAs, "mma" multiplies whatever the ring
    holds without copies or waits (timing only)."""
    TM, TN, TK = MM.size
    DEPTH, G, RESIDENT = cfg.depth, cfg.group, cfg.resident
    NP = n_stages // G
    TAPS = taps
    GATHER, MMA = parts in ("all", "gather"), parts in ("all", "mma")
    SA, SB = MM.suggest_layout_smem_a().cosize, MM.suggest_layout_smem_b().cosize
    A_AT, A_STEP, B_AT, B_STEP = L.a, L.a_step, L.b, L.b_step
    BAR = barrier_at(L)
    BYTES = TM * TK * 2  # a box: TM pixels of TK channels, whatever its width and rows
    assert NP * G == n_stages and A_AT * 2 % 1024 == 0 and A_STEP * 2 % 1024 == 0, "the swizzle needs 1 KiB slots"
    assert parts in PARTS, f"parts must be one of {PARTS}, got {parts!r}"
    commit, wait_oldest = cp_async.commit, cp_async.wait_prior(DEPTH - 2)
    gmem_b = gmem_layout(MM, "b")

    @cuda.jit(device=True, forceinline=True)
    def issue(smem, tmap, w, p, t0, step, tiles, col0, c_in, height, width):
        it = p // NP
        j = int32(p - it * NP)  # the phase within its tile
        tile = int32(t0 + it * step)
        if GATHER and tile < tiles:
            slot = int32(p % DEPTH)
            if cuda.threadIdx.x == 0:
                tma.fence_async_shared()  # the slot's last reads (MMAs, the staged output) before the copy's writes
                for g in range(G):
                    tap, c0 = stage_tap(int32((j * G + g) * TK), c_in)
                    wc, hc, b = box_coords(int32(tile * TM), int32(tap), TAPS, height, width)
                    bar = int32(BAR + 4 * (slot * G + g))
                    tma.expect_bytes(smem, bar, BYTES)
                    tma.load_4d(smem, int32(A_AT + (slot * G + g) * A_STEP), tmap, c0, wc, hc, b, bar)
            if not RESIDENT:
                for g in range(G):
                    k0 = (j * G + g) * TK
                    b_at = B_AT + (slot * G + g) * B_STEP
                    copy(make_tensor(w[k0 : k0 + TK, col0 : col0 + TN], gmem_b(w.shape[1])),
                         make_tensor(smem[b_at : b_at + SB], MM.suggest_layout_smem_b()))  # fmt: skip
        commit()  # the filters' copies: one group a phase, an empty one past the last tile keeps the count

    @cuda.jit(device=True, forceinline=True)
    def kloop(smem, tmap, w, p, t0, step, tiles, col0, c_in, height, width, acc):
        for j in range(NP):
            wait_oldest()  # this thread's filter copies of phase p have landed ...
            cuda.syncthreads()  # ... and everyone's; every warp is done with phase p - 1's slot
            issue(smem, tmap, w, p + DEPTH - 1, t0, step, tiles, col0, c_in, height, width)
            slot = p % DEPTH
            parity = (p // DEPTH) & 1  # the slot's use: its barrier's phases complete 0, 1, 0, ...
            for g in range(G):
                if GATHER:
                    tma.wait_parity(smem, int32(BAR + 4 * (slot * G + g)), int32(parity))
                if MMA:
                    a_at = A_AT + (slot * G + g) * A_STEP
                    b_at = B_AT + ((j * G + g) if RESIDENT else (slot * G + g)) * B_STEP
                    MM.execute(make_tensor(smem[a_at : a_at + SA], MM.suggest_layout_smem_a()),
                               make_tensor(smem[b_at : b_at + SB], MM.suggest_layout_smem_b()), acc)  # fmt: skip
            p += 1
        return p

    return issue, kloop


@functools.cache
def make_tma_conv_kernel(MM: Matmul, cfg: PipeConfig, taps: int, n_stages: int, fused: bool = True, parts: str = "all"):
    """out = relu(conv(x, w) + bias) (``fused``) or conv(x, w), A by tensor copies through ``tmap``.

    Arguments: ``tmap`` the NHWC input's tensor map (``tma.nhwc_map``); ``w`` the filters as the (taps C_in) x
    C_out matrix B; ``bias`` (C_out,); ``out`` the (B H W) x C_out result; ``height``, ``width``."""
    TM, TN, _ = MM.size
    THREADS = MM.block_size
    L = conv_layout(MM, cfg, n_stages)
    issue, kloop = make_tma_stream(MM, cfg, taps, n_stages, L, parts)
    load_filters = resident_filters(MM, cfg, n_stages, L)
    MIN_BLOCKS = min_blocks(cfg, shared_bytes(L, cfg))
    DEPTH, C_AT, IN_RING, A_AT, PHASE_SLOTS = cfg.depth, L.c, L.c_in_ring, L.a, cfg.group * L.a_step
    BAR, SLOTS = barrier_at(L), cfg.depth * cfg.group
    SC = MM.suggest_layout_smem_c().cosize
    FRAGMENT = MM.suggest_layout_rmem_c().cosize
    gmem_c = gmem_layout(MM, "c")

    @cuda.jit(launch_bounds=(THREADS, MIN_BLOCKS))
    def tma_conv_kernel(tmap, w, bias, out, height, width):
        smem = cuda.shared.array(shape=(0,), dtype=np.float16, alignment=1024)
        t0, step, col0 = int32(cuda.blockIdx.x), int32(cuda.gridDim.x), int32(cuda.blockIdx.y) * TN
        tiles = int32(out.shape[0] // TM)
        c_in = int32(w.shape[0] // taps)
        if cuda.threadIdx.x == 0:
            tma.acquire_map(tmap)
            for i in range(SLOTS):
                tma.barrier_init(smem, BAR + 4 * i, 1)
            tma.fence_barrier_init()
        cuda.syncthreads()  # the barriers exist before anyone waits on them
        load_filters(smem, w, col0)  # in the first group
        for p in range(DEPTH - 1):
            issue(smem, tmap, w, p, t0, step, tiles, col0, c_in, height, width)
        acc = MM.suggest_accumulator()
        p = 0
        tile = t0
        while tile < tiles:
            acc.clear()
            p = kloop(smem, tmap, w, p, t0, step, tiles, col0, c_in, height, width, acc)
            result = acc.get_results()
            part = make_tensor(cuda.local.array(FRAGMENT, np.float16), MM.suggest_layout_rmem_c())
            if fused:
                for i in range(FRAGMENT):
                    _, col = acc.map_fragment_index(i)
                    v = result[i] + float32(bias[col0 + col])
                    part[i] = v if v > 0 else float32(0)
            else:
                for i in range(FRAGMENT):
                    part[i] = result[i]
            if IN_RING:  # the slots of the phase the K loop read last: free once every warp is past its MMAs
                cuda.syncthreads()
                c_at = A_AT + ((p - 1) % DEPTH) * PHASE_SLOTS
            else:
                c_at = C_AT
            sc = make_tensor(smem[c_at : c_at + SC], MM.suggest_layout_smem_c())
            copy_fragment(part, sc)
            cuda.syncthreads()
            row0 = tile * TM
            copy(sc, make_tensor(out[row0 : row0 + TM, col0 : col0 + TN], gmem_c(out.shape[1])))
            tile += step  # the next K loop refills these slots only after its first barrier: the store is done
        copy_wait()  # the empty groups past the end

    return tma_conv_kernel


class TmaConv(PipelinedConv):
    """``PipelinedConv`` with the A stages fetched by tensor copies (same arguments, same results). The image's
    row tiles must each be one box (``tma.box_of``: W a multiple of TM, or TM a multiple of W); the plan refuses
    other shapes and names the gathering plan for them. The tensor map is encoded for each new input array."""

    def __init__(
        self,
        shape: ConvShape,
        fused: bool = True,
        cfg: PipeConfig | None = None,
        taps: int = 9,
        parts: str = "all",
        blocks: int | None = None,
    ):
        why = tma.unavailable()
        if why is not None:
            raise RuntimeError(f"the tensor-copy kernel cannot run here: {why}; use PipelinedConv (gathers)")
        super().__init__(shape, fused, cfg, taps, parts, blocks)
        self.box = tma.box_of(shape.height, shape.width, self.cfg.tile_m, self.cfg.tile_k)
        self.shared = shared_bytes(self.layout, self.cfg)
        self.kernel = make_tma_conv_kernel(self.MM, self.cfg, taps, self.n_stages, fused, parts)
        self._maps: dict[tuple[int, tuple[int, ...]], Any] = {}

    def tensor_map(self, x: Any) -> Any:
        """The tensor map of input ``x``: encoded and copied to the GPU once for each input array (the last
        ``MAPS_KEPT`` kept), so that a loop over a few inputs pays for it once each."""
        key = (tma.address(x), tuple(x.shape))
        if key not in self._maps:
            if len(self._maps) >= MAPS_KEPT:
                self._maps.pop(next(iter(self._maps)))
            self._maps[key] = tma.nhwc_map(x, self.box)
        return self._maps[key]

    def __call__(self, x: Any, w: Any, bias: Any, out: Any = None) -> Any:
        s = self.shape
        out = cp.empty((s.batch, s.height, s.width, s.c_out), cp.float16) if out is None else out
        wshape = (3, 3, s.c_in, s.c_out) if self.taps == 9 else (s.c_in, s.c_out)
        for name, v, dims in (
            ("x", x, (s.batch, s.height, s.width, s.c_in)),
            ("w", w, wshape),
            ("bias", bias, (s.c_out,)),
            ("out", out, (s.batch, s.height, s.width, s.c_out)),
        ):
            require(name, v, np.float16, dims)
        args = (
            self.tensor_map(x),
            w.reshape(self.taps * s.c_in, s.c_out),
            bias,
            out.reshape(s.m, s.c_out),
            np.int32(s.height),
            np.int32(s.width),
        )
        if self.grid is None:
            columns = s.c_out // self.cfg.tile_n
            blocks, self.resources = one_wave(
                self.kernel, self.cfg.threads, self.shared, args, s.m // self.cfg.tile_m, columns
            )
            self.grid = (min(blocks, self.max_blocks or blocks), columns)
        launch.launch(self.kernel, self.grid, self.cfg.threads, self.shared, *args)
        return out

"""The pipelined implicit GEMM's stream with its A tiles fetched by the tensor memory accelerator (GPU only, sm_90).

``tensorcore_persistent``'s kernels (the 3x3 or 1x1 convolution, and the back-to-back chain) run their K stages as a
stream of phases in a ring (its docstring says how); ``make_stream`` gathers each A stage in 16-byte ``cp.async``
copies, every thread an address, a bounds test and an instruction for each. :func:`make_tma_stream` is the same
stream with one change: one thread fetches each A stage in one tensor copy (``machinery.tma``). A row tile of TM
pixels lies in one image row, or is whole rows of one image (``tma.box_of``), so tap (r, s) of the tile is one box of
the NHWC input at ``(c0, w + s - 1, h + r - 1, b)`` (``simt.box_coords``): the copy engine fills the padding with
zeros where the box hangs over the image's edge, and writes the box swizzled as cuBLASDx's suggested layout reads
it (the 128-byte swizzle for rows of 64 channels, 64-byte for 32: the pattern ``machinery.swizzle`` measured;
``tests/test_conv_tma.py`` compares the two).

Each slot of the ring has a transaction barrier: the issuing thread arrives on it saying how many bytes are coming,
and every thread waits on the slot's barrier, with the parity of the slot's use, before its MMAs read the slot.
The block-wide barrier a phase stays: it tells the issuing thread that every warp is done with the slot it is
about to refill (and covers the streamed filters' ``cp.async`` copies, as before). The kernels are the same
functions; with a ``layout.TmaConfig`` they take the input's tensor map where they took the flat input
(``tensorcore_persistent.conv_stream``), and the plans encode it (:class:`TensorCopies`). One build serves every image
size: the box's shape lives in the map, and its bytes are TM x TK x 2 whatever the shape.
"""

from __future__ import annotations

import functools
from typing import Any

from numba import cuda, int32
from nvmath.device import Matmul
from nvmath.device.common import copy, make_tensor

from ..machinery import cp_async, swizzle, tma
from ..machinery.aligned_copy import gmem_layout
from .layout import PARTS, PipeConfig, PipeLayout
from .reference import ConvShape
from .simt import box_coords, stage_tap

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
    """Device functions ``(issue, kloop)`` of ``tensorcore_persistent.make_stream``'s signatures, A by tensor copies.

    ``issue(smem, tmap, w, p, t0, step, tiles, col0, c_in, height, width, pix, inside)`` starts phase p (thread 0
    its A boxes, every thread the streamed filters; at p = 0 thread 0 first sets up the ring's barriers);
    ``kloop(..., acc)`` runs one tile's phases into ``acc`` and returns the stream's next phase. ``pix`` and
    ``inside`` (the gathers' per-thread rows) are not used. ``parts``: "gather" copies and waits without MMAs,
    "mma" multiplies whatever the ring holds without copies or waits (timing only)."""
    TM, TN, TK = MM.size
    DEPTH, G, RESIDENT = cfg.depth, cfg.group, cfg.resident
    NP = n_stages // G
    TAPS = taps
    GATHER, MMA = parts in ("all", "gather"), parts in ("all", "mma")
    SA, SB = MM.suggest_layout_smem_a().cosize, MM.suggest_layout_smem_b().cosize
    A_AT, A_STEP, B_AT, B_STEP = L.a, L.a_step, L.b, L.b_step
    BAR, SLOTS = barrier_at(L), DEPTH * G
    FILTERS = bool(getattr(cfg, "filter_copies", False))  # the filters' stages by tensor copies too
    # a stage's bytes: TM pixels of TK channels (whatever the box's width and rows), and TK x TN of the filters
    BYTES = TM * TK * 2 + (TK * TN * 2 if FILTERS else 0)
    MAP_B = tma.MAP_BYTES  # the filters' map follows the input's in the kernel's map argument
    assert NP * G == n_stages and A_AT * 2 % 1024 == 0 and A_STEP * 2 % 1024 == 0, "the swizzle needs 1 KiB slots"
    assert not FILTERS or (B_AT * 2 % 1024 == 0 and B_STEP * 2 % 1024 == 0), "the filters' swizzle needs 1 KiB slots"
    assert parts in PARTS, f"parts must be one of {PARTS}, got {parts!r}"
    swizzle.a_tile(TK)  # the layout the copies write, measured for TK 32 and 64: refuses others, warns on new versions
    commit, wait_oldest = cp_async.commit, cp_async.wait_prior(DEPTH - 2)
    gmem_b = gmem_layout(MM, "b")

    @cuda.jit(device=True, forceinline=True)
    def issue(smem, tmap, w, p, t0, step, tiles, col0, c_in, height, width, pix, inside):
        if GATHER and p == 0 and cuda.threadIdx.x == 0:  # the block's first phase: its barriers, before any copy
            tma.acquire_map(tmap, 0)
            if FILTERS:
                tma.acquire_map(tmap, MAP_B)
            for i in range(SLOTS):
                tma.barrier_init(smem, BAR + 4 * i, 1)
            tma.fence_barrier_init()  # the other threads wait only after the K loop's first block-wide barrier
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
                    if FILTERS:  # rows k0 ... of the filters, columns col0 ...: the stage's block of B
                        k0 = int32((j * G + g) * TK)
                        tma.load_2d(smem, int32(B_AT + (slot * G + g) * B_STEP), tmap, MAP_B, col0, k0, bar)
            if not RESIDENT and not FILTERS:
                for g in range(G):
                    k0 = (j * G + g) * TK
                    b_at = B_AT + (slot * G + g) * B_STEP
                    copy(make_tensor(w[k0 : k0 + TK, col0 : col0 + TN], gmem_b(w.shape[1])),
                         make_tensor(smem[b_at : b_at + SB], MM.suggest_layout_smem_b()))  # fmt: skip
        commit()  # the filters' copies: one group a phase, an empty one past the last tile keeps the count

    @cuda.jit(device=True, forceinline=True)
    def kloop(smem, tmap, w, p, t0, step, tiles, col0, c_in, height, width, pix, inside, acc):
        for j in range(NP):
            wait_oldest()  # this thread's filter copies of phase p have landed ...
            cuda.syncthreads()  # ... and everyone's; every warp is done with phase p - 1's slot
            issue(smem, tmap, w, p + DEPTH - 1, t0, step, tiles, col0, c_in, height, width, pix, inside)
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


class TensorCopies:
    """A plan's tensor maps: checks that this GPU has tensor copies and that ``shape``'s row tiles are boxes of
    ``cfg``'s tile (else RuntimeError or ValueError, naming the gathering plan), then encodes the maps of each new
    input (and, with ``filter_copies``, filters) array once (the last ``MAPS_KEPT`` kept), so that a loop over a few
    inputs pays for them once each. The kernel takes them as one argument: the input's map, then the filters'."""

    def __init__(self, shape: ConvShape, cfg: PipeConfig):
        why = tma.unavailable()
        if why is not None:
            raise RuntimeError(f"tensor copies cannot run here: {why}; use a PipeConfig (gathers)")
        self.box = tma.box_of(shape.height, shape.width, cfg.tile_m, cfg.tile_k)
        self.cfg = cfg
        self.filters = bool(getattr(cfg, "filter_copies", False))
        if self.filters and cfg.tile_n not in (32, 64):
            raise ValueError(
                f"the filters by tensor copies need rows of 64 or 128 bytes (tile_n 32 or 64), got {cfg.tile_n}"
            )
        self._maps: dict[tuple[int, ...], Any] = {}

    def shared(self, L: PipeLayout) -> int:
        return shared_bytes(L, self.cfg)

    def map_of(self, x: Any, w: Any) -> Any:
        """The kernel's maps for the NHWC input ``x`` and the filters ``w`` as the (taps C_in) x C_out matrix."""
        key = (tma.address(x), *x.shape) + ((tma.address(w), *w.shape) if self.filters else ())
        if key not in self._maps:
            if len(self._maps) >= MAPS_KEPT:
                self._maps.pop(next(iter(self._maps)))
            maps = tma.nhwc_map(x, self.box)
            if self.filters:
                import cupy as cp

                maps = cp.concatenate([maps, tma.matrix_map(w, self.cfg.tile_k, self.cfg.tile_n)])
            self._maps[key] = maps
        return self._maps[key]

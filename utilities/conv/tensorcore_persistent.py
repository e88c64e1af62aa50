"""The pipelined implicit GEMM (GPU only): persistent blocks, a ring of asynchronous gathers, streamed or resident
filters.

Run: ``python -m utilities.conv.benchmarks`` checks every kernel of this module against the FP64 reference, then
times the settings of ``layout.speed_configs()`` beside notebook 2c's two-stage kernel, cuDNN and a Triton peer.

Two kernels, one stream. Each block walks row tiles ``blockIdx.x``, ``blockIdx.x + gridDim.x``, ... (one wave of
blocks: as many as fit on the GPU at once). The K stages of all its tiles form one stream of *phases* (``group``
stages each, ``layout.PipeConfig``) in a ring of ``depth`` buffers: while the tensor cores run phase p, phases
p + 1 ... p + depth - 1 are in flight, across tile boundaries, so that one tile's epilogue hides the next tile's
first loads.

- A stage of A is TK channels of one tap for the tile's TM pixels. Each thread gathers the same rows of every stage
  of a tile: once per tile it keeps their pixels and a 9-bit mask of their taps inside the image
  (``simt.pixel_coords``, ``simt.tap_mask``); once per stage it finds the tap and the pixel offset it reads
  (``simt.stage_tap``, ``simt.tap_offset``); then each copy is 16 bytes (8 channels) by ``cp.async`` into the
  swizzled layout cuBLASDx's ``Matmul`` reads (``machinery.swizzle``), without a branch: a tap in the padding
  reads 0 bytes of its own pixel, and the copy writes 16 zeros.
- B (the filters' TK x TN block of the stage): with ``resident``, every stage of the block's column tile is
  loaded once, before the stream; otherwise it streams with A, by cuBLASDx's ``copy``.
- One wait (``cp_async.wait_prior(depth - 2)``) and one barrier a phase, then ``group`` block MMAs.
- The output tile is staged in the A slots the tile's K loop read last, where they hold it (``PipeLayout.c``), so
  that the shared memory of four blocks fits an SM with streamed filters (the back-to-back kernel stages D0 there too).
- The launch bounds ask ptxas for registers low enough for the blocks the shared memory allows
  (``layout.min_blocks``): with mma.sync, each warp issues its gathers and its MMAs itself, and the warps of other
  blocks are what hides a stage's waits and barriers (``instructor-notes/conv.md`` has the arithmetic).

``make_pipelined_conv_kernel``: out = relu(conv(x) + bias) (``fused``) or conv(x), a 3x3 or a 1x1 convolution
(``taps`` 9 or 1). ``make_conv_b2b_kernel``: D1 = relu(conv1x1(relu(conv3x3(x, w0)), w1) + bias1), D0's tile turned
into FP16 in shared memory as the A operand of the second GEMM (the exercise of notebook 2d), never written to
global memory (unless ``keep_d0``, for checking).

Constraints (the plans check them and name the fix): C_in a multiple of TK, C_out (or C_mid) of the tile's N,
B H W of TM; FP16 C-contiguous operands on 16-byte boundaries; the layout within the GPU's shared memory; for
back-to-back, C_mid and C_out multiples of 32 up to 256 and each accumulator at most 128 values a thread
(``layout.b2b_constraints``).
"""

from __future__ import annotations

import functools
from typing import Any

import cupy as cp
import numpy as np
from numba import cuda, float32, int32, int64
from nvmath.device import Matmul
from nvmath.device.common import copy, copy_fragment, copy_wait, make_tensor

from .. import plans
from ..machinery import cp_async, launch, swizzle
from ..machinery.aligned_copy import gmem_layout
from ..operands import require
from ..tiles import block_matmul
from .layout import (
    PARTS,
    PipeConfig,
    PipeLayout,
    TmaConfig,
    b2b_config,
    b2b_constraints,
    check_fits,
    check_group,
    min_blocks,
    one_by_one_config,
    pipe_layout,
    stages,
    with_tensor_copies,
)
from .reference import B2BShape, ConvShape
from .simt import chunk_row, pixel_coords, stage_tap, tap_mask, tap_offset
from .tensorcore_tma import TensorCopies, make_tma_stream, shared_bytes

# ------------------------------------------------------------------------------------------------------------
# The stream: gathers issued ahead, and the K loop of one tile
# ------------------------------------------------------------------------------------------------------------


@functools.cache
def pipe_matmul(tile_m: int, tile_n: int, tile_k: int, threads: int) -> Matmul:
    """The block GEMM of one stage: FP16 row-major operands, FP32 accumulator."""
    return block_matmul("float16", (tile_m, tile_n, tile_k), threads, b="row_major")


def conv_layout(MM: Matmul, cfg: PipeConfig, n_stages: int, MM1: Matmul | None = None) -> PipeLayout:
    """The shared-memory plan of a kernel of this module (``MM1``: the back-to-back kernel's second GEMM)."""
    sa, sb = MM.suggest_layout_smem_a().cosize, MM.suggest_layout_smem_b().cosize
    if MM1 is None:
        return pipe_layout(cfg, n_stages, sa, sb, MM.suggest_layout_smem_c().cosize)
    sc, sd, sw = (
        MM1.suggest_layout_smem_c().cosize,
        MM1.suggest_layout_smem_a().cosize,
        MM1.suggest_layout_smem_b().cosize,
    )
    return pipe_layout(cfg, n_stages, sa, sb, sc, sd, sw)


@functools.cache
def make_stream(
    MM: Matmul, cfg: PipeConfig, taps: int, n_stages: int, L: PipeLayout, parts: str = "all"
) -> tuple[Any, Any]:
    """Device functions ``(issue, kloop)`` of the stream of ``MM``'s stages (see the module's docstring).

    ``issue(smem, x, w, p, t0, step, tiles, col0, c_in, height, width, pix, inside)`` starts phase p;
    ``kloop(..., acc)`` runs the phases of one tile into ``acc``, issuing ``depth - 1`` phases ahead, and returns
    the stream's next phase. ``pix``, ``inside``: this thread's rows of the tile being issued, their pixels and
    the masks of their taps inside the image (int32 local arrays, filled when a tile's first phase is issued).
    ``parts``: "gather" issues the copies and skips the MMAs, "mma" runs the MMAs on whatever the ring holds and
    copies nothing: what each costs alone (the kernel's results are then wrong: for timing only).

    A copy costs a bit test, an add and a multiply: the divisions (a pixel's h and w, a stage's tap) happen once
    per tile and once per stage, in 32-bit integers (numba computes in 64 bits unless told).
    """
    TM, TN, TK = MM.size
    THREADS, DEPTH, G, RESIDENT = MM.block_size, cfg.depth, cfg.group, cfg.resident
    CPR = TK // 8  # 16-byte chunks in a row of an A stage
    RPP = THREADS // CPR  # rows of A a pass of the block's threads covers
    PER_THREAD = TM // RPP
    NP = n_stages // G  # phases of one tile
    ONE_BY_ONE = taps == 1
    GATHER, MMA = parts in ("all", "gather"), parts in ("all", "mma")
    SA, SB = MM.suggest_layout_smem_a().cosize, MM.suggest_layout_smem_b().cosize
    A_AT, A_STEP, B_AT, B_STEP = L.a, L.a_step, L.b, L.b_step  # plain ints: numba reads globals, not dataclasses
    assert CPR * RPP == THREADS and RPP * PER_THREAD == TM and NP * G == n_stages and A_AT % 8 == 0
    assert parts in PARTS, f"parts must be one of {PARTS}, got {parts!r}"
    swizzle_a = swizzle.a_tile(TK)
    copy16, commit = cp_async.copy16, cp_async.commit
    wait_oldest = cp_async.wait_prior(DEPTH - 2)
    gmem_b = gmem_layout(MM, "b")

    @cuda.jit(device=True, forceinline=True)
    def issue(smem, x, w, p, t0, step, tiles, col0, c_in, height, width, pix, inside):
        tid = int32(cuda.threadIdx.x)
        it = p // NP
        j = int32(p - it * NP)  # the phase within its tile
        tile = int32(t0 + it * step)
        if GATHER and tile < tiles:
            if j == 0:  # a new tile: this thread's rows, their pixels and taps inside the image, once
                for i in range(PER_THREAD):
                    row, _ = chunk_row(tid, i, CPR, RPP)
                    m = int32(tile * TM + row)
                    pix[i] = m
                    if not ONE_BY_ONE:
                        h, wc = pixel_coords(m, height, width)
                        inside[i] = int32(tap_mask(int32(h), int32(wc), height, width))
            slot = int32(p % DEPTH)
            for g in range(G):
                k0 = int32((j * G + g) * TK)
                tap, c0 = stage_tap(k0, c_in)  # once per stage
                tap, c0 = int32(tap), int32(c0)
                shift = int32(0) if ONE_BY_ONE else int32(tap_offset(tap, width))
                a_at = int32(A_AT + (slot * G + g) * A_STEP)
                for i in range(PER_THREAD):
                    row, unit = chunk_row(tid, i, CPR, RPP)
                    ok = int32(1) if ONE_BY_ONE else int32((inside[i] >> tap) & 1)
                    src = int32(pix[i] + shift * ok)  # outside: the pixel itself, a valid address that is not read
                    dst = int32(a_at + swizzle_a(int32(row * CPR + unit)) * 8)
                    copy16(smem, dst, x, int64(src) * c_in + int32(c0 + unit * 8), ok * 16)  # 0 bytes read: zeros
                if not RESIDENT:
                    b_at = B_AT + (slot * G + g) * B_STEP
                    copy(make_tensor(w[k0 : k0 + TK, col0 : col0 + TN], gmem_b(w.shape[1])),
                         make_tensor(smem[b_at : b_at + SB], MM.suggest_layout_smem_b()))  # fmt: skip
        commit()  # one group a phase; an empty one past the last tile keeps the count

    @cuda.jit(device=True, forceinline=True)
    def kloop(smem, x, w, p, t0, step, tiles, col0, c_in, height, width, pix, inside, acc):
        for j in range(NP):
            wait_oldest()  # this thread's copies of phase p have landed ...
            cuda.syncthreads()  # ... and everyone's; every warp is done with phase p - 1's slot
            issue(smem, x, w, p + DEPTH - 1, t0, step, tiles, col0, c_in, height, width, pix, inside)
            slot = p % DEPTH
            if MMA:
                for g in range(G):
                    a_at = A_AT + (slot * G + g) * A_STEP
                    b_at = B_AT + ((j * G + g) if RESIDENT else (slot * G + g)) * B_STEP
                    MM.execute(make_tensor(smem[a_at : a_at + SA], MM.suggest_layout_smem_a()),
                               make_tensor(smem[b_at : b_at + SB], MM.suggest_layout_smem_b()), acc)  # fmt: skip
            p += 1
        return p

    return issue, kloop


def conv_stream(cfg: PipeConfig) -> Any:
    """The factory of a block's stream: :func:`make_stream` (gathers), or for a ``TmaConfig``
    ``tensorcore_tma.make_tma_stream`` (tensor copies; the kernel's ``x`` is then the input's tensor map). Both
    make ``(issue, kloop)`` of the same signatures, so that one kernel body serves either."""
    return make_tma_stream if isinstance(cfg, TmaConfig) else make_stream


def stream_bytes(L: PipeLayout, cfg: PipeConfig) -> int:
    """The shared memory a block launches with: the plan's, and for tensor copies their barriers after it."""
    return shared_bytes(L, cfg) if isinstance(cfg, TmaConfig) else L.nbytes


def tensor_copies(shape: ConvShape, cfg: PipeConfig) -> Any:
    """For a ``TmaConfig``, the input's tensor maps (``tensorcore_tma.TensorCopies``: it checks that this GPU has
    tensor copies and that ``shape``'s row tiles are boxes); None for gathers."""
    return TensorCopies(shape, cfg) if isinstance(cfg, TmaConfig) else None


def resident_filters(MM: Matmul, cfg: PipeConfig, n_stages: int, L: PipeLayout) -> Any:
    """A device function ``load(smem, w, col0)`` that starts the copies of every B stage of the block's columns
    (nothing when the filters stream)."""
    _, TN, TK = MM.size
    SB, B_AT, B_STEP, RESIDENT = MM.suggest_layout_smem_b().cosize, L.b, L.b_step, cfg.resident
    gmem_b = gmem_layout(MM, "b")

    @cuda.jit(device=True, forceinline=True)
    def load(smem, w, col0):
        if RESIDENT:
            for s in range(n_stages):
                at = B_AT + s * B_STEP
                copy(make_tensor(w[s * TK : s * TK + TK, col0 : col0 + TN], gmem_b(w.shape[1])),
                     make_tensor(smem[at : at + SB], MM.suggest_layout_smem_b()))  # fmt: skip

    return load


# ------------------------------------------------------------------------------------------------------------
# One convolution: 3x3 or 1x1, with or without bias + ReLU
# ------------------------------------------------------------------------------------------------------------


@functools.cache
def make_pipelined_conv_kernel(
    MM: Matmul, cfg: PipeConfig, taps: int, n_stages: int, fused: bool = True, parts: str = "all"
):
    """out = relu(conv(x, w) + bias) (``fused``) or conv(x, w), a ``taps``-tap convolution (9: 3x3, 1: 1x1).

    Arguments: ``x`` the NHWC input, flat FP16 (with a ``TmaConfig``: its tensor maps, :func:`conv_stream`); ``w``
    the filters as the (taps C_in) x C_out matrix B; ``bias`` (C_out,); ``out`` the (B H W) x C_out result;
    ``height``, ``width``. ``parts``: see :func:`make_stream`.
    """
    TM, TN, _ = MM.size
    THREADS = MM.block_size
    L = conv_layout(MM, cfg, n_stages)
    issue, kloop = conv_stream(cfg)(MM, cfg, taps, n_stages, L, parts)
    load_filters = resident_filters(MM, cfg, n_stages, L)
    MIN_BLOCKS = min_blocks(cfg, stream_bytes(L, cfg))  # registers low enough for the blocks the shared memory allows
    DEPTH, C_AT, IN_RING, A_AT, PHASE_SLOTS = cfg.depth, L.c, L.c_in_ring, L.a, cfg.group * L.a_step
    ROWS = TM // (THREADS // cfg.chunks_per_row)  # rows each thread gathers a stage
    SC = MM.suggest_layout_smem_c().cosize
    FRAGMENT = MM.suggest_layout_rmem_c().cosize
    gmem_c = gmem_layout(MM, "c")

    @cuda.jit(launch_bounds=(THREADS, MIN_BLOCKS))
    def pipelined_conv_kernel(x, w, bias, out, height, width):
        smem = cuda.shared.array(shape=(0,), dtype=np.float16, alignment=1024)
        t0, step, col0 = int32(cuda.blockIdx.x), int32(cuda.gridDim.x), int32(cuda.blockIdx.y) * TN
        tiles = int32(out.shape[0] // TM)
        c_in = int32(w.shape[0] // taps)
        pix = cuda.local.array(ROWS, np.int32)
        inside = cuda.local.array(ROWS, np.int32)
        load_filters(smem, w, col0)  # in the first group
        for p in range(DEPTH - 1):
            issue(smem, x, w, p, t0, step, tiles, col0, c_in, height, width, pix, inside)
        acc = MM.suggest_accumulator()
        p = 0
        tile = t0
        while tile < tiles:
            acc.clear()
            p = kloop(smem, x, w, p, t0, step, tiles, col0, c_in, height, width, pix, inside, acc)
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
            else:  # the last tile's store read sc before the K loop's barriers: sc is free
                c_at = C_AT
            sc = make_tensor(smem[c_at : c_at + SC], MM.suggest_layout_smem_c())
            copy_fragment(part, sc)
            cuda.syncthreads()
            row0 = tile * TM
            copy(sc, make_tensor(out[row0 : row0 + TM, col0 : col0 + TN], gmem_c(out.shape[1])))
            tile += step  # the next K loop refills these slots only after its first barrier: the store is done
        copy_wait()  # the empty groups past the end

    return pipelined_conv_kernel


def one_wave(
    kernel: Any, threads: int, shared_bytes: int, args: tuple[Any, ...], tiles: int, columns: int
) -> tuple[int, dict[str, Any]]:
    """Blocks along x for a persistent kernel: as many as fit on the GPU at once, shared by ``columns`` column
    tiles, at most one per row tile; and what the compiled kernel takes (``launch.resources``: registers, spills,
    blocks an SM)."""
    res = launch.resources(kernel, threads, shared_bytes, *args)
    per_sm = res["blocks_per_sm"]
    if per_sm < 1:
        raise RuntimeError(
            f"the kernel does not fit an SM ({shared_bytes} bytes of shared memory, {threads} "
            "threads): use a PipeConfig with a smaller depth or tile, or streamed filters"
        )
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    return max(1, min(tiles, sms * per_sm // columns)), res


def smem_limit() -> int:
    """Bytes of dynamic shared memory a block may have on this GPU (opted in)."""
    return int(cp.cuda.Device().attributes["MaxSharedMemoryPerBlockOptin"])


def _fits(layout: PipeLayout, cfg: PipeConfig) -> None:
    check_fits(layout, cfg, smem_limit())


class PersistentConv:
    """What the persistent convolution plans share (``PipelinedConv``, ``tensorcore_halo.HaloConv``): the operands'
    checks, one wave of blocks walking the row tiles of each column tile, the launch. A subclass sets ``shape``,
    ``taps``, ``cfg``, ``layout``, ``kernel``, ``grid`` (None), ``max_blocks`` and ``resources``."""

    shape: ConvShape
    taps: int = 9
    cfg: Any
    layout: Any
    kernel: Any
    grid: tuple[int, int] | None
    max_blocks: int | None
    resources: dict[str, Any]
    copies: Any = None  # the input's tensor maps, for a kernel whose A tiles are tensor copies (tensor_copies)

    def source(self, x: Any, w: Any) -> Any:
        """What the kernel reads the input through: the flat array, or the tensor maps of the input and of the
        filters ``w`` (as the kernel's matrix B)."""
        return x.reshape(-1) if self.copies is None else self.copies.map_of(x, w)

    @property
    def shared(self) -> int:
        """The shared memory a block launches with."""
        return self.layout.nbytes if self.copies is None else self.copies.shared(self.layout)

    def __call__(self, x: Any, w: Any, bias: Any, out: Any = None) -> Any:
        s = self.shape
        out = cp.empty((s.batch, s.height, s.width, s.c_out), cp.float16) if out is None else out
        wshape = (3, 3, s.c_in, s.c_out) if self.taps == 9 else (s.c_in, s.c_out)
        shapes = {
            "x": (s.batch, s.height, s.width, s.c_in),
            "w": wshape,
            "bias": (s.c_out,),
            "out": (s.batch, s.height, s.width, s.c_out),
        }
        for name, v in (("x", x), ("w", w), ("bias", bias), ("out", out)):
            require(name, v, np.float16, shapes[name])
        filters = w.reshape(self.taps * s.c_in, s.c_out)
        args = (
            self.source(x, filters),
            filters,
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


class PipelinedConv(PersistentConv):
    """relu(conv(x, w) + bias) (``fused``) or conv(x, w) with the pipelined kernel; ``taps`` 9 (3x3, stride 1,
    padding 1, w of shape (3, 3, C_in, C_out)) or 1 (1x1, w of shape (C_in, C_out)). NHWC FP16 in and out. With a
    ``TmaConfig`` the A tiles are tensor copies (``tensorcore_tma``; Hopper, row tiles that are boxes).

    ``parts`` "gather" or "mma" builds a diagnostic kernel that does only that part of the work (wrong results):
    the benchmarks time them beside the whole kernel. ``blocks`` caps the blocks along x (default: one wave), so
    that a check at a small shape has each block walk several row tiles, as at full size. ``resources`` (after the
    first call): registers, spills, shared memory and blocks an SM of the compiled kernel (``launch.resources``)."""

    def __init__(
        self,
        shape: ConvShape,
        fused: bool = True,
        cfg: PipeConfig | None = None,
        taps: int = 9,
        parts: str = "all",
        blocks: int | None = None,
    ):
        if taps not in (1, 9):
            raise ValueError(f"taps must be 9 (3x3) or 1 (1x1), got {taps}")
        if parts not in PARTS:
            raise ValueError(f"parts must be one of {PARTS}, got {parts!r}")
        self.shape, self.fused, self.taps = shape, fused, taps
        self.cfg = c = cfg or PipeConfig(tile_n=64 if shape.c_out % 64 == 0 else 32)
        self.n_stages = stages(taps, shape.c_in, c.tile_k)
        check_group(c, self.n_stages)
        if shape.c_out % c.tile_n or shape.m % c.tile_m:
            raise ValueError(
                f"C_out = {shape.c_out} and B*H*W = {shape.m} must be multiples of the tile's "
                f"{c.tile_n} and {c.tile_m}: pick another PipeConfig, or pad"
            )
        self.MM = pipe_matmul(c.tile_m, c.tile_n, c.tile_k, c.threads)
        self.layout = conv_layout(self.MM, c, self.n_stages)
        _fits(self.layout, c)
        self.copies = tensor_copies(shape, c)
        self.kernel = make_pipelined_conv_kernel(self.MM, c, taps, self.n_stages, fused, parts)
        self.grid: tuple[int, int] | None = None
        self.max_blocks = blocks
        self.resources: dict[str, Any] = {}


class TmaConv(PipelinedConv):
    """``PipelinedConv`` with its A tiles by tensor copies (``tensorcore_tma``): the same arguments (``taps``,
    ``parts``, ``blocks`` by keyword) and results, ``cfg`` a ``TmaConfig`` (a ``PipeConfig`` is taken over by
    ``layout.with_tensor_copies``, the filters by tensor copies too where they can be; default: the plan's default
    block so taken over)."""

    def __init__(self, shape: ConvShape, fused: bool = True, cfg: PipeConfig | None = None, **kwargs: Any):
        base = cfg or PipeConfig(tile_n=64 if shape.c_out % 64 == 0 else 32)
        super().__init__(shape, fused, base if isinstance(base, TmaConfig) else with_tensor_copies(base), **kwargs)


# ------------------------------------------------------------------------------------------------------------
# Back-to-back: 3x3 convolution + ReLU, then 1x1 convolution + bias + ReLU, D0 kept in the block (notebook 2d)
# ------------------------------------------------------------------------------------------------------------


@functools.cache
def make_conv_b2b_kernel(MM0: Matmul, MM1: Matmul, cfg: PipeConfig, n_stages: int, keep_d0: bool = False):
    """D1 = relu(D0 @ W1 + bias1) with D0 = relu(conv3x3(x, w0)), one TM-row tile at a time, persistent.

    GEMM 0 is the pipelined 3x3 convolution over all C_mid columns (MM0: TM x C_mid, TK a stage); its FP32 result
    becomes FP16 D0 in shared memory, laid out as the A operand of GEMM 1 (MM1: TM x C_out over K = C_mid), whose
    B, the 1x1 filters W1, stays in shared memory. Arguments: ``x`` flat NHWC; ``w0`` (9 C_in) x C_mid; ``w1``
    C_mid x C_out; ``bias1`` (C_out,); ``out`` (B H W) x C_out; ``height``, ``width``; ``d0`` (B H W) x C_mid,
    written only with ``keep_d0``.
    """
    TM, N0, _ = MM0.size
    _, N1, K1 = MM1.size
    THREADS = MM0.block_size
    assert K1 == N0 and MM1.size[0] == TM and MM1.block_size == THREADS
    L = conv_layout(MM0, cfg, n_stages, MM1)
    issue, kloop = conv_stream(cfg)(MM0, cfg, 9, n_stages, L)  # gathers, or tensor copies for a TmaConfig
    load_filters = resident_filters(MM0, cfg, n_stages, L)
    DEPTH, D_AT, W_AT, IN_RING, A_AT, PHASE_SLOTS = cfg.depth, L.d0, L.w1, L.c_in_ring, L.a, cfg.group * L.a_step
    MIN_BLOCKS = min_blocks(cfg, stream_bytes(L, cfg))
    ROWS = TM // (THREADS // cfg.chunks_per_row)
    SC, SD, SW = (MM1.suggest_layout_smem_c().cosize, MM1.suggest_layout_smem_a().cosize,
                  MM1.suggest_layout_smem_b().cosize)  # fmt: skip
    F0, F1 = MM0.suggest_layout_rmem_c().cosize, MM1.suggest_layout_rmem_c().cosize
    gmem_d0, gmem_w1, gmem_out = gmem_layout(MM0, "c"), gmem_layout(MM1, "b"), gmem_layout(MM1, "c")

    @cuda.jit(launch_bounds=(THREADS, MIN_BLOCKS))
    def conv_b2b_kernel(x, w0, w1, bias1, out, height, width, d0):
        smem = cuda.shared.array(shape=(0,), dtype=np.float16, alignment=1024)
        t0, step = int32(cuda.blockIdx.x), int32(cuda.gridDim.x)
        tiles = int32(out.shape[0] // TM)
        c_in = int32(w0.shape[0] // 9)
        pix = cuda.local.array(ROWS, np.int32)
        inside = cuda.local.array(ROWS, np.int32)
        load_filters(smem, w0, 0)
        sw = make_tensor(smem[W_AT : W_AT + SW], MM1.suggest_layout_smem_b())
        copy(make_tensor(w1, gmem_w1(N1)), sw)  # in the first group (with the 3x3 filters, when resident)
        for p in range(DEPTH - 1):
            issue(smem, x, w0, p, t0, step, tiles, 0, c_in, height, width, pix, inside)
        acc0 = MM0.suggest_accumulator()
        acc1 = MM1.suggest_accumulator()
        p = 0
        tile = t0
        while tile < tiles:
            row0 = tile * TM
            acc0.clear()
            p = kloop(smem, x, w0, p, t0, step, tiles, 0, c_in, height, width, pix, inside, acc0)

            # D0 = relu(acc0) in FP16, into shared memory as GEMM 1's A operand: in the slots of the phase the K loop
            # read last, once every warp is past its MMAs there (layout.pipe_layout), else in D0's own buffer (GEMM 1
            # of the last tile finished with it before the K loop's barriers)
            if IN_RING:
                cuda.syncthreads()
                d_at = A_AT + ((p - 1) % DEPTH) * PHASE_SLOTS
            else:
                d_at = D_AT
            sd = make_tensor(smem[d_at : d_at + SD], MM1.suggest_layout_smem_a())
            sc = make_tensor(smem[d_at : d_at + SC], MM1.suggest_layout_smem_c())
            r0 = acc0.get_results()
            d0_tile = make_tensor(cuda.local.array(F0, np.float16), MM0.suggest_layout_rmem_c())
            for i in range(F0):
                # TODO (about 2 lines): d0_tile[i] = relu(r0[i])
                # SKELETON: d0_tile[i] = r0[i]
                # BEGIN SOLUTION
                v = r0[i]
                d0_tile[i] = v if v > 0 else float32(0)
                # END SOLUTION
            # TODO (about 1 line): store this thread's part of D0 into sd
            # BEGIN SOLUTION
            copy_fragment(d0_tile, sd)
            # END SOLUTION
            if keep_d0:
                acc0.partition_and_copy(d0_tile, make_tensor(d0[row0 : row0 + TM, :], gmem_d0(N0)))
            cuda.syncthreads()  # D0 is complete in shared memory

            # GEMM 1 from shared memory, then D1 = relu(acc1 + bias1)
            acc1.clear()
            # TODO (about 1 line): acc1 += D0 @ W1, both operands in shared memory (sd, sw)
            # BEGIN SOLUTION
            MM1.execute(sd, sw, acc1)
            # END SOLUTION
            r1 = acc1.get_results()
            part = make_tensor(cuda.local.array(F1, np.float16), MM1.suggest_layout_rmem_c())
            for i in range(F1):
                # TODO (about 3 lines): part[i] = relu(r1[i] + bias1[c]), c the output channel of element i.
                # acc1.map_fragment_index(i) gives the (row, column) of register element i within the TM x C_out
                # tile (the block's N tile is all of C_out: its column is the channel).
                # SKELETON: part[i] = r1[i]
                # BEGIN SOLUTION
                _, col = acc1.map_fragment_index(i)
                v = r1[i] + float32(bias1[col])
                part[i] = v if v > 0 else float32(0)
                # END SOLUTION
            cuda.syncthreads()  # every warp has read D0: its buffer takes the output tile (layout.pipe_layout)
            copy_fragment(part, sc)
            cuda.syncthreads()
            copy(sc, make_tensor(out[row0 : row0 + TM, :], gmem_out(N1)))
            tile += step
        copy_wait()

    return conv_b2b_kernel


class PersistentB2B:
    """What the back-to-back plans share (``ConvB2B``, ``tensorcore_halo.HaloConvB2B``): the operands' checks, one
    wave of blocks walking the row tiles, the launch, and D0 for the checker. A subclass sets ``shape``, ``cfg``,
    ``keep_d0``, ``layout``, ``kernel``, ``d0``, ``grid`` (None), ``max_blocks`` and ``resources``."""

    shape: B2BShape
    cfg: Any
    keep_d0: bool
    layout: Any
    kernel: Any
    d0: Any
    grid: tuple[int, int] | None
    max_blocks: int | None
    resources: dict[str, Any]
    copies: Any = None  # as PersistentConv's
    source = PersistentConv.source
    shared = PersistentConv.shared

    def __call__(self, x: Any, w0: Any, w1: Any, bias1: Any, out: Any = None) -> Any:
        s = self.shape
        out = cp.empty((s.batch, s.height, s.width, s.c_out), cp.float16) if out is None else out
        shapes = {
            "x": (s.batch, s.height, s.width, s.c_in),
            "w0": (3, 3, s.c_in, s.c_mid),
            "w1": (s.c_mid, s.c_out),
            "bias1": (s.c_out,),
            "out": (s.batch, s.height, s.width, s.c_out),
        }
        for name, v in (("x", x), ("w0", w0), ("w1", w1), ("bias1", bias1), ("out", out)):
            require(name, v, np.float16, shapes[name])
        filters = w0.reshape(9 * s.c_in, s.c_mid)
        args = (
            self.source(x, filters),
            filters,
            w1,
            bias1,
            out.reshape(s.m, s.c_out),
            np.int32(s.height),
            np.int32(s.width),
            self.d0,
        )
        if self.grid is None:
            tiles = s.m // self.cfg.tile_m
            blocks, self.resources = one_wave(self.kernel, self.cfg.threads, self.shared, args, tiles, 1)
            self.grid = (min(blocks, self.max_blocks or blocks), 1)
        launch.launch(self.kernel, self.grid, self.cfg.threads, self.shared, *args)
        return out

    def stages(self) -> dict[str, Any]:
        """``{"d0": D0}`` as NHWC NumPy (with ``keep_d0``), for the checker."""
        s = self.shape
        return {"d0": cp.asnumpy(self.d0).reshape(s.batch, s.height, s.width, s.c_mid)} if self.keep_d0 else {}


class ConvB2B(PersistentB2B):
    """relu(conv1x1(relu(conv3x3(x, w0)), w1) + bias1) in one kernel, D0 kept in the block.

    ``w1`` is the 1x1 filters as a (C_mid, C_out) matrix. ``keep_d0=True`` also writes D0 to ``self.d0`` (NHWC), so
    that a checker can test the first stage on its own. ``kernels``: the attendee's ``Kernels(conv_b2b=...)``.
    ``blocks`` caps the blocks (default: one wave): a check with few blocks has each walk several row tiles.
    ``cfg`` defaults to ``layout.b2b_config``: 64 rows over 256 threads where D0 is wider than 128 channels.
    """

    def __init__(
        self,
        shape: B2BShape,
        cfg: PipeConfig | None = None,
        keep_d0: bool = False,
        kernels: plans.Kernels | None = None,
        blocks: int | None = None,
    ):
        c = cfg or b2b_config(shape.c_mid, shape.c_out)
        if c.tile_n != shape.c_mid:
            raise ValueError(
                f"the tile's N ({c.tile_n}) must be C_mid = {shape.c_mid}: a block computes every "
                "middle channel of its pixels"
            )
        b2b_constraints(shape, c)
        self.shape, self.cfg, self.keep_d0 = shape, c, keep_d0
        self.n_stages = stages(9, shape.c_in, c.tile_k)
        check_group(c, self.n_stages)
        self.MM0 = pipe_matmul(c.tile_m, shape.c_mid, c.tile_k, c.threads)
        self.MM1 = pipe_matmul(c.tile_m, shape.c_out, shape.c_mid, c.threads)
        self.layout = conv_layout(self.MM0, c, self.n_stages, self.MM1)
        _fits(self.layout, c)
        self.copies = tensor_copies(shape.first, c)  # a TmaConfig: the 3x3's A tiles by tensor copies
        # the track's Kernels (utilities.conv.tensorcore) names this module's kernel as the course's conv_b2b
        factory = kernels.factory("conv_b2b") if kernels is not None else make_conv_b2b_kernel
        self.kernel = factory(self.MM0, self.MM1, c, self.n_stages, keep_d0)
        d0_rows = shape.m if keep_d0 else c.tile_m
        self.d0 = cp.zeros((d0_rows, shape.c_mid), cp.float16)
        self.grid: tuple[int, int] | None = None
        self.max_blocks = blocks
        self.resources: dict[str, Any] = {}


class UnfusedConvB2B:
    """The same chain in two kernels, D0 through global memory: the pipelined 3x3 convolution with ReLU (a zero
    bias: ``relu(acc + 0)`` is ``relu(acc)`` exactly), then the pipelined 1x1 convolution with bias1 and ReLU.
    ``conv3``: another plan of the fused 3x3 convolution at ``shape.first`` (the halo kernel's, say) instead."""

    def __init__(self, shape: B2BShape, cfg: PipeConfig | None = None, conv3: Any = None):
        self.shape = s = shape
        second = ConvShape(s.batch, s.height, s.width, s.c_mid, s.c_out)
        self.conv3 = conv3 if conv3 is not None else PipelinedConv(s.first, cfg=cfg)
        # the 1x1 kernel (gathers): the 3x3's block where that is a pipelined one, else the plan's default
        block = self.conv3.cfg if isinstance(self.conv3.cfg, PipeConfig) else PipeConfig()
        self.conv1 = PipelinedConv(second, cfg=one_by_one_config(block, s.c_mid, s.c_out), taps=1)
        self.zero = cp.zeros(s.c_mid, cp.float16)
        self.d0 = cp.empty((s.batch, s.height, s.width, s.c_mid), cp.float16)

    def __call__(self, x: Any, w0: Any, w1: Any, bias1: Any, out: Any = None) -> Any:
        self.conv3(x, w0, self.zero, out=self.d0)
        return self.conv1(self.d0, w1, bias1, out=out)

"""The pipelined implicit GEMM's configuration and shared-memory plan (plain Python, no GPU).

``utilities.conv.tensorcore_persistent`` runs the convolution as a stream of K stages per block: a stage is TK
input channels of one tap (A gathered by 16-byte asynchronous copies, zeros for the padding) and the matching
TK x TN block of the filters. ``PipeConfig`` says how: the block's tile (TM pixels by TN output channels, TK
channels a stage), its threads, how many *phases* are in the ring (``depth``: the one the tensor cores work on and
``depth - 1`` in flight), how many stages make a phase (``group``: one wait and one barrier per phase, track 1's
pass groups), and whether the block's filters stay in shared memory while it walks its tiles (``resident``) or
stream with A, one stage at a time.

:func:`pipe_layout` places every buffer on a 1 KiB boundary (``utilities.smem``) and says where the plan ends;
the plans check the total against the GPU's limit per block. The shared memory a block takes decides how many
blocks share an SM (:func:`blocks_per_sm`), and with mma.sync that decides how much of the gathers' and barriers'
latency other warps hide: ``instructor-notes/conv.md`` has the arithmetic, :func:`speed_configs` the settings the
speed run measures.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..plans import TileConfig
from ..smem import fp16_segments
from .reference import B2BShape

SWIZZLED_TK = (32, 64)  # the A layout's swizzle was measured for these (utilities.machinery.swizzle)
SMEM_LIMIT = 227 * 1024  # bytes a block may have on sm_90 (sm_80: 163 KiB); the plans ask the GPU itself
SMEM_PER_SM = 228 * 1024  # bytes of shared memory an sm_90 SM shares among its blocks
SMEM_RESERVED = 1024  # bytes the system keeps per block on sm_80 and later
REGISTERS_PER_SM = 65536
REGISTER_FLOOR = 128  # registers a thread keeps at least when the launch bounds cap them (see min_blocks)
B2B_BLOCKS = 3  # the back-to-back block's: four fit its 56 KiB, and left L1 28 KiB (instructor-notes/conv.md)
B2B_ACCUMULATOR_MAX = 128  # FP32 values a thread may hold for one GEMM of the back-to-back kernel (see b2b_config)
_SPEC = re.compile(r"^(\d+)x(\d+)x(\d+)-t(\d+)-d(\d+)-g(\d+)-([rs])(?:-b(\d+))?$")


@dataclass(frozen=True, kw_only=True)
class PipeConfig(TileConfig):
    """The block of the pipelined implicit GEMM: tile, threads, ring depth (phases), stages a phase, resident B."""

    tile_n: int = 64
    depth: int = 2  # measured faster than 3 at the target (speed_configs says why)
    group: int = 1
    resident: bool = False  # the default streams the filters: four blocks share an SM (speed_configs says why)
    blocks: int = 0  # blocks an SM the launch bounds ask for; 0: as min_blocks decides (a spec's "-bN" sets it)

    def __post_init__(self) -> None:
        if self.tile_k not in SWIZZLED_TK:
            raise ValueError(
                f"tile_k must be one of {SWIZZLED_TK} (the A swizzle was measured for these), got {self.tile_k}"
            )
        if self.tile_m not in (64, 128, 256) or self.tile_n % 16 or not 16 <= self.tile_n <= 256:
            raise ValueError(
                f"tile_m must be 64, 128 or 256 and tile_n a multiple of 16 up to 256, got "
                f"{self.tile_m} x {self.tile_n}"
            )
        if self.threads not in (128, 256):
            raise ValueError(f"threads must be 128 or 256, got {self.threads}")
        if not 2 <= self.depth <= 8:
            raise ValueError(f"depth must be 2 to 8 phases (one in use, the others in flight), got {self.depth}")
        if self.group < 1:
            raise ValueError(f"group must be at least 1 stage a phase, got {self.group}")
        if not 0 <= self.blocks <= 8:
            raise ValueError(f"blocks must be 1 to 8 blocks an SM, or 0 (min_blocks decides), got {self.blocks}")

    @property
    def chunks_per_row(self) -> int:
        """16-byte chunks in a row of an A stage (8 FP16 channels each)."""
        return self.tile_k // 8

    @property
    def loads_per_thread(self) -> int:
        """16-byte copies each thread issues for one A stage."""
        return self.tile_m * self.chunks_per_row // self.threads

    @property
    def spec(self) -> str:
        """A short name, e.g. ``128x64x64-t128-d3-g1-r`` (``r``: resident filters, ``s``: streamed)."""
        return (
            f"{self.tile_m}x{self.tile_n}x{self.tile_k}-t{self.threads}-d{self.depth}-g{self.group}-"
            f"{'r' if self.resident else 's'}" + (f"-b{self.blocks}" if self.blocks else "")
        )

    @classmethod
    def parse(cls, spec: str) -> PipeConfig:
        """The inverse of :attr:`spec`."""
        match = _SPEC.match(spec.strip())
        if not match:
            raise ValueError(
                f"a tile spec looks like 128x64x64-t128-d3-g1-r (TMxTNxTK, threads, depth, group, "
                f"r = resident filters or s = streamed, then -bN to ask for N blocks an SM), got {spec!r}"
            )
        tm, tn, tk, threads, depth, group = (int(v) for v in match.groups()[:6])
        return cls(
            tile_m=tm,
            tile_n=tn,
            tile_k=tk,
            threads=threads,
            depth=depth,
            group=group,
            resident=match.group(7) == "r",
            blocks=int(match.group(8) or 0),
        )


PARTS = ("all", "gather", "mma")  # a kernel's work; "gather" and "mma" alone are diagnostics (wrong results)
TMA_PREFIX = "tma"


@dataclass(frozen=True, kw_only=True)
class TmaConfig(PipeConfig):
    """The block of the pipelined kernel whose A stages are tensor copies (``tensorcore_tma``): :class:`PipeConfig`'s
    fields, and ``filter_copies``: the streamed filters' stages by tensor copies too (else by ``cp.async``, every
    thread a share). Its spec says which kernel, e.g. ``tma128x64x64-t128-d2-g1-s`` (``-w`` at the end: the filters
    too)."""

    filter_copies: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.filter_copies and self.resident:
            raise ValueError("filter_copies streams the filters by tensor copies: use streamed filters (s), not r")

    @property
    def spec(self) -> str:
        return TMA_PREFIX + super().spec + ("-w" if self.filter_copies else "")

    @classmethod
    def parse(cls, spec: str) -> TmaConfig:
        """The inverse of :attr:`spec`."""
        text = spec.strip()
        if not text.startswith(TMA_PREFIX):
            raise ValueError(
                f"a tensor-copy tile spec starts with {TMA_PREFIX!r}, e.g. tma128x64x64-t128-d2-g1-s, got {spec!r}"
            )
        filters = text.endswith("-w")
        base = PipeConfig.parse(text[len(TMA_PREFIX) : len(text) - 2 if filters else len(text)])
        return cls(**{f: getattr(base, f) for f in base.__dataclass_fields__}, filter_copies=filters)


# (tile_k, tile_n) of the filters' stages that a plan's default fetches by tensor copies: those whose suggested
# shared-memory layout was measured to be the swizzle the copies write (tools/smem_layout_probe.py --operand b)
FILTER_COPY_STAGES = ((64, 64),)


def with_tensor_copies(cfg: PipeConfig) -> TmaConfig:
    """``cfg``'s block on tensor copies: its A stages, and its streamed filters' stages too where their layout is
    one of :data:`FILTER_COPY_STAGES` (the faster kernel where both were measured: instructor-notes/conv.md)."""
    fields = {f: getattr(cfg, f) for f in PipeConfig.__dataclass_fields__}
    filters = not cfg.resident and (cfg.tile_k, cfg.tile_n) in FILTER_COPY_STAGES
    return TmaConfig(**fields, filter_copies=filters)


def stages(taps: int, c_in: int, tile_k: int) -> int:
    """K stages of one tile: ``taps`` times ``c_in / tile_k`` (a stage never spans two taps)."""
    if c_in % tile_k:
        raise ValueError(
            f"C_in = {c_in} is not a multiple of the K stage {tile_k}: pad the channels with zeros, or use tile_k = 32"
        )
    return taps * c_in // tile_k


def check_group(cfg: PipeConfig, n_stages: int) -> None:
    """A phase holds ``group`` stages of one tile: the group must divide the tile's stages."""
    if n_stages % cfg.group:
        raise ValueError(
            f"group = {cfg.group} does not divide the {n_stages} K stages of a tile: use a divisor "
            f"({', '.join(str(g) for g in range(1, n_stages + 1) if n_stages % g == 0)})"
        )


@dataclass(frozen=True)
class PipeLayout:
    """FP16 offsets in dynamic shared memory: the A ring (``depth * group`` slots), the filters (every stage when
    resident, else a ring like A's), the output tile, and, for back-to-back, D0 (in the output tile's buffer) and
    the 1x1 filters W1.

    ``c == -1``: the output tile (and D0, ``d0 == -1`` then too) has no buffer of its own; it is staged in the A
    slots of the phase the tile's K loop read last (free once every warp is past its last MMA, and refilled only
    after the next tile's first barrier)."""

    a: int
    a_step: int
    b: int
    b_step: int
    c: int
    d0: int
    w1: int
    end: int

    @property
    def nbytes(self) -> int:
        return 2 * self.end

    @property
    def c_in_ring(self) -> bool:
        """Whether the output tile is staged in the A ring (no buffer of its own)."""
        return self.c < 0


def pipe_layout(cfg: PipeConfig, n_stages: int, sa: int, sb: int, sc: int, sd: int = 0, sw: int = 0) -> PipeLayout:
    """Where each buffer starts; ``sa``, ``sb``, ``sc`` (and ``sd``, ``sw``) are the FP16 sizes of an A stage, a B
    stage, the output tile (D0's tile and W1) in the layouts cuBLASDx suggests (their ``cosize``).

    The epilogue stages its output tile (the back-to-back kernel: D0, then the output tile where D0 was, one barrier
    after GEMM 1 has read it) in the A slots of the phase the K loop read last, where they hold it (``group`` slots
    of an A stage, contiguous); else in a buffer of its own. W1 always has its own."""
    slots = cfg.depth * cfg.group
    b_slots = n_stages if cfg.resident else slots
    a_slot = fp16_segments(sa)[1]  # an A slot with its alignment
    staged = max(sc, sd)
    in_ring = cfg.group * a_slot >= staged
    if in_ring:
        own = [sw] if sd else []  # buffers outside the rings
    elif sd:
        own = [staged, sw]
    else:
        own = [sc]
    offsets, end = fp16_segments(*([sa] * slots), *([sb] * b_slots), *own)
    a_step = offsets[1] - offsets[0] if slots > 1 else 0
    b0 = offsets[slots]
    b_step = offsets[slots + 1] - b0 if b_slots > 1 else 0
    c = -1 if in_ring else offsets[slots + b_slots]
    d0, w1 = (c, offsets[-1]) if sd else (-1, -1)
    return PipeLayout(offsets[0], a_step, b0, b_step, c, d0, w1, end)


def blocks_per_sm(nbytes: int, per_sm: int = SMEM_PER_SM) -> int:
    """Blocks of ``nbytes`` of dynamic shared memory that fit on one SM together (the driver's count also weighs
    registers and threads: ``launch.resources``)."""
    return per_sm // (nbytes + SMEM_RESERVED)


def min_blocks(cfg: PipeConfig, nbytes: int) -> int:
    """The launch bounds' minimum blocks per SM: as many as the shared memory lets share an SM, but never so many
    that a thread would get fewer than ``REGISTER_FLOOR`` registers. ptxas then keeps the kernel's registers low
    enough for that many blocks, and the shared memory, not the registers, sets the occupancy. A 128 x 64 FP32
    accumulator over 128 threads is 64 registers a thread; cuBLASDx's operand fragments and the copies' addresses
    come on top. The floor was 160, a margin; at 128 the 3x3 kernel (four blocks an SM) and the wide back-to-back
    kernel (two) ran without spills and faster than at 160 (instructor-notes/conv.md, the candidates measured).

    ``cfg.blocks`` overrides the floor: the launch bounds ask for that many blocks (at most what the shared memory
    allows), whatever registers it leaves a thread."""
    if cfg.blocks:
        return max(1, min(blocks_per_sm(nbytes), cfg.blocks))
    by_registers = REGISTERS_PER_SM // (cfg.threads * REGISTER_FLOOR)
    return max(1, min(blocks_per_sm(nbytes), by_registers))


def check_fits(layout: PipeLayout, cfg: PipeConfig, limit: int = SMEM_LIMIT) -> None:
    """ValueError, naming the fix, when the plan needs more shared memory than a block may have."""
    if layout.nbytes > limit:
        fix = "stream the filters (s)" if cfg.resident else "a smaller depth or group"
        raise ValueError(
            f"tile {cfg.spec} needs {layout.nbytes // 1024} KiB of shared memory, a block may have "
            f"{limit // 1024} KiB: use {fix}, or a smaller tile_m"
        )


def speed_configs() -> list[PipeConfig]:
    """The settings the speed run measures at the target shape (64 -> 64 channels), the plan's default first.

    The same 128 x 64 x 64 tile and 128 threads, so that what changes is how many blocks share an SM
    (:func:`blocks_per_sm`) and where the filters live; instructor-notes/conv.md has the arithmetic:

    - ``128x64x64-t128-d2-g1-s`` (the default): filters streamed with A, the output staged in the ring, a ring of
      two phases: 48 KiB, four blocks an SM (sixteen warps), 128 registers a thread by the launch bounds. With
      mma.sync each warp issues its own gathers and its own MMAs, so other blocks' warps are what hides a stage's
      waits and barriers; a phase in flight is enough once four blocks share an SM;
    - ``128x64x64-t128-d2-g1-s-b3``: the same at three blocks an SM (twelve warps, up to 170 registers): the default
      until the floor went from 160 registers to 128;
    - ``128x64x64-t128-d3-g1-s``: a ring of three (72 KiB, three blocks an SM);
    - ``128x64x64-t128-d2-g1-r``: the filters resident (72 KiB of them), a ring of two: 104 KiB, two blocks an SM.
    """
    specs = (
        "128x64x64-t128-d2-g1-s",
        "128x64x64-t128-d2-g1-s-b3",
        "128x64x64-t128-d3-g1-s",
        "128x64x64-t128-d2-g1-r",
    )
    return [PipeConfig.parse(s) for s in specs]


def one_by_one_config(block: PipeConfig, c_mid: int, c_out: int) -> PipeConfig:
    """The unfused back-to-back path's 1x1 kernel: the 3x3 kernel's rows and threads, K stages and N as wide as the
    channels allow (64 or 32), and a ring of three, the setting it was measured with (it has one or a few K stages
    a tile, so its ring runs across tiles)."""
    return PipeConfig(
        tile_m=block.tile_m,
        tile_n=64 if c_out % 64 == 0 else 32,
        tile_k=64 if c_mid % 64 == 0 else 32,
        threads=block.threads,
        depth=3,
    )


# ------------------------------------------------------------------------------------------------------------
# The back-to-back kernel's block (notebook 2d): a whole row tile of D0 and of D1 in the block's accumulators
# ------------------------------------------------------------------------------------------------------------


def b2b_accumulators(cfg: PipeConfig, channels: int) -> int:
    """FP32 accumulator values a thread holds for a TM x ``channels`` GEMM of the back-to-back kernel."""
    return cfg.tile_m * channels // cfg.threads


# A D0 too wide for the default block's accumulators: 64 rows over 256 threads and K stages of 32 (as the 2d check's
# second block, ``check.CONV_B2B_CONFIGS``) and a ring of two, so that a 256-wide D0 costs 64 values a thread, as
# the target's 128 x 64 over 128 threads does, and the plan fits two blocks an SM (104 KiB)
WIDE_B2B_FIELDS = {"tile_m": 64, "tile_k": 32, "threads": 256, "depth": 2}


def b2b_config(c_mid: int, c_out: int) -> PipeConfig:
    """The back-to-back plan's default block: the pipelined convolution's default with N = C_mid while both
    accumulators fit :data:`B2B_ACCUMULATOR_MAX` values a thread (C_mid and C_out up to 128), else
    :data:`WIDE_B2B_FIELDS`. It asks for :data:`B2B_BLOCKS` blocks an SM."""
    cfg = PipeConfig(tile_n=c_mid, blocks=B2B_BLOCKS)
    if max(b2b_accumulators(cfg, c) for c in (c_mid, c_out)) <= B2B_ACCUMULATOR_MAX:
        return cfg
    return PipeConfig(tile_n=c_mid, **WIDE_B2B_FIELDS)


def b2b_constraints(shape: B2BShape, cfg: PipeConfig) -> None:
    """ValueError, naming the fix, for back-to-back convolutions the fused kernel cannot hold in one block."""
    for name, c in (("C_mid", shape.c_mid), ("C_out", shape.c_out)):
        if c % 32 or c > 256:
            raise ValueError(
                f"{name} = {c} must be a multiple of 32 up to 256: a block holds a whole row tile of D0 "
                "(TM x C_mid) and of D1 (TM x C_out); use the unfused path (UnfusedConvB2B) for wider layers"
            )
        if b2b_accumulators(cfg, c) > B2B_ACCUMULATOR_MAX:
            raise ValueError(
                f"{name} = {c} over {cfg.tile_m} rows is {b2b_accumulators(cfg, c)} FP32 accumulators a thread "
                f"of {cfg.threads} (at most {B2B_ACCUMULATOR_MAX}): use fewer rows or more threads, e.g. "
                f"{b2b_config(shape.c_mid, shape.c_out).spec}"
            )
    if shape.m % cfg.tile_m:
        raise ValueError(
            f"B*H*W = {shape.m} is not a multiple of the row tile {cfg.tile_m}: pad the batch with a "
            "zero image, or pick another tile_m"
        )

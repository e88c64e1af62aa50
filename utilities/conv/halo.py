"""The halo kernel's block and shared-memory plan (plain Python, no GPU).

``utilities.conv.tensorcore_halo`` reads each row tile's neighbourhood of the input once, into shared memory, and
runs the nine taps' GEMMs on windows of it, where the pipelined kernel gathers every tap's A tile from L2 apart.
A row tile is TM output pixels of one image row (the image width a multiple of TM); its *halo* is the three input
rows around it, TM + 2 pixels wide (one of padding, or of the neighbouring tile, at each end), TK channels at a
time. A halo pixel's channels are followed by 8 unused FP16 values (:data:`PAD`), so that the eight rows an
``ldmatrix`` reads at once start in eight different bank groups; tap (r, s)'s A tile is then the TM x TK matrix
that starts at halo row r, pixel s, with leading dimension TK + 8. The filter stages are padded the same way
(leading dimension TN + 8): cuBLASDx takes the operands of one GEMM all in its suggested (swizzled) layouts or all
in plain ones.

Per block: two halo buffers (the tile's next channel chunk, or the next tile, is copied while the tensor cores run
nine GEMMs on the current one), every stage of the block's filters (resident), and the output tile in FP32, in the
halo buffer the tile's last phase read where it fits.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..plans import TileConfig
from ..smem import fp16_segments
from .reference import B2BShape, ConvShape

PAD = 8  # FP16 values after a halo pixel's channels: 16 bytes, so that consecutive pixels start 16 bytes apart mod 128
TAPS = 9
SMEM_LIMIT = 227 * 1024  # bytes a block may have on sm_90; the plan asks the GPU itself
_SPEC = re.compile(r"^h(\d+)x(\d+)x(\d+)-t(\d+)$")
# The kernel's checks on a GPU (tests/test_conv_gpu.py, the speed run's ``benchmarks.halo_correctness``): two
# column tiles, every row tile holding both ends of an image row, the top and bottom rows of two images; two halos
# a tile (32 columns: C_in = 128 with 64 would not fit its resident filters); a 64-pixel tile, whose halo reaches
# into the row's other tile. (shape, HaloConfig fields); each kernel is a job of ``prebuild.HALO_JOBS``.
HALO_CHECKS = (
    (ConvShape(2, 5, 128, 64, 128), None),
    (ConvShape(2, 4, 128, 128, 64), {"tile_n": 32}),
    (ConvShape(2, 4, 128, 64, 64), {"tile_m": 64}),
)
# The back-to-back kernel's checks: the target's channels, and a D1 twice as wide at 64-pixel tiles (its FP32 tile
# then needs a buffer of its own). Each with D0 kept and without: jobs of ``prebuild.HALO_JOBS``.
HALO_B2B_CHECKS = (
    (B2BShape(2, 5, 128, 64, 64, 64), None),
    (B2BShape(2, 4, 128, 64, 64, 128), {"tile_m": 64}),
)


@dataclass(frozen=True, kw_only=True)
class HaloConfig(TileConfig):
    """The halo kernel's block: TM pixels of one image row by TN output channels, TK input channels a halo."""

    tile_n: int = 64
    threads: int = 256

    def __post_init__(self) -> None:
        if self.tile_k not in (32, 64):
            raise ValueError(f"tile_k must be 32 or 64 channels a halo, got {self.tile_k}")
        if self.tile_m not in (64, 128) or self.tile_n is None or self.tile_n % 16 or not 16 <= self.tile_n <= 128:
            raise ValueError(
                f"tile_m must be 64 or 128 and tile_n a multiple of 16 up to 128, got {self.tile_m} x {self.tile_n}"
            )
        if self.threads not in (128, 256):
            raise ValueError(f"threads must be 128 or 256, got {self.threads}")

    @property
    def halo_width(self) -> int:
        """Pixels in a halo row: the tile's and one beyond each end."""
        return self.tile_m + 2

    @property
    def ld(self) -> int:
        """FP16 values from one halo pixel to the next (the A windows' leading dimension)."""
        return self.tile_k + PAD

    @property
    def ld_b(self) -> int:
        """FP16 values from one row of a filter stage (TK x TN) to the next in shared memory."""
        return self.tile_n + PAD

    @property
    def halo_size(self) -> int:
        """FP16 values of one halo buffer."""
        return 3 * self.halo_width * self.ld

    @property
    def copies(self) -> int:
        """16-byte copies that fill one halo."""
        return 3 * self.halo_width * self.tile_k // 8

    @property
    def spec(self) -> str:
        """A short name, e.g. ``h128x64x64-t256``."""
        return f"h{self.tile_m}x{self.tile_n}x{self.tile_k}-t{self.threads}"

    @classmethod
    def parse(cls, spec: str) -> HaloConfig:
        """The inverse of :attr:`spec`."""
        match = _SPEC.match(spec.strip())
        if not match:
            raise ValueError(f"a halo tile spec looks like h128x64x64-t256 (TMxTNxTK, threads), got {spec!r}")
        tm, tn, tk, threads = (int(v) for v in match.groups())
        return cls(tile_m=tm, tile_n=tn, tile_k=tk, threads=threads)


@dataclass(frozen=True)
class HaloLayout:
    """FP16 offsets in dynamic shared memory: the two halo buffers, every filter stage, the output tile.

    ``c == -1``: the FP32 output tile has no buffer of its own; it is staged in the halo buffer the tile's last
    phase read (free once every warp is past its GEMMs, and refilled only after the next phase's barrier)."""

    halo: int
    halo_step: int
    b: int
    b_step: int
    c: int
    end: int

    @property
    def nbytes(self) -> int:
        return 2 * self.end

    @property
    def c_in_halo(self) -> bool:
        return self.c < 0


def chunks(c_in: int, cfg: HaloConfig) -> int:
    """Halos of a row tile: C_in / TK (a tile's K loop is ``chunks`` x 9 stages)."""
    if c_in % cfg.tile_k:
        raise ValueError(
            f"C_in = {c_in} is not a multiple of the halo's {cfg.tile_k} channels: pad the channels with zeros, "
            "or use tile_k = 32"
        )
    return c_in // cfg.tile_k


def halo_layout(cfg: HaloConfig, n_chunks: int, sb: int, sc: int) -> HaloLayout:
    """Where each buffer starts; ``sb`` and ``sc`` are the sizes, in FP16 places, of a filter stage in the kernel's
    plain layout (its ``cosize``) and of the FP32 output tile (2 TM TN). The output tile goes in a halo buffer when
    it fits there (:class:`HaloLayout`)."""
    stages = TAPS * n_chunks
    in_halo = sc <= cfg.halo_size
    offsets, end = fp16_segments(cfg.halo_size, cfg.halo_size, *([sb] * stages), *([] if in_halo else [sc]))
    b_step = offsets[3] - offsets[2] if stages > 1 else 0
    c = -1 if in_halo else offsets[-1]
    return HaloLayout(offsets[0], offsets[1] - offsets[0], offsets[2], b_step, c, end)


def spreads(rows: int, channels: int, threads: int) -> bool:
    """Whether a rows x channels tile's 8-channel units spread evenly over the threads, each thread keeping one unit
    of the rows it handles (the epilogue's and D0's copies, ``simt.make_epilogue``)."""
    units = channels // 8
    return channels % 8 == 0 and threads % units == 0 and rows % (threads // units) == 0


def halo_constraints(
    shape: ConvShape, cfg: HaloConfig, layout: HaloLayout | HaloB2BLayout, limit: int = SMEM_LIMIT
) -> None:
    """ValueError, naming the fix, for shapes and tiles the halo kernel cannot take."""
    if not spreads(cfg.tile_m, cfg.tile_n, cfg.threads):
        raise ValueError(
            f"a {cfg.tile_m} x {cfg.tile_n} output tile does not spread over {cfg.threads} threads by 8-channel "
            "units of whole rows: use tile_n 16, 32, 64 or 128"
        )
    if shape.width % cfg.tile_m:
        raise ValueError(
            f"width = {shape.width} is not a multiple of the row tile's {cfg.tile_m} pixels: a halo tile lies in "
            "one image row; use tile_m = 64, or the pipelined kernel (PipelinedConv), which takes any width"
        )
    if shape.c_out % cfg.tile_n:
        raise ValueError(f"C_out = {shape.c_out} must be a multiple of the tile's {cfg.tile_n} columns: pick tile_n")
    if layout.nbytes > limit:
        raise ValueError(
            f"tile {cfg.spec} at C_in = {shape.c_in} needs {layout.nbytes // 1024} KiB of shared memory (its "
            f"filters stay resident), a block may have {limit // 1024} KiB: use a narrower tile_n, or the "
            "pipelined kernel with streamed filters"
        )


@dataclass(frozen=True)
class HaloB2BLayout:
    """The back-to-back kernel's plan (FP16 offsets): the conv's halo buffers and filters, the 1x1 filters W1, and
    the FP32 output tile. D0 (GEMM 1's A) sits at the start of the halo buffer a tile's last phase read; the output
    tile beside it at ``c`` from that buffer's start when ``c_in_halo``, else at ``c`` in a buffer of its own."""

    halo: int
    halo_step: int
    b: int
    b_step: int
    w1: int
    c: int
    c_in_halo: bool
    end: int

    @property
    def nbytes(self) -> int:
        return 2 * self.end


def halo_b2b_layout(cfg: HaloConfig, n_chunks: int, sb: int, sw: int, sd: int, sc: int) -> HaloB2BLayout:
    """``sb``, ``sw``, ``sd``: the plain layouts' sizes (FP16 places) of a 3x3 filter stage, of W1 and of D0;
    ``sc``: the FP32 output tile's (2 TM C_out)."""
    stages = TAPS * n_chunks
    _, beside_d0 = fp16_segments(sd)  # the output tile after D0, on a 1 KiB boundary
    in_halo = beside_d0 + sc <= cfg.halo_size
    offsets, end = fp16_segments(cfg.halo_size, cfg.halo_size, *([sb] * stages), sw, *([] if in_halo else [sc]))
    b_step = offsets[3] - offsets[2] if stages > 1 else 0
    c = beside_d0 if in_halo else offsets[-1]
    return HaloB2BLayout(offsets[0], offsets[1] - offsets[0], offsets[2], b_step, offsets[2 + stages], c, in_halo, end)


def halo_b2b_constraints(
    shape: B2BShape, cfg: HaloConfig, layout: HaloB2BLayout, sd: int, limit: int = SMEM_LIMIT
) -> None:
    """ValueError, naming the fix, for back-to-back chains the halo kernel cannot hold."""
    if cfg.tile_n != shape.c_mid:
        raise ValueError(
            f"the tile's N ({cfg.tile_n}) must be C_mid = {shape.c_mid}: a block computes every middle channel of "
            "its pixels"
        )
    if shape.c_out % 32 or shape.c_out > 128 or not spreads(cfg.tile_m, shape.c_out, cfg.threads):
        raise ValueError(f"C_out = {shape.c_out} must be 32, 64 or 128: use ConvB2B")
    if sd > cfg.halo_size:
        raise ValueError(f"D0 ({sd} FP16 places) does not fit a halo buffer: use ConvB2B")
    halo_constraints(shape.first, cfg, layout, limit)

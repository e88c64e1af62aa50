"""The multi-pass configuration: passes, phases, and what a problem must satisfy to run (plain Python).

A *pass* is one tensor-core MMA step of depth ``PK`` over a block tile (PK = 32 for int8, 16 for FP16). A block
tile's K extent of ``N * PK`` is processed as N passes; fusing F passes loads the operands of F passes (one
*phase*) into shared memory before one ``Matmul`` of depth ``F * PK`` consumes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ..plans import TileConfig

DTYPES = ("int8", "float16")
PASS_K = {"int8": 32, "float16": 16}  # the K depth of one MMA step over the block tile
ACCUMULATOR = {"int8": np.int32, "float16": np.float32}
ITEMSIZE = {"int8": 1, "float16": 2}
SMEM_PER_BLOCK = 227 * 1024  # largest dynamic shared memory per block (sm_90; sm_80 has 163 KiB)
INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class PassConfig(TileConfig):
    """One multi-pass tile GEMM: ``passes`` (N) passes per block tile, ``fused`` (F) of them per phase.

    ``PassConfig("int8", fused=2, tile_m=64)``: the dtype, N and F may be given in that order, the tile by keyword;
    ``tile_k`` follows from N (N passes of the dtype's MMA depth).
    """

    dtype: str = "int8"
    passes: int = 8
    fused: int = 1
    threads: int = field(default=256, kw_only=True)
    tile_k: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.passes not in (1, 2, 4, 8, 16):
            raise ValueError(f"passes (N) must be 1, 2, 4, 8 or 16, got {self.passes}")
        if self.fused < 1 or self.passes % self.fused:
            raise ValueError(f"fused passes F = {self.fused} must divide N = {self.passes}: use F in 1, 2, 4 ... N")
        if self.tile_m % 64 or self.tile_n % 64 or self.threads % 128:
            raise ValueError("tile_m and tile_n must be multiples of 64 and threads a multiple of 128")
        if self.smem_bytes > SMEM_PER_BLOCK:
            raise ValueError(
                f"F = {self.fused} needs {self.smem_bytes // 1024} KiB of shared memory (two {self.phase_k}-deep "
                f"buffers of A and B), more than the {SMEM_PER_BLOCK // 1024} KiB a block may have: use a smaller "
                "F or tile"
            )
        object.__setattr__(self, "tile_k", self.passes * self.pass_k)  # K extent of a block tile: N passes

    @property
    def pass_k(self) -> int:
        return PASS_K[self.dtype]

    @property
    def phase_k(self) -> int:
        """K depth of one phase: the F fused passes, one ``Matmul`` of this depth."""
        return self.fused * self.pass_k

    @property
    def full_fusion(self) -> bool:
        return self.fused == self.passes

    @property
    def smem_bytes(self) -> int:
        """Two buffers (double buffering) of one phase of A (tile_m x phase_k) and B (tile_n x phase_k)."""
        return 2 * (self.tile_m + self.tile_n) * self.phase_k * ITEMSIZE[self.dtype]

    def with_fused(self, fused: int) -> PassConfig:
        return replace(self, fused=fused)

    def describe(self) -> str:
        full = " (full fusion)" if self.full_fusion else ""
        return (
            f"{self.dtype} {self.tile_m}x{self.tile_n} tile, N = {self.passes} passes of {self.pass_k}, "
            f"F = {self.fused}{full}: {self.phase_k}-deep phases, {self.smem_bytes // 1024} KiB shared, "
            f"{self.threads} threads"
        )


def validate_problem(m: int, n: int, k: int, cfg: PassConfig) -> int:
    """Check that the kernel of ``cfg`` can run an ``m x n x k`` product; return the number of phases."""
    for label, v in (("m", m), ("n", n), ("k", k)):
        if isinstance(v, bool) or not isinstance(v, int | np.integer) or v <= 0:
            raise ValueError(f"{label} must be a positive integer, got {v!r}")
    if m % cfg.tile_m or n % cfg.tile_n:
        raise ValueError(
            f"m = {m} and n = {n} must be multiples of the {cfg.tile_m} x {cfg.tile_n} tile: pad A and B with zero "
            f"rows to {-(-m // cfg.tile_m) * cfg.tile_m} x {-(-n // cfg.tile_n) * cfg.tile_n}"
        )
    if k % cfg.phase_k:
        raise ValueError(
            f"k = {k} must be a multiple of the phase depth F * PK = {cfg.fused} * {cfg.pass_k} = {cfg.phase_k}: "
            f"pad A and B with zero columns to k = {-(-k // cfg.phase_k) * cfg.phase_k}"
        )
    phases = k // cfg.phase_k
    if phases < 2:
        raise ValueError(f"k = {k} is a single phase of {cfg.phase_k}: the double buffer needs k >= {2 * cfg.phase_k}")
    if cfg.dtype == "int8" and k * 128 * 128 > INT32_MAX:
        raise ValueError(f"k = {k}: sums of k int8 products may overflow int32; use k <= {INT32_MAX // 16384}")
    return phases


def phase_offsets(k: int, phase_k: int) -> list[int]:
    """K offset of every phase: what phase g of the kernel's loop covers is ``[g * phase_k, (g + 1) * phase_k)``."""
    return [g * phase_k for g in range(k // phase_k)]


@dataclass(frozen=True, kw_only=True)
class PipelineConfig(TileConfig):
    """Track 1's reference point, cuBLASDx's own device pipeline: the tile, its threads and ``depth`` K stages in
    flight. ``tile_k`` None: the pipeline's stage depth for the dtype (``utilities.tiles.PIPELINE_TILE_K``)."""

    tile_k: int | None = None
    threads: int = 256
    depth: int = 3

"""A performance model of the multi-pass kernel: occupancy, registers, and a latency / L2 ceiling (plain Python).

Every ceiling is a named assumption (``Machine``) that notebook 1 tests against measurements.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .config import ITEMSIZE, PassConfig

SMEM_PER_SM = 228 * 1024
SMEM_RESERVED_PER_BLOCK = 1024  # the driver keeps 1 KiB per resident block
REGISTERS_PER_SM = 65536
THREADS_PER_SM = 2048
BLOCKS_PER_SM = 32


@dataclass(frozen=True)
class Machine:
    """The named ceilings of the model (H100 SXM defaults; every one is an assumption the notebook tests)."""

    sms: int = 132
    peak_tops: dict[str, float] | None = None  # dense tensor-core peak, per dtype
    l2_tbs: float = 7.0  # bandwidth from L2 into shared memory, all SMs (TB/s)
    latency_us: float = 1.0  # a phase's exposed cost: global->shared latency plus the barrier (microseconds)

    def peak(self, dtype: str) -> float:
        peaks = self.peak_tops or {"int8": 1979.0, "float16": 989.0}
        return peaks[dtype]


H100 = Machine()


def occupancy(smem_bytes: int, registers: int, threads: int, *, smem_per_sm: int = SMEM_PER_SM) -> tuple[int, str]:
    """Resident blocks per SM and the resource that limits them: shared memory, registers or threads."""
    by_smem = smem_per_sm // (smem_bytes + SMEM_RESERVED_PER_BLOCK)
    regs_per_warp = -(-registers * 32 // 256) * 256  # allocated per warp in units of 256
    by_regs = REGISTERS_PER_SM // (regs_per_warp * (threads // 32)) if registers else BLOCKS_PER_SM
    by_threads = THREADS_PER_SM // threads
    limits = {"shared memory": by_smem, "registers": by_regs, "threads": by_threads, "blocks": BLOCKS_PER_SM}
    limiter = min(limits, key=limits.get)
    return limits[limiter], limiter


def fragment_registers(cfg: PassConfig, warps_m: int = 2) -> int:
    """Registers per thread that F passes of A and B fragments would take on a GPU whose MMAs read registers.

    Warps tile the block ``warps_m`` x (warps / warps_m); each warp holds its rows of A and columns of B for
    every fused pass. On sm_80 (mma.sync) this is the register cost of fusion; on sm_90 WGMMA reads its
    operands from shared memory and the count stays near the accumulator's.
    """
    warps = cfg.threads // 32
    rows, cols = cfg.tile_m // warps_m, cfg.tile_n // (warps // warps_m)
    per_pass = (rows + cols) * cfg.pass_k * ITEMSIZE[cfg.dtype] // 4 // 32
    return cfg.fused * per_pass


@dataclass(frozen=True)
class Prediction:
    fused: int
    smem_bytes: int
    blocks_per_sm: int
    limiter: str
    barriers_per_tile: int
    fraction_of_peak: float
    tops: float
    bound: str


def predict(cfg: PassConfig, k: int = 8192, *, registers: int = 128, machine: Machine = H100) -> Prediction:
    """Predicted rate of the multi-pass kernel: a latency-hiding model with an L2-bandwidth ceiling.

    A phase of one block does ``F`` passes of MMA work, ``F * t_pass`` at the SM's full tensor-core rate, and
    must wait about ``latency_us`` for its operands (double buffering hides the copy behind the MMAs only if the
    MMAs last that long). With ``b`` resident blocks the SM stays busy for a fraction
    ``min(1, b F t_pass / latency)`` of the time. The L2 ceiling: every block reads (TM + TN) PK bytes per pass.
    """
    blocks, limiter = occupancy(cfg.smem_bytes, registers, cfg.threads)
    peak = machine.peak(cfg.dtype) * 1e12
    t_pass = 2.0 * cfg.tile_m * cfg.tile_n * cfg.pass_k / (peak / machine.sms)
    hidden = blocks * cfg.fused * t_pass / (machine.latency_us * 1e-6)
    intensity = 2.0 * cfg.tile_m * cfg.tile_n / ((cfg.tile_m + cfg.tile_n) * ITEMSIZE[cfg.dtype])  # ops per byte
    l2_rate = machine.l2_tbs * 1e12 * intensity
    latency_rate = peak * min(1.0, hidden)
    rate, bound = min((latency_rate, "latency" if hidden < 1 else "tensor cores"), (l2_rate, "L2 bandwidth"))
    return Prediction(
        fused=cfg.fused,
        smem_bytes=cfg.smem_bytes,
        blocks_per_sm=blocks,
        limiter=limiter,
        barriers_per_tile=k // cfg.phase_k,
        fraction_of_peak=rate / peak,
        tops=rate / 1e12,
        bound=bound,
    )


def predictions(
    dtype: str = "int8", fs: Sequence[int] = (1, 2, 4, 8), *, k: int = 8192, registers: int = 128, **cfg: Any
) -> list[Prediction]:
    """:func:`predict` for each F of ``fs`` (the other fields of :class:`PassConfig` from ``cfg``)."""
    return [predict(PassConfig(dtype=dtype, fused=f, **cfg), k, registers=registers) for f in fs]

"""Multi-pass tensorization on the CPU: the pass configuration, NumPy references, inputs, a model, the checker.

A *pass* is one tensor-core MMA step of depth ``PK`` over a block tile (PK = 32 for int8, 16 for FP16). A block
tile's K extent of ``N * PK`` is processed as N passes; fusing F passes loads the operands of F passes (one
*phase*) into shared memory before one ``Matmul`` of depth ``F * PK`` consumes them. The GPU side is
``utilities.gpu.multipass``; this module imports NumPy only, so the CPU tests and the model run anywhere.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .check import CheckResult, _done, _not_yet, _unfinished_aware, compare, fresh_seed, untouched

DTYPES = ("int8", "float16")
PASS_K = {"int8": 32, "float16": 16}  # the K depth of one MMA step over the block tile
ACCUMULATOR = {"int8": np.int32, "float16": np.float32}
ITEMSIZE = {"int8": 1, "float16": 2}
SMEM_PER_BLOCK = 227 * 1024  # largest dynamic shared memory per block (sm_90; sm_80 has 163 KiB)
SMEM_PER_SM = 228 * 1024
SMEM_RESERVED_PER_BLOCK = 1024  # the driver keeps 1 KiB per resident block
REGISTERS_PER_SM = 65536
THREADS_PER_SM = 2048
BLOCKS_PER_SM = 32
U_FP32 = 2.0**-24
INT32_MAX = 2**31 - 1


# ------------------------------------------------------------------------------------------------------------
# Configuration and validation
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PassConfig:
    """One multi-pass tile GEMM: ``passes`` (N) passes per block tile, ``fused`` (F) of them per phase."""

    dtype: str = "int8"
    tile_m: int = 128
    tile_n: int = 128
    passes: int = 8
    fused: int = 1
    threads: int = 256

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

    @property
    def pass_k(self) -> int:
        return PASS_K[self.dtype]

    @property
    def phase_k(self) -> int:
        """K depth of one phase: the F fused passes, one ``Matmul`` of this depth."""
        return self.fused * self.pass_k

    @property
    def tile_k(self) -> int:
        """K extent of a block tile: N passes."""
        return self.passes * self.pass_k

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


# ------------------------------------------------------------------------------------------------------------
# References and inputs
# ------------------------------------------------------------------------------------------------------------


def reference(a: np.ndarray, bt: np.ndarray) -> np.ndarray:
    """C = A @ B with B given column-major as ``bt`` = B^T (n, k): exact int32 for int8, FP64 for FP16 inputs.

    The int8 product is computed in int64 and checked to fit in int32 (what the kernel accumulates in).
    """
    a, bt = np.asarray(a), np.asarray(bt)
    if a.ndim != 2 or bt.ndim != 2 or a.shape[1] != bt.shape[1]:
        raise ValueError(f"need A (m, k) and B^T (n, k), got {a.shape} and {bt.shape}")
    if a.dtype == np.int8 and bt.dtype == np.int8:
        c = a.astype(np.int64) @ bt.astype(np.int64).T
        if np.abs(c).max(initial=0) > INT32_MAX:
            raise OverflowError("the exact product does not fit in int32")
        return c.astype(np.int32)
    if a.dtype == np.float16 and bt.dtype == np.float16:
        return a.astype(np.float64) @ bt.astype(np.float64).T
    raise TypeError(f"A and B must both be int8 or both float16, got {a.dtype} and {bt.dtype}")


def gamma(k: int, u: float = U_FP32) -> float:
    """gamma_k = k u / (1 - k u): the classical bound on the relative error of a k-term recursive sum."""
    if k * u >= 1:
        raise ValueError(f"k u = {k * u} >= 1: no bound")
    return k * u / (1 - k * u)


def fp32_bound(a: np.ndarray, bt: np.ndarray) -> np.ndarray:
    """Elementwise bound on |C - A @ B| for FP16 inputs, FP32 accumulation and an FP32 result.

    FP16 x FP16 products are exact in FP32; the K-term sum in any order then errs by at most
    gamma_K (|A| |B|)_ij (u = 2^-24). Tensor cores may truncate (round toward zero) instead of rounding to
    nearest, which doubles u: the bound uses 2u, K + 1 terms (the output rounding) and the smallest normal.
    """
    k = a.shape[1]
    scale = np.abs(a.astype(np.float64)) @ np.abs(bt.astype(np.float64)).T
    return gamma(k + 1, 2 * U_FP32) * scale + np.finfo(np.float32).tiny


CASES = ("random", "all -128", "all 127", "mixed extremes")


def operands(case: str, m: int, n: int, k: int, dtype: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A (m, k) and B^T (n, k), C-contiguous, of ``dtype``: one of :data:`CASES`.

    For FP16, "all -128" and "all 127" become the extremes of the format (-65504 and +65504 scaled so that
    the FP32 sum cannot overflow), and "mixed extremes" mixes signs and magnitudes from 2^-14 to 2^10.
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    rng = np.random.default_rng(seed)
    if dtype == "int8":
        if case == "random":
            a, bt = rng.integers(-128, 128, (m, k)), rng.integers(-128, 128, (n, k))
        elif case == "all -128":
            a, bt = np.full((m, k), -128), np.full((n, k), -128)
        elif case == "all 127":
            a, bt = np.full((m, k), 127), np.full((n, k), 127)
        elif case == "mixed extremes":
            a = rng.choice([-128, 127], (m, k))
            bt = rng.choice([-128, -1, 0, 1, 127], (n, k))
            a[0], bt[0] = -128, -128  # C[0, 0] is the largest sum, k * 2^14
            bt[1] = 127  # row 0 against column 1: the most negative, -k * 128 * 127
        else:
            raise ValueError(f"case must be one of {CASES}, got {case!r}")
        return np.ascontiguousarray(a, np.int8), np.ascontiguousarray(bt, np.int8)
    big = 2.0**15 / math.sqrt(k)  # keeps k * big^2 below 2^30: far from FP32 overflow
    if case == "random":
        a, bt = rng.standard_normal((m, k)), rng.standard_normal((n, k))
    elif case == "all -128":
        a, bt = np.full((m, k), -big), np.full((n, k), big)
    elif case == "all 127":
        a, bt = np.full((m, k), big), np.full((n, k), big)
    elif case == "mixed extremes":
        a = rng.choice([-1.0, 1.0], (m, k)) * np.exp2(rng.integers(-14, 11, (m, k)))
        bt = rng.choice([-1.0, 1.0], (n, k)) * np.exp2(rng.integers(-14, 5, (n, k)))
    else:
        raise ValueError(f"case must be one of {CASES}, got {case!r}")
    return np.ascontiguousarray(a, np.float16), np.ascontiguousarray(bt, np.float16)


def phase_products(a: np.ndarray, bt: np.ndarray, phase_k: int) -> np.ndarray:
    """The exact contribution of every phase, (phases, m, n): A[:, kg] @ B[kg, :] for kg the K range of phase g."""
    k = a.shape[1]
    wide = np.int64 if a.dtype == np.int8 else np.float64
    return np.stack(
        [a[:, g : g + phase_k].astype(wide) @ bt[:, g : g + phase_k].astype(wide).T for g in phase_offsets(k, phase_k)]
    )


# ------------------------------------------------------------------------------------------------------------
# Checker
# ------------------------------------------------------------------------------------------------------------


def _diagnose(got: np.ndarray, parts: np.ndarray, bound: np.ndarray | None = None) -> str:
    """A hint naming the phase error that explains ``got``: a phase skipped, repeated, or shifted, else generic.

    ``bound`` (FP16 track): a candidate explains ``got`` when it lies within the bound of it.
    """
    total = parts.sum(axis=0)

    def close(x: np.ndarray) -> bool:
        return bool(np.array_equal(got, x) if bound is None else (np.abs(got - x) <= bound).all())

    phases = parts.shape[0]
    for g in range(phases):
        if close(total - parts[g]):
            where = "the last phase" if g == phases - 1 else "the first phase" if g == 0 else f"phase {g} of {phases}"
            return f"{where} is missing: the loop must execute every phase g = 0 .. {phases - 1} once"
    for g in range(1, phases):
        if close(total - parts[g] + parts[g - 1]):
            return (
                f"phase {g - 1} is counted twice and phase {g} never: execute the buffer that was just waited for, "
                "then swap the two buffers"
            )
    if close(parts[0]) or close(parts[0] * phases):
        return "only phase 0 reached the accumulator: prefetch phase g + 1 into the other buffer every iteration"
    return (
        "phase g covers K from g * F * PK to (g + 1) * F * PK: check the offset of the prefetch (phase g + 1), "
        "the copy_wait before execute, and the buffer swap"
    )


@_unfinished_aware("multi-pass tile GEMM")
def check_pass_gemm(
    run: Callable[[np.ndarray, np.ndarray], Any],
    dtype: str = "int8",
    *,
    phase_k: int | None = None,
    shapes: Sequence[tuple[int, int, int]] = ((256, 256, 1024),),
    cases: Iterable[str] = CASES,
    seed: int | None = None,
) -> CheckResult:
    """``run(a, bt)`` returns C = A @ B (B^T given as ``bt``, (n, k)): int32 exact for int8, FP32 within a bound.

    ``phase_k`` (F * PK), when given, lets a failure name the phase that went wrong.
    """
    name, seed = f"multi-pass tile GEMM ({dtype})", fresh_seed(seed)
    count = 0
    for m, n, k in shapes:
        for case in cases:
            a, bt = operands(case, m, n, k, dtype, seed + count)
            got = np.asarray(run(a, bt))
            want = reference(a, bt)
            if count == 0 and want.any() and (untouched(got) or untouched(got, float("nan"))):
                return _not_yet(name, "C is all zero or was not written")
            exact = dtype == "int8"
            parts = phase_products(a, bt, phase_k) if phase_k and got.shape == want.shape else None
            if exact:
                hint = _diagnose(got, parts) if parts is not None and not np.array_equal(got, want) else ""
                compare("C", got, want, names=("row", "col"), case=f"{case} {m}x{n}x{k}", hint=hint or _HINT)
            else:
                bound = fp32_bound(a, bt)
                bad = not (np.abs(got.astype(np.float64) - want) <= bound).all()
                hint = _diagnose(got.astype(np.float64), parts, bound) if parts is not None and bad else ""
                compare(
                    "C", got, want.astype(np.float32), bound=bound, names=("row", "col"), case=f"{case} {m}x{n}x{k}",
                    hint=hint or _HINT,
                )  # fmt: skip
            count += 1
    return _done(name, count, seed)


_HINT = "check which K range each phase loads, and that every phase is executed once from the buffer it was loaded into"


# ------------------------------------------------------------------------------------------------------------
# A simple performance model
# ------------------------------------------------------------------------------------------------------------


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


def occupancy(
    smem_bytes: int, registers: int, threads: int, *, smem_per_sm: int = SMEM_PER_SM
) -> tuple[int, str]:  # fmt: skip
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


def predict(
    cfg: PassConfig, k: int = 8192, *, registers: int = 128, machine: Machine = H100
) -> Prediction:  # fmt: skip
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
) -> list[Prediction]:  # fmt: skip
    """:func:`predict` for each F of ``fs`` (the other fields of :class:`PassConfig` from ``cfg``)."""
    return [predict(PassConfig(dtype=dtype, fused=f, **cfg), k, registers=registers) for f in fs]

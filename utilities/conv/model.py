"""Bytes each convolution path must move through HBM, its FLOPs, and the gain fusion can give (plain Python).

Compulsory traffic, FP16 (2 bytes an element), as in ``utilities.roofline``: each kernel reads its operands
once and writes its result once. The 3x3 halo is not counted: a block's neighbouring rows come from L2, not HBM.
Paths (those of ``utilities.conv.tensorcore`` and ``utilities.conv.baselines``):

- ``fused``: one kernel reads x, the filters and the bias and writes the output (cuDNN's fused convolution too);
- ``unfused``: the convolution writes its FP16 result P (B H W C_out), and a bias + ReLU kernel reads P and
  writes the output: P-sized traffic twice more (PyTorch's convolution followed by ReLU moves the same);
- ``im2col``: nine copies build the (M x 9 C_in) matrix A in HBM (each reads x and writes its ninth of A), cuBLAS
  reads A, then the bias + ReLU kernel: A, nine times the input, is written and read once.

The ratio unfused / fused bytes bounds what fusion can save on a memory-bound convolution: with C_in = C_out
it is 2, since x, P and the output are the same size. FLOPs grow as 9 C_in C_out per pixel and bytes as
C_in + C_out, so wide channels make the convolution compute-bound and the epilogue's bytes a rounding error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from ..roofline import FP16_BYTES, Traffic, bound_by, format_rows, path_rows, time_floor
from .reference import TAPS, B2BShape, ConvShape

CONV_PATHS = ("fused", "unfused", "im2col")


def conv_flops(shape: ConvShape) -> int:
    """2 M N K: the implicit GEMM's multiply-adds (the padding's zeros included, as every library counts them)."""
    return 2 * shape.m * shape.n * shape.k


def conv_traffic(path: str, shape: ConvShape, *, e: int = FP16_BYTES) -> Traffic:
    """Bytes of ``path`` (one of ``CONV_PATHS``)."""
    if path not in CONV_PATHS:
        raise ValueError(f"path must be one of {CONV_PATHS}, got {path!r}")
    x, w, bias = shape.m * shape.c_in, TAPS * shape.c_in * shape.c_out, shape.c_out
    out = shape.m * shape.c_out
    read, written, kernels = x + w + bias, out, 1
    if path == "unfused":
        read, written, kernels = read + out, written + out, 2
    elif path == "im2col":
        a = TAPS * x
        read, written, kernels = read + TAPS * x - x + a + out, written + a + out, TAPS + 2
    return Traffic(path, e * read, e * written, conv_flops(shape), kernels)


def fusion_gain_bound(shape: ConvShape) -> float:
    """Unfused bytes / fused bytes: the most fusion can save where both paths run at HBM bandwidth."""
    return conv_traffic("unfused", shape).bytes / conv_traffic("fused", shape).bytes


def conv_prediction(shape: ConvShape, *, bandwidth_tbs: float, tflops: float) -> list[dict[str, float | str]]:
    """One row per path: MB moved, GFLOP, its roofline floor (us), what bounds it, and its floor / fused floor."""
    paths = [conv_traffic(path, shape) for path in CONV_PATHS]
    return path_rows(paths, bandwidth_tbs=bandwidth_tbs, tflops=tflops)


def format_prediction(rows: list[dict[str, float | str]]) -> str:
    """The rows of ``conv_prediction`` or ``b2b_prediction`` as a small text table."""
    return format_rows(rows)


# ------------------------------------------------------------------------------------------------------------
# Back-to-back convolutions (notebook 2d)
# ------------------------------------------------------------------------------------------------------------

B2B_PATHS = ("fused", "unfused")


def b2b_flops(shape: B2BShape) -> int:
    """Both convolutions' multiply-adds: 2 M C_mid 9 C_in, then 2 M C_out C_mid."""
    return 2 * shape.m * shape.c_mid * TAPS * shape.c_in + 2 * shape.m * shape.c_out * shape.c_mid


def b2b_traffic(path: str, shape: B2BShape, *, e: int = FP16_BYTES) -> Traffic:
    """Bytes of ``path`` (one of ``B2B_PATHS``): ``fused`` reads x and the filters once and writes D1; ``unfused``
    also writes D0 (B H W C_mid) and reads it back, in two kernels (cuDNN twice moves the same bytes)."""
    if path not in B2B_PATHS:
        raise ValueError(f"path must be one of {B2B_PATHS}, got {path!r}")
    x, d0, d1 = shape.m * shape.c_in, shape.m * shape.c_mid, shape.m * shape.c_out
    filters = TAPS * shape.c_in * shape.c_mid + shape.c_mid * shape.c_out + shape.c_out
    read, written, kernels = x + filters, d1, 1
    if path == "unfused":
        read, written, kernels = read + d0, written + d0, 2
    return Traffic(path, e * read, e * written, b2b_flops(shape), kernels)


def b2b_gain_bound(shape: B2BShape) -> float:
    """Unfused bytes / fused bytes: what keeping D0 in the block can save where both paths are memory-bound."""
    return b2b_traffic("unfused", shape).bytes / b2b_traffic("fused", shape).bytes


def b2b_prediction(shape: B2BShape, *, bandwidth_tbs: float, tflops: float) -> list[dict[str, float | str]]:
    """One row per path, as :func:`conv_prediction`'s."""
    paths = [b2b_traffic(path, shape) for path in B2B_PATHS]
    return path_rows(paths, bandwidth_tbs=bandwidth_tbs, tflops=tflops)


# ------------------------------------------------------------------------------------------------------------
# What keeping D0 in the block can save (issue 44): D0's round trip against the unfused path's whole time
# ------------------------------------------------------------------------------------------------------------


def b2b_kernel_traffic(shape: B2BShape, *, e: int = FP16_BYTES) -> dict[str, Traffic]:
    """The unfused path's two kernels: ``3x3`` (3x3 convolution + ReLU: reads x and w0, writes D0) and ``1x1``
    (1x1 convolution + bias + ReLU: reads D0, w1 and bias1, writes D1); together ``b2b_traffic("unfused")``."""
    x, d0, d1 = shape.m * shape.c_in, shape.m * shape.c_mid, shape.m * shape.c_out
    w0, w1 = TAPS * shape.c_in * shape.c_mid, shape.c_mid * shape.c_out
    first = Traffic("3x3", e * (x + w0), e * d0, 2 * shape.m * shape.c_mid * TAPS * shape.c_in, 1)
    second = Traffic("1x1", e * (d0 + w1 + shape.c_out), e * d1, 2 * shape.m * shape.c_out * shape.c_mid, 1)
    return {"3x3": first, "1x1": second}


def d0_round_trip_bytes(shape: B2BShape, *, e: int = FP16_BYTES) -> int:
    """D0 (B H W C_mid) written once and read back once: the bytes the fused kernel does not move."""
    return 2 * e * shape.m * shape.c_mid


def b2b_floors(shape: B2BShape, *, copy_tbs: float, mma_tflops: float) -> dict[str, float]:
    """Floors in ms, each the longer of its bytes at ``copy_tbs`` (reads and writes counted, as
    ``peaks.measure_copy_bandwidth`` counts them) and its FLOPs at ``mma_tflops``: the unfused path's kernels
    (``3x3``, ``1x1``) and their sum ``unfused`` (one after the other), the ``fused`` kernel, and ``d0``, D0's round
    trip alone."""
    kernels = b2b_kernel_traffic(shape)
    floors = {name: 1e3 * time_floor(t.flops, t.bytes, copy_tbs, mma_tflops) for name, t in kernels.items()}
    fused = b2b_traffic("fused", shape)
    floors["unfused"] = floors["3x3"] + floors["1x1"]
    floors["fused"] = 1e3 * time_floor(fused.flops, fused.bytes, copy_tbs, mma_tflops)
    floors["d0"] = d0_round_trip_bytes(shape) / (copy_tbs * 1e9)
    return floors


def share_needed(gain: float) -> float:
    """The fraction of the unfused time a fused kernel must save to run ``gain`` times faster: 1 - 1 / gain."""
    if gain <= 1:
        raise ValueError(f"a gain is over 1, got {gain}")
    return 1 - 1 / gain


@dataclass(frozen=True)
class FusionLimit:
    """What keeping D0 in the block can save at ``shape``, against the unfused path's time measured in the same run.

    ``d0_ms``: D0's round trip at the run's copy rate. The model's fused floor ``limit_ms`` is the unfused time less
    that round trip: the fused kernel's time if it saves D0's bytes and loses nothing else (a fused kernel below it
    saved more than the bytes: the second launch, or a first kernel slower for its stores)."""

    shape: B2BShape
    copy_tbs: float
    unfused_ms: float
    d0_ms: float

    @property
    def share(self) -> float:
        """D0's round trip as a fraction of the unfused time."""
        return self.d0_ms / self.unfused_ms

    @property
    def limit_ms(self) -> float:
        return self.unfused_ms - self.d0_ms

    @property
    def best_gain(self) -> float:
        """Unfused time over the fused floor: the most this fusion can gain."""
        return self.unfused_ms / self.limit_ms

    def reachable(self, gain: float) -> bool:
        """Whether D0's round trip is long enough for a fused kernel ``gain`` times faster than the unfused path."""
        return self.share >= share_needed(gain)

    def fastest_copy_for(self, gain: float) -> float:
        """The copy rate (TB/s) above which D0's round trip is too short for ``gain`` at this unfused time."""
        return d0_round_trip_bytes(self.shape) / (share_needed(gain) * self.unfused_ms * 1e9)

    def saved(self, fused_ms: float) -> float:
        """The fraction of D0's round trip a fused kernel taking ``fused_ms`` saved (negative: it lost time)."""
        return (self.unfused_ms - fused_ms) / self.d0_ms


def fusion_limit(shape: B2BShape, *, copy_tbs: float, unfused_ms: float) -> FusionLimit:
    """:class:`FusionLimit` at the run's copy rate (TB/s) and the unfused path's measured median (ms)."""
    if copy_tbs <= 0 or unfused_ms <= 0:
        raise ValueError("the copy rate and the unfused time must be positive")
    return FusionLimit(shape, copy_tbs, unfused_ms, d0_round_trip_bytes(shape) / (copy_tbs * 1e9))


def format_fusion_limit(
    limit: FusionLimit,
    *,
    fused_ms: float | None = None,
    mma_tflops: float | None = None,
    parts_ms: dict[str, float] | None = None,
    gain: float = 1.12,
) -> str:
    """The model's lines for one shape: D0's round trip against the unfused time, the fused floor and the best gain
    beside ``gain``; with ``fused_ms`` (measured) what the fused kernel saved and how far it is from the floor; with
    ``mma_tflops`` the roofline floors of :func:`b2b_floors` at the same copy rate; with ``parts_ms`` (the unfused
    path's ``3x3`` and ``1x1`` kernels timed alone) and ``mma_tflops``, the fused kernel as the 3x3 kernel alone
    plus GEMM 1's MMAs: the 1x1 kernel gone, nothing of GEMM 1 hidden."""
    s = limit.shape
    verdict = "reachable" if limit.reachable(gain) else "NOT reachable"
    lines = [
        f"{s.label}: D0's round trip {d0_round_trip_bytes(s) / 1e6:.0f} MB = {limit.d0_ms:.4f} ms at "
        f"{limit.copy_tbs:.2f} TB/s, {limit.share:.1%} of the unfused {limit.unfused_ms:.4f} ms; fused floor "
        f"(unfused less D0) {limit.limit_ms:.4f} ms, at best {limit.best_gain:.3f}x; {gain}x needs "
        f"{share_needed(gain):.1%}: {verdict} (not above {limit.fastest_copy_for(gain):.2f} TB/s)"
    ]
    if fused_ms is not None:
        lines.append(
            f"  fused {fused_ms:.4f} ms: saved {limit.saved(fused_ms):.0%} of D0's round trip (target 90%), "
            f"{fused_ms / limit.limit_ms:.3f}x the fused floor (target at most 1.10x), "
            f"{limit.unfused_ms / fused_ms:.3f}x the unfused path"
        )
    if mma_tflops is not None:
        f = b2b_floors(s, copy_tbs=limit.copy_tbs, mma_tflops=mma_tflops)
        bound = {
            name: bound_by(t.flops, t.bytes, limit.copy_tbs, mma_tflops)
            for name, t in [*b2b_kernel_traffic(s).items(), ("fused", b2b_traffic("fused", s))]
        }
        lines.append(
            f"  roofline at {mma_tflops:.0f} TFLOP/s: 3x3 {f['3x3']:.4f} ({bound['3x3']}) + 1x1 {f['1x1']:.4f} "
            f"({bound['1x1']}) = unfused {f['unfused']:.4f} ms, fused {f['fused']:.4f} ({bound['fused']}): "
            f"saves {f['unfused'] - f['fused']:.4f} ms"
        )
    if parts_ms is not None and mma_tflops is not None:
        gemm1 = b2b_kernel_traffic(s)["1x1"].flops / (mma_tflops * 1e9)
        alone = parts_ms["3x3"] + gemm1
        lines.append(
            f"  measured alone: 3x3 {parts_ms['3x3']:.4f} + 1x1 {parts_ms['1x1']:.4f} ms; the 3x3 alone plus GEMM 1's "
            f"MMAs ({gemm1:.4f} ms): {alone:.4f} ms, {limit.unfused_ms / alone:.3f}x the unfused path"
        )
    return "\n".join(lines)


B2B_PREFIXES = ("conv_b2b", "conv_b2b.wide")  # the records of the target shape, and of the wide chain


def b2b_model_lines(records: Sequence[Any]) -> list[str]:
    """The model of each back-to-back shape a run of ``utilities.conv.benchmarks`` timed (its ``BenchRecord``s:
    ``<prefix>.fused``, ``.unfused``, ``.unfused.3x3`` and ``.unfused.1x1``, the copy rate in their ``params``)
    beside its measured times; the roofline floors at the MMA rate of ``conv.mma_only@<tile>`` (the course's kernel
    doing only its MMAs at the target) when the run has it; and whether the saving grew with D0's width."""
    by_name = {r.name: r for r in records}
    mma = next((r.tflops for r in records if r.name.startswith("conv.mma_only@")), None)
    lines, limits = [], {}
    for prefix in B2B_PREFIXES:
        fused, unfused = by_name.get(f"{prefix}.fused"), by_name.get(f"{prefix}.unfused")
        if fused is None or unfused is None or "copy_tbs" not in unfused.params:
            continue
        p = unfused.params
        shape = B2BShape(*(p[f.name] for f in fields(B2BShape)))
        limit = fusion_limit(shape, copy_tbs=p["copy_tbs"], unfused_ms=unfused.time.median)
        alone = [by_name.get(f"{prefix}.unfused.{k}") for k in ("3x3", "1x1")]
        parts = None if None in alone else {k: r.time.median for k, r in zip(("3x3", "1x1"), alone, strict=True)}
        lines.append(format_fusion_limit(limit, fused_ms=fused.time.median, mma_tflops=mma, parts_ms=parts))
        limits[prefix] = (limit, limit.unfused_ms - fused.time.median)
    if len(limits) == 2:
        (target, saved), (wide, saved_wide) = limits["conv_b2b"], limits["conv_b2b.wide"]
        lines.append(
            f"the saving with D0 {wide.shape.c_mid / target.shape.c_mid:g}x as wide: D0's round trip "
            f"{target.d0_ms:.4f} -> {wide.d0_ms:.4f} ms ({target.share:.1%} -> {wide.share:.1%} of the unfused "
            f"time); measured {saved:.4f} -> {saved_wide:.4f} ms: {'grew' if saved_wide > saved else 'did not grow'}"
        )
    return lines


def time_split(times_ms: dict[str, float], tile: str | None = None) -> dict[str, float | str] | None:
    """Where a pipelined kernel's time goes, from the medians (ms, by record name) of one run: the whole kernel
    ``conv.fused@<tile>``, the same kernel doing only its gathers ``conv.gather_only@<tile>`` and only its MMAs
    ``conv.mma_only@<tile>`` (``utilities.conv.benchmarks``). ``overlap`` = gathers + MMAs - whole: 0 when the two
    parts run one after the other, the shorter part's whole time when it hides behind the longer; ``hidden`` is
    that overlap as a fraction of the shorter part. ``tile``: that tile's (default: the first with diagnostics).
    None without the three records."""
    if tile is None:
        tiles = split_tiles(times_ms)
        if not tiles:
            return None
        tile = tiles[0]
    names = (f"conv.fused@{tile}", f"conv.gather_only@{tile}", f"conv.mma_only@{tile}")
    if not all(n in times_ms for n in names):
        return None
    whole, gather, mma = (times_ms[n] for n in names)
    overlap = gather + mma - whole
    return {
        "tile": tile,
        "whole": whole,
        "gather": gather,
        "mma": mma,
        "overlap": overlap,
        "hidden": overlap / min(gather, mma),
    }


def split_tiles(times_ms: dict[str, float]) -> list[str]:
    """The tiles whose diagnostics the run timed (``conv.gather_only@<tile>``), in the run's order."""
    return [name.split("@", 1)[1] for name in times_ms if name.startswith("conv.gather_only@")]


def format_time_split(split: dict[str, float | str]) -> str:
    """One line: the whole kernel, its parts alone, and how much of the shorter part the longer one hides."""
    return (
        f"where the time goes ({split['tile']}): the whole kernel {split['whole']:.4f} ms, its gathers alone "
        f"{split['gather']:.4f} ms, its MMAs alone {split['mma']:.4f} ms: the parts overlap by "
        f"{split['overlap']:.4f} ms, {split['hidden']:.0%} of the shorter part"
    )

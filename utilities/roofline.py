"""The performance models' accounting: operations and compulsory bytes, and the floor they set (plain Python).

Every track's ``model`` counts its kernels or paths the same way: each kernel reads its operands once and writes
its result once through HBM (tiles re-read from L2 are not counted), and it can run no faster than the longer of
its operations at the arithmetic ceiling and its bytes at the bandwidth ceiling. Kernels that run one after
another add their floors.

- :class:`Traffic`: a path's bytes read and written, FLOPs and kernel count (the fusion and convolution tracks),
  :func:`path_rows` and :func:`format_rows` for the prediction table of several paths;
- :class:`KernelWork`: one kernel's int8 operations and bytes (the Ozaki tracks), :func:`predicted_ms` for a
  sequence of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

FP16_BYTES = 2


def time_floor(flops: float, nbytes: float, bandwidth_tbs: float, tflops: float) -> float:
    """Roofline floor in seconds: the longer of moving ``nbytes`` at ``bandwidth_tbs`` and ``flops`` at ``tflops``."""
    if bandwidth_tbs <= 0 or tflops <= 0:
        raise ValueError("bandwidth and rate must be positive")
    return max(nbytes / (bandwidth_tbs * 1e12), flops / (tflops * 1e12))


def ridge_point(bandwidth_tbs: float, tflops: float) -> float:
    """The ridge point in FLOP per byte: the intensity at which the operations and the bytes take equally long.
    Below it a kernel is memory-bound, above it compute-bound."""
    if bandwidth_tbs <= 0 or tflops <= 0:
        raise ValueError("bandwidth and rate must be positive")
    return tflops / bandwidth_tbs


def bound_by(flops: float, nbytes: float, bandwidth_tbs: float, tflops: float) -> str:
    """ "memory" or "compute": which roof sets ``time_floor``."""
    return "memory" if nbytes / (bandwidth_tbs * 1e12) >= flops / (tflops * 1e12) else "compute"


@dataclass(frozen=True)
class Traffic:
    """Bytes read and written through HBM and the FLOPs of one path."""

    path: str
    bytes_read: int
    bytes_written: int
    flops: int
    kernels: int

    @property
    def bytes(self) -> int:
        return self.bytes_read + self.bytes_written

    @property
    def intensity(self) -> float:
        """FLOPs per byte moved."""
        return self.flops / self.bytes


RATIOS = {"floor": ("vs_fused", "floor/fused"), "bytes": ("bytes_vs_fused", "bytes/fused")}


def path_rows(
    paths: Sequence[Traffic], *, bandwidth_tbs: float, tflops: float, ratio: str = "floor"
) -> list[dict[str, float | str]]:
    """One row per path, the first being the fused path the others are compared with: MB moved, GFLOP, its floor
    (us), what bounds it, and its floor (``ratio="floor"``, key ``vs_fused``) or its bytes (``ratio="bytes"``, key
    ``bytes_vs_fused``) over the fused path's."""
    if ratio not in RATIOS:
        raise ValueError(f"ratio must be one of {sorted(RATIOS)}, got {ratio!r}")
    if not paths:
        raise ValueError("no paths to compare")
    key = RATIOS[ratio][0]
    fused = paths[0]
    fused_floor = time_floor(fused.flops, fused.bytes, bandwidth_tbs, tflops)
    rows = []
    for t in paths:
        floor = time_floor(t.flops, t.bytes, bandwidth_tbs, tflops)
        rows.append(
            {
                "path": t.path,
                "MB": t.bytes / 1e6,
                "GFLOP": t.flops / 1e9,
                "floor_us": floor * 1e6,
                "bound": bound_by(t.flops, t.bytes, bandwidth_tbs, tflops),
                key: floor / fused_floor if ratio == "floor" else t.bytes / fused.bytes,
            }
        )
    return rows


def format_rows(rows: list[dict[str, float | str]]) -> str:
    """The rows of :func:`path_rows` as a small text table."""
    key, label = next((key, label) for key, label in RATIOS.values() if key in rows[0])
    lines = [f"{'path':>9} {'MB':>9} {'GFLOP':>8} {'floor us':>9} {'bound':>8} {label:>12}"]
    for r in rows:
        lines.append(
            f"{r['path']:>9} {r['MB']:9.1f} {r['GFLOP']:8.2f} {r['floor_us']:9.1f} {r['bound']:>8} {r[key]:12.2f}"
        )
    return "\n".join(lines)


@dataclass(frozen=True)
class KernelWork:
    """One kernel of a design: its name, int8 operations (2 per multiply-add) and compulsory bytes."""

    name: str
    ops: float
    bytes: float

    def floor_ms(self, int8_tops: float, bandwidth_tbs: float) -> float:
        """The kernel's time floor in ms: the longer of its operations and its bytes at the given ceilings."""
        return time_floor(self.ops, self.bytes, bandwidth_tbs, int8_tops) * 1e3

    def bound(self, int8_tops: float, bandwidth_tbs: float) -> str:
        """ "compute" or "memory": which ceiling sets the floor."""
        return bound_by(self.ops, self.bytes, bandwidth_tbs, int8_tops)


def predicted_ms(kernels: list[KernelWork], int8_tops: float, bandwidth_tbs: float) -> dict[str, float]:
    """Each kernel's floor in ms, and their sum as ``"total"`` (kernels run one after another)."""
    times = {w.name: w.floor_ms(int8_tops, bandwidth_tbs) for w in kernels}
    return times | {"total": sum(times.values())}

"""The performance models' accounting: operations and compulsory bytes, and the floor they set (plain Python).

Every track's ``model`` counts its kernels or paths the same way: each kernel reads its operands once and writes
its result once through HBM (tiles re-read from L2 are not counted), and it can run no faster than the longer of
its operations at the arithmetic ceiling and its bytes at the bandwidth ceiling. Kernels that run one after
another add their floors.

- :class:`Traffic`: a path's bytes read and written, FLOPs and kernel count (the fusion and convolution tracks);
- :class:`KernelWork`: one kernel's int8 operations and bytes (the Ozaki tracks), :func:`predicted_ms` for a
  sequence of them.
"""

from __future__ import annotations

from dataclasses import dataclass

FP16_BYTES = 2


def time_floor(flops: float, nbytes: float, bandwidth_tbs: float, tflops: float) -> float:
    """Roofline floor in seconds: the longer of moving ``nbytes`` at ``bandwidth_tbs`` and ``flops`` at ``tflops``."""
    if bandwidth_tbs <= 0 or tflops <= 0:
        raise ValueError("bandwidth and rate must be positive")
    return max(nbytes / (bandwidth_tbs * 1e12), flops / (tflops * 1e12))


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

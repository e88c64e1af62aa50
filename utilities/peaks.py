"""Data-sheet peaks of the GPUs the course meets, and the ceilings measured in a run.

Peaks are NVIDIA data-sheet figures for dense math (the data sheets print sparse tensor rates; dense is half
of them). A data sheet is an upper bound nobody reaches: roofs that a comparison rests on come from
``MeasuredCeilings``, measured in the same run (cuBLAS DGEMM, cuBLAS int8 GEMM, a device-to-device copy).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

DATA_SHEET = "NVIDIA data sheet, dense"


@dataclass(frozen=True)
class Peaks:
    """Peak rates of one GPU: TFLOP/s, TOPS for int8, TB/s; ``None`` where the GPU has no such unit."""

    name: str
    fp64_tflops: float
    fp64_tensor_tflops: float | None
    fp16_tensor_tflops: float
    int8_tensor_tops: float
    bandwidth_tbs: float
    sms: int
    source: str = DATA_SHEET
    note: str = ""


PEAKS: dict[str, Peaks] = {
    p.name: p
    for p in (
        Peaks("L4", 0.47, None, 121.0, 242.5, 0.3, 58, note="FP64 not on the data sheet: FP32 30.3 TF / 64"),
        Peaks("L40S", 1.43, None, 362.05, 733.0, 0.864, 142, note="FP64 not on the data sheet: FP32 91.6 TF / 64"),
        Peaks("A100 SXM 80GB", 9.7, 19.5, 312.0, 624.0, 2.039, 108),
        Peaks("A100 SXM 40GB", 9.7, 19.5, 312.0, 624.0, 1.555, 108),
        Peaks("A100 PCIe 80GB", 9.7, 19.5, 312.0, 624.0, 1.935, 108),
        Peaks("A100 PCIe 40GB", 9.7, 19.5, 312.0, 624.0, 1.555, 108),
        Peaks("H100 SXM", 34.0, 67.0, 989.5, 1979.0, 3.35, 132),
        Peaks("H100 PCIe", 26.0, 51.0, 756.0, 1513.0, 2.0, 114),
        Peaks("H200", 34.0, 67.0, 989.5, 1979.0, 4.8, 132, note="H200 SXM; the NVL card is rated lower"),
        Peaks(
            "B200",
            40.0,
            40.0,
            2250.0,
            4500.0,
            8.0,
            148,
            note="HGX B200 at 1000 W as announced; later data sheets print 37 TF FP64 and 7.7 TB/s",
        ),
    )
}


def detect(name: str) -> Peaks | None:
    """The peaks for a device name as CUDA reports it ("NVIDIA H100 80GB HBM3" -> H100 SXM), else None."""
    s = name.lower()

    def has(token: str) -> bool:
        return re.search(rf"(?<![a-z0-9]){token}(?![a-z0-9])", s) is not None

    pcie = "pcie" in s
    if has("b200"):
        return PEAKS["B200"]
    if has("h200"):
        return PEAKS["H200"]
    if has("h100"):
        if "nvl" in s:
            return None  # H100 NVL: 94 GB and other clocks, not in the table
        return PEAKS["H100 PCIe" if pcie else "H100 SXM"]
    if has("a100"):
        size = "40GB" if "40gb" in s else "80GB"
        return PEAKS[f"A100 {'PCIe' if pcie else 'SXM'} {size}"]
    if has("l40s"):
        return PEAKS["L40S"]
    if has("l4"):
        return PEAKS["L4"]
    return None


def current_peaks() -> Peaks | None:
    """The data-sheet peaks of the current CUDA device, None if it is not in the table (CuPy)."""
    import cupy

    name = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"]
    return detect(name.decode() if isinstance(name, bytes) else str(name))


def current_hbm_tbs() -> float | None:
    """The data-sheet HBM bandwidth (TB/s) of the current CUDA device, None if it is not in the table (CuPy)."""
    found = current_peaks()
    return None if found is None else found.bandwidth_tbs


def gpu_slug(name: str) -> str:
    """A file-name form of a device name: "NVIDIA H100 80GB HBM3" -> "nvidia-h100-80gb-hbm3"."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    if not slug:
        raise ValueError(f"no letters or digits in GPU name {name!r}")
    return slug


@dataclass(frozen=True)
class MeasuredCeilings:
    """Roofs measured in a run: cuBLAS DGEMM TFLOP/s, cuBLAS int8 GEMM TOPS, copy TB/s (read + write)."""

    dgemm_tflops: float | None = None
    igemm_tops: float | None = None
    copy_tbs: float | None = None

    def roofs(self) -> dict[str, float]:
        """The compute roofs that were measured, labelled for a plot."""
        named = {"cuBLAS DGEMM": self.dgemm_tflops, "cuBLAS int8 GEMM": self.igemm_tops}
        return {label: v for label, v in named.items() if v is not None}


def measured_ceilings(records: Iterable[Any], copy_tbs: float | None = None) -> MeasuredCeilings:
    """Ceilings from a run's records: the best ``cublas.dgemm`` and ``cublas.igemm`` rates among them.

    ``records`` holds ``BenchRecord``s or their dicts; ``copy_tbs`` comes from ``measure_copy_bandwidth()``.
    """
    best: dict[str, float] = {}
    for r in records:
        name, rate = (r["name"], r["tflops"]) if isinstance(r, dict) else (r.name, r.tflops)
        if name in ("cublas.dgemm", "cublas.igemm"):
            best[name] = max(best.get(name, 0.0), float(rate))
    return MeasuredCeilings(best.get("cublas.dgemm"), best.get("cublas.igemm"), copy_tbs)


def measure_copy_bandwidth(nbytes: int = 1 << 30, repeats: int = 20) -> float:
    """Device-to-device copy bandwidth in TB/s, counting bytes read and written (median of ``repeats``)."""
    import cupy
    import numpy as np
    from cupyx.profiler import benchmark

    src = cupy.ones(nbytes, dtype=cupy.uint8)
    dst = cupy.empty_like(src)

    def copy() -> None:
        dst.data.copy_from_device_async(src.data, nbytes)

    times = benchmark(copy, n_repeat=repeats, n_warmup=3, name="copy").gpu_times[0]
    return 2.0 * nbytes / float(np.median(times)) / 1e12

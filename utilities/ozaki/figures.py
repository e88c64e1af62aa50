"""The Ozaki-I track's figures from benchmark records (CPU-only: matplotlib, no GPU imports)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .. import plots
from ..bench import BenchRecord


def breakdown(records: Sequence[BenchRecord]) -> dict[str, dict[str, float]]:
    """Median ms per stage, per variant, for ``plots.time_breakdown``."""
    by_name = {r.name: r.time.median for r in records}
    out: dict[str, dict[str, float]] = {}
    for variant in ("unfused", "partial"):
        if f"ozaki.{variant}" in by_name:
            out[variant] = {
                "slicing": by_name["ozaki.slicing"],
                "products": by_name[f"ozaki.{variant}.products"],
                "epilogue": by_name[f"ozaki.{variant}.epilogue"],
            }
    if "ozaki.fused.kernel" in by_name:
        out["fused"] = {"slicing": by_name["ozaki.slicing"], "products + epilogue": by_name["ozaki.fused.kernel"]}
    if "cublas.dgemm" in by_name:
        out["cuBLAS DGEMM"] = {"DGEMM": by_name["cublas.dgemm"]}
    return out


def timed_alone(records: Sequence[BenchRecord]) -> list[BenchRecord]:
    """The records of the size benchmarks: not the accuracy sweeps (``phi``), not the interleaved headline."""
    return [r for r in records if "phi" not in r.params and "timing" not in r.params]


def save_plots(records: Sequence[BenchRecord], folder: str) -> list[str]:
    """The track's figures from one run's records: breakdown, throughput against size, accuracy (PNG files)."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    big = max(r.m for r in records)
    alone = timed_alone(records)
    at_big = [r for r in alone if r.m == big]
    paths = [out / "ozaki_breakdown.png", out / "ozaki_throughput.png", out / "ozaki_accuracy.png"]
    stages = ["slicing", "products", "epilogue", "products + epilogue", "DGEMM"]
    plots.time_breakdown(breakdown(at_big), stages=stages, path=paths[0])
    sweep = [r for r in alone if r.name in ("ozaki.fused", "cublas.dgemm")]
    plots.throughput_vs_size(sweep, title="Fully fused Ozaki-I (7 slices) and cuBLAS DGEMM", path=paths[1])
    acc = [r for r in records if "phi" in r.params and r.error]
    by_slices = sorted((r.params["slices"], r.error["normwise"]) for r in acc if r.name == "ozaki.fused"
                       and r.params["phi"] == 0.0)  # fmt: skip
    native = next((r.error["normwise"] for r in acc if r.name == "cublas.dgemm" and r.params["phi"] == 0.0), None)
    plots.accuracy_vs_slices([s for s, _ in by_slices], {"fused, GPU": [e for _, e in by_slices]}, native=native,
                             path=paths[2])  # fmt: skip
    return [str(p) for p in paths]

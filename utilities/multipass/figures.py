"""Figures of the multi-pass track (Matplotlib, no pyplot): the F sweep of registers, spills, occupancy and rate."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import plots
from ..bench import BenchRecord
from .config import DTYPES


def sweep_table(records: Sequence[BenchRecord], dtype: str = "int8") -> list[dict[str, Any]]:
    """One row per F of ``multipass.<dtype>``: F, registers, spills, occupancy, blocks_per_sm, smem, tflops."""
    rows = []
    for r in records:
        if r.name == f"multipass.{dtype}":
            keys = ("registers", "spills", "occupancy", "blocks_per_sm", "smem")
            rows.append({"F": r.params["F"], **{key: r.params[key] for key in keys}, "tflops": r.tflops})
    return sorted(rows, key=lambda row: row["F"])


def save_plots(records: Sequence[BenchRecord], folder: str | Path) -> list[str]:
    """The F-sweep figure (registers, spills, occupancy, throughput) of each dtype in ``records``, as PNGs."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for dtype in DTYPES:
        sweep = sweep_table(records, dtype)
        if sweep:
            path = folder / f"multipass_{dtype}.png"
            plots.registers_occupancy(sweep, title=f"{dtype}: fused passes F (F = N = 8 is full fusion)", path=path)
            paths.append(str(path))
    return paths

"""Figures of the multi-pass track (Matplotlib, no pyplot): the F sweep of registers, spills, occupancy and rate."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from .. import plots
from ..bench import BenchRecord
from .config import DTYPES


def sweep_table(records: Sequence[BenchRecord], dtype: str = "int8") -> list[dict[str, Any]]:
    """One row per F of the sweep of ``dtype`` (``multipass.F=<n>``; ``multipass.<dtype>`` in reports before
    2026-11-23): F, registers, spills, occupancy, blocks_per_sm, smem, tflops."""
    rows = []
    for r in records:
        current = r.name.startswith("multipass.F=") and r.params.get("dtype") == dtype
        if current or r.name == f"multipass.{dtype}":
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


def phase_timeline_picture(fused: int = 2, phases: int = 4, path: str | Path | None = None) -> Figure:
    """The double-buffered phase loop of one block: copies of phase g + 1 (into the other buffer) overlap the
    MMAs of phase g; each phase is ``fused`` passes; a barrier (copy_wait) starts every phase."""
    from matplotlib.patches import Rectangle

    fig = plots.new_figure(figsize=(9.0, 2.8))
    ax = fig.add_subplot()
    copy_len, mma_len = 1.0, 0.6 * fused
    t = 0.0
    ax.add_patch(Rectangle((0, 1), copy_len, 0.6, color="tab:orange"))
    ax.text(copy_len / 2, 1.3, "load 0 -> buf 0", ha="center", va="center", fontsize=7)
    t = copy_len
    for g in range(phases):
        ax.axvline(t, color="k", linewidth=0.8, linestyle=":")
        ax.text(t, 2.05, "wait + barrier", fontsize=6, ha="center")
        if g + 1 < phases:
            ax.add_patch(Rectangle((t, 1), copy_len, 0.6, color="tab:orange"))
            ax.text(t + copy_len / 2, 1.3, f"load {g + 1} -> buf {(g + 1) % 2}", ha="center", va="center", fontsize=7)
        ax.add_patch(Rectangle((t, 0), mma_len, 0.6, color="tab:green"))
        label = f"{fused} passes of phase {g}\n(buf {g % 2})"
        ax.text(t + mma_len / 2, 0.3, label, ha="center", va="center", fontsize=7)
        t += max(copy_len, mma_len)
    ax.set_xlim(0, t + 0.2)
    ax.set_ylim(-0.2, 2.3)
    ax.set_yticks([0.3, 1.3], ["tensor cores", "global -> shared"])
    ax.set_xticks([])
    ax.set_xlabel("time (one block)")
    ax.set_title(f"F = {fused}: a phase's MMAs hide the next phase's copy only if they last as long", fontsize=9)
    return plots.finish(fig, path)

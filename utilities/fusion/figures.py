"""Figures of the block-resident fusion track (Matplotlib, no pyplot; each returns its Figure)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from utilities.bench import BenchRecord

PATH_ORDER = ("fused", "persistent", "pipelined", "epilogue", "library", "separate")
LABELS = {
    "fused": "fused (one kernel)",
    "persistent": "fused, persistent",
    "pipelined": "fused, persistent, GEMM 0 pipelined",
    "epilogue": "library, fused epilogues",
    "library": "library GEMMs + elementwise",
    "separate": "library GEMM + elementwise",
}


def _record(r: BenchRecord | Mapping[str, Any]) -> BenchRecord:
    return r if isinstance(r, BenchRecord) else BenchRecord.from_dict(r)


def shape_label(r: BenchRecord) -> str:
    """ "M=2^17 576/64/128" for a back-to-back record, "2^16x256x256" for a GEMM one."""
    m = f"2^{r.m.bit_length() - 1}" if r.m & (r.m - 1) == 0 else str(r.m)
    if "n0" in r.params:
        batch = f" x{r.params['batch']}" if r.params.get("batch") else ""
        return f"M={m}{batch}\n{r.k}/{r.params['n0']}/{r.n}"
    return f"{m}x{r.n}x{r.k}"


def bandwidth_bars(
    records: Sequence[BenchRecord | Mapping[str, Any]],
    *,
    hbm_tbs: float | None = None,
    title: str = "Achieved bandwidth (compulsory bytes / time)",
    path: str | os.PathLike[str] | None = None,
) -> Figure:
    """Grouped bars of achieved GB/s, one group per shape and one bar per path, with the HBM ceiling drawn."""
    recs = [_record(r) for r in records if _record(r).bandwidth_tbs is not None]
    shapes: list[str] = []
    for r in recs:
        if shape_label(r) not in shapes:
            shapes.append(shape_label(r))
    paths = [p for p in PATH_ORDER if any(r.name.endswith("." + p) for r in recs)]
    fig = Figure(figsize=(max(6.0, 1.6 * len(shapes) + 2) + 2.5, 4.5))
    ax = fig.add_subplot()
    width = 0.8 / max(1, len(paths))
    for j, p in enumerate(paths):
        xs, ys = [], []
        for r in recs:
            if r.name.endswith("." + p):
                xs.append(shapes.index(shape_label(r)) + (j - (len(paths) - 1) / 2) * width)
                ys.append(r.bandwidth_tbs * 1e3)
        ax.bar(xs, ys, width, label=LABELS.get(p, p))
    if hbm_tbs:
        ax.axhline(hbm_tbs * 1e3, color="k", linestyle="--", linewidth=1, label=f"HBM {hbm_tbs:.2f} TB/s")
    ax.set_xticks(range(len(shapes)), shapes)
    ax.set_ylabel("GB/s")
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the axes: no bar hidden
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig


def save_plots(records: Sequence[BenchRecord], folder: str, hbm_tbs: float | None = None) -> list[str]:
    """The track's figures from one run's records (PNG files): back-to-back GEMMs and the warm-up."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for prefix, file in (("b2b.", "fusion_b2b_bandwidth.png"), ("gemm_bias_relu.", "fusion_epilogue_bandwidth.png")):
        chosen = [r for r in records if r.name.startswith(prefix)]
        if chosen:
            bandwidth_bars(chosen, hbm_tbs=hbm_tbs, path=out / file)
            paths.append(str(out / file))
    return paths

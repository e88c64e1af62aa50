"""Figures of the block-resident fusion track (no pyplot: each returns a ``plots.CourseFigure``, shown as a PNG)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from .. import plots
from ..bench import BenchRecord

PATH_ORDER = ("yours", "fused_keep_d0", "fused", "persistent", "pipelined", "epilogue", "library", "plain", "separate")
LABELS = {
    "yours": "your fused kernel",
    "fused_keep_d0": "fused, D0 also written",
    "fused": "fused (one kernel)",
    "persistent": "fused, persistent",
    "pipelined": "fused, persistent, GEMM 0 pipelined",
    "epilogue": "library, fused epilogues",
    "library": "library GEMMs + elementwise",
    "plain": "library GEMMs + elementwise",
    "separate": "library GEMM + elementwise",
}


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
    recs = [r for r in map(plots.as_record, records) if r.bandwidth_tbs is not None]
    shapes: list[str] = []
    for r in recs:
        if shape_label(r) not in shapes:
            shapes.append(shape_label(r))
    paths = [p for p in PATH_ORDER if any(r.name.endswith("." + p) for r in recs)]
    fig = plots.new_figure(figsize=(max(6.0, 1.6 * len(shapes) + 2) + 2.5, 4.5))
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


def b2b_dataflow_picture(path: str | os.PathLike[str] | None = None) -> Figure:
    """Back-to-back GEMMs: what goes through HBM on the library path, and what stays in one block when fused."""
    from matplotlib.patches import FancyBboxPatch

    fig = plots.new_figure(figsize=(10.0, 4.6))
    for k, (title, fused) in enumerate(
        (("library: two GEMMs, D0 through HBM", False), ("fused: one kernel, D0 stays in the block", True))
    ):
        ax = fig.add_subplot(1, 2, k + 1)
        ax.set_xlim(0, 10)
        ax.set_ylim(0, 10)
        ax.axis("off")
        ax.set_title(title, fontsize=10)
        ax.add_patch(FancyBboxPatch((0.2, 7.6), 9.6, 2.0, boxstyle="round,pad=0.1", color="#f2e6d9"))
        ax.text(0.4, 9.2, "HBM", fontsize=9, weight="bold")
        for x, name in ((0.8, "A0"), (2.3, "B0"), (6.0, "B1"), (7.5, "C1"), (8.8, "D1")):
            ax.text(x, 8.2, name, fontsize=9, ha="center")
        if not fused:
            ax.text(4.3, 8.2, "D0", fontsize=9, ha="center", color="tab:red", weight="bold")
        block = FancyBboxPatch((0.5, 0.4), 9.0, 5.6, boxstyle="round,pad=0.1", color="#e6eef7")
        ax.add_patch(block)
        ax.text(0.7, 5.6, "one block (a TM-row tile)" if fused else "two kernels", fontsize=9, weight="bold")
        steps = [
            (1.6, 3.2, "GEMM 0\nacc0 = A0 B0"),
            (4.3, 3.2, "relu(alpha0 acc0)\n-> D0 (FP16)"),
            (7.0, 3.2, "GEMM 1 on D0, B1\nrelu(alpha1 acc1\n+ beta1 C1)"),
        ]
        for x, y, text in steps:
            plots.diagram_box(ax, x, y, text)

        def arrow(a: tuple[float, float], b: tuple[float, float], color: str = "k", ax: Any = ax) -> None:
            plots.diagram_arrow(ax, a, b, color)

        arrow((0.8, 7.9), (1.3, 3.9))
        arrow((2.3, 7.9), (1.9, 3.9))
        arrow((2.5, 3.2), (3.3, 3.2))
        if fused:
            arrow((5.3, 3.2), (5.9, 3.2), "tab:green")
            ax.text(5.6, 1.9, "shared\nmemory", fontsize=7, ha="center", color="tab:green")
        else:
            arrow((4.3, 3.9), (4.3, 7.9), "tab:red")
            arrow((4.6, 7.9), (6.3, 4.1), "tab:red")
            ax.text(5.4, 6.3, "write D0,\nread it back", fontsize=7, color="tab:red")
        arrow((6.0, 7.9), (6.7, 4.1))
        arrow((7.5, 7.9), (7.3, 4.1))
        arrow((8.2, 3.9), (8.8, 7.9))
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig

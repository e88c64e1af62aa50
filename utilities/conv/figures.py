"""Figures of the convolution track (no pyplot: each returns a ``plots.CourseFigure``, shown as a PNG)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from .. import plots
from ..bench import BenchRecord
from .reference import ConvShape, neighbor_table

# the paths of ``benchmarks.conv_records`` (record ``conv.<path>``), in the bars' order, with their colours and labels
PATHS = ("twostage", "twostage.unfused", "cudnn", "im2col", "yours")
COLORS = {
    "twostage": "tab:green",
    "twostage.unfused": "tab:orange",
    "cudnn": "tab:blue",
    "im2col": "tab:grey",
    "yours": "tab:red",
}
LABELS = {
    "twostage": "two-stage kernel (conv.twostage)",
    "twostage.unfused": "two-stage, then bias + ReLU (conv.twostage.unfused)",
    "cudnn": "cuDNN (conv.cudnn)",
    "im2col": "im2col + cuBLAS (conv.im2col)",
    "yours": "yours (conv.yours)",
}
# reports written before the pipelined kernel took the name conv.fused (the H100 reports of 2026-11-23) named the
# two-stage kernel's records conv.fused and conv.unfused, with params["which"] "fused" and "unfused"
LEGACY = {("conv.fused", "fused"): "twostage", ("conv.unfused", "unfused"): "twostage.unfused"}


def path_of(record: BenchRecord) -> str:
    """The path a ``conv.*`` record times (``conv.twostage`` -> ``"twostage"``), reading the two-stage kernel's
    records of reports older than its name as ``"twostage"`` and ``"twostage.unfused"`` (``LEGACY``)."""
    legacy = LEGACY.get((record.name, record.params.get("which")))
    return legacy or record.name.split(".", 1)[1]


def implicit_gemm_picture(
    height: int = 5, width: int = 6, pixel: tuple[int, int] = (0, 2), path: str | os.PathLike[str] | None = None
) -> Figure:
    """One output pixel's 3x3 neighbourhood in the (padded) input, and the row of A it becomes: 9 taps of C_in
    channels, the taps outside the image zeros. Drawn from ``reference.neighbor_table``."""
    from matplotlib.patches import Rectangle

    shape = ConvShape(1, height, width, 1, 1)
    h0, w0 = pixel
    taps = neighbor_table(shape, np.array([h0 * width + w0]))[0]
    fig = plots.new_figure(figsize=(10.0, 3.8))
    ax, row = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    for h in range(-1, height + 1):
        for w in range(-1, width + 1):
            inside = 0 <= h < height and 0 <= w < width
            ax.add_patch(Rectangle((w, -h), 1, 1, facecolor="white" if inside else "#eeeeee", edgecolor="grey"))
            if inside:
                ax.text(w + 0.5, -h + 0.5, str(h * width + w), ha="center", va="center", fontsize=7, color="grey")
    for t, src in enumerate(taps):
        r, s = divmod(t, 3)
        h, w = h0 + r - 1, w0 + s - 1
        color = "tab:blue" if src >= 0 else "tab:red"
        ax.add_patch(Rectangle((w + 0.08, -h + 0.08), 0.84, 0.84, fill=False, edgecolor=color, linewidth=2))
    ax.add_patch(Rectangle((w0 + 0.2, -h0 + 0.2), 0.6, 0.6, facecolor="tab:green", alpha=0.35))
    ax.set_xlim(-1.2, width + 1.2)
    ax.set_ylim(-height - 0.2, 2.2)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(f"the input (grey: padding); pixel {h0 * width + w0}'s 3x3 taps", fontsize=9)
    for t, src in enumerate(taps):
        color = "tab:blue" if src >= 0 else "tab:red"
        row.add_patch(Rectangle((t, 0), 1, 1, facecolor=color, alpha=0.25, edgecolor="k"))
        row.text(
            t + 0.5,
            0.5,
            f"({t // 3},{t % 3})\n{'pixel ' + str(src) if src >= 0 else 'zeros'}",
            ha="center",
            va="center",
            fontsize=7,
        )
    row.set_xlim(-0.2, 9.2)
    row.set_ylim(-0.6, 1.6)
    row.axis("off")
    row.set_title(
        f"row {h0 * width + w0} of A: tap (r, s) holds C_in channels of the pixel it reads (K = 9 C_in)", fontsize=9
    )
    row.text(
        4.5,
        -0.4,
        "the kernel gathers these from the input through a table of the 9 pixels; A is never stored",
        ha="center",
        fontsize=8,
    )
    return plots.finish(fig, path)


def _shape(r: BenchRecord) -> tuple[int, ...]:
    p = r.params
    return (p["batch"], p["height"], p["width"], p["c_in"], p["c_out"])


def times_bars(records: Sequence[BenchRecord | Mapping[str, Any]], title: str = "") -> Figure:
    """Each path of ``benchmarks.conv_records`` against the two-stage kernel (``conv.twostage``), per shape: time
    over its time (lower is faster)."""
    recs = [r for r in map(plots.as_record, records) if r.name.startswith("conv.") and r.name != "conv.library"]
    times = {(_shape(r), path_of(r)): r.time.median for r in recs}
    shapes = list(dict.fromkeys(s for s, p in times if p == "twostage"))
    present = [p for p in PATHS if any((s, p) in times for s in shapes)]
    fig = plots.new_figure(figsize=(max(6.0, 1.6 * len(shapes) + 2), 3.8))
    ax = fig.add_subplot(1, 1, 1)
    width = 0.8 / max(1, len(present))
    for i, p in enumerate(present):
        xs = [j + i * width for j, s in enumerate(shapes) if (s, p) in times]
        ys = [times[(s, p)] / times[(s, "twostage")] for s in shapes if (s, p) in times]
        ax.bar(xs, ys, width, label=LABELS[p], color=COLORS[p])
    ax.axhline(1.0, color="k", linewidth=0.8)
    ax.set_xticks(np.arange(len(shapes)) + 0.4 - width / 2)
    ax.set_xticklabels([f"B={b} {h}x{w}\n{ci}->{co}" for b, h, w, ci, co in shapes], fontsize=8)
    ax.set_ylabel("time / two-stage kernel's time")
    ax.set_title(
        title or "3x3 conv + bias + ReLU: each path against 2c's two-stage kernel (above 1: slower)", fontsize=10
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def save_plots(records: Sequence[BenchRecord | Mapping[str, Any]], folder: str) -> list[str]:
    """Write the track's plots as PNG files into ``folder``; returns their paths."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "conv-paths.png"
    times_bars(records).savefig(path, dpi=120)
    return [str(path)]

"""Figures of the Ozaki-II track (no pyplot: each returns a ``plots.CourseFigure``, shown as a PNG)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from matplotlib.figure import Figure

from .. import plots

U = 2.0**-53


def error_vs_products(
    curves: Mapping[str, Sequence[tuple[int, float]]],
    *,
    native: float | None = None,
    title: str = "Accuracy against the int8 products spent",
    path: str | os.PathLike[str] | None = None,
) -> Figure:
    """Normwise error (log scale) against the number of int8 products, one curve per scheme, ``(products, error)``
    points; FP64 GEMM's error as a dashed line."""
    fig = plots.new_figure(figsize=(7.0, 4.2))
    ax = fig.add_subplot()
    for label, points in curves.items():
        xs, ys = zip(*points, strict=True)
        ax.semilogy(xs, ys, marker="o", label=label)
    if native is not None:
        ax.axhline(native, color="k", linestyle="--", linewidth=1, label=f"FP64 GEMM ({native:.1e})")
    ax.axhline(U, color="grey", linestyle=":", linewidth=1, label="u = 2^-53")
    ax.set_xlabel("int8 products (Ozaki-I: S(S+1)/2 for S slices; Ozaki-II: one per modulus)")
    ax.set_ylabel("normwise error vs exact")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig


STAGES = ("choice", "scaling", "products", "reconstruct")


def stages_against_floors(
    records: Sequence[plots.BenchRecord | Mapping],
    *,
    size: int | None = None,
    digits: str = "early",
    path: str | os.PathLike[str] | None = None,
) -> Figure:
    """Each stage of a design (per-modulus products, ``digits`` early or late: the choice and the scaling are the
    same in both) as a bar of its measured time beside its floor (``params["floor_ms"]``, from
    ``benchmarks.stage_records``), at ``size`` (the largest if None)."""
    recs = [plots.as_record(r) for r in records]
    recs = [
        r
        for r in recs
        if "floor_ms" in r.params
        and r.params.get("products", "per-modulus") == "per-modulus"
        and r.params.get("digits", digits) == digits
    ]
    size = size or max((r.m for r in recs), default=0)
    by = {r.name.split(".")[1]: r for r in recs if r.m == size}
    names = [s for s in STAGES if s in by]
    fig = plots.new_figure(figsize=(7.0, 3.8))
    ax = fig.add_subplot()
    xs = range(len(names))
    measured = [by[s].time.median for s in names]
    floor = [by[s].params["floor_ms"] for s in names]
    ax.bar([x - 0.2 for x in xs], measured, width=0.4, label="measured")
    ax.bar([x + 0.2 for x in xs], floor, width=0.4, label="floor (bytes at the copy rate, int8 ops at cuBLAS's rate)")
    for x, got, low in zip(xs, measured, floor, strict=True):
        ax.annotate(f"{got / low:.1f}x", (x - 0.2, got), ha="center", va="bottom", fontsize="small")
    ax.set_xticks(list(xs), names)
    ax.set_ylabel("ms")
    ax.set_title(f"Ozaki-II stages against their floors, {size}^3, digits {digits}")
    ax.legend(fontsize="small")
    return plots.finish(fig, path)

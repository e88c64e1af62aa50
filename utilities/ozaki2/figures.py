"""Figures of the Ozaki-II track (no pyplot: each returns a ``plots.CourseFigure``, shown as a PNG)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from matplotlib.figure import Figure

from .. import plots

U = 2.0**-53


def error_vs_products(curves: Mapping[str, Sequence[tuple[int, float]]], *, native: float | None = None,
                      title: str = "Accuracy against the int8 products spent",
                      path: str | os.PathLike[str] | None = None) -> Figure:  # fmt: skip
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

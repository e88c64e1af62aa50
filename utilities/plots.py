"""The course's plots: one line per provider, as in Triton's ``perf_report``; each returns its Figure.

Figures are built without pyplot (no global state, safe under any backend) as :class:`CourseFigure`, which
renders itself as a PNG wherever IPython displays it: a cell's last value, ``display(fig)``, nbconvert, nbval.
(A bare ``matplotlib.figure.Figure`` has no PNG representation of its own: ipykernel shows it as the text
``<Figure size ... with 1 Axes>`` unless pyplot's inline backend has registered a formatter.) Pass ``path`` to
also save one (PNG, SVG, PDF: by the suffix).
"""

from __future__ import annotations

import io
import itertools
import os
from collections.abc import Mapping, Sequence
from typing import Any

from matplotlib.figure import Figure

from .bench import BenchRecord
from .peaks import MeasuredCeilings, Peaks

PathLike = str | os.PathLike[str]
FP64_UNIT_ROUNDOFF = 2.0**-53
PNG_DPI = 100


class CourseFigure(Figure):
    """A Matplotlib ``Figure`` that IPython displays as a PNG image (``_repr_png_``), with or without pyplot."""

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.savefig(buffer, format="png", dpi=PNG_DPI, bbox_inches="tight")
        return buffer.getvalue()


def new_figure(**kwargs: Any) -> CourseFigure:
    """A :class:`CourseFigure` (``figsize`` and the rest as ``matplotlib.figure.Figure`` takes them)."""
    return CourseFigure(**kwargs)


def diagram_box(ax: Any, x: float, y: float, text: str) -> None:
    """A step of a concept diagram: ``text`` centred at (x, y) in a rounded white box."""
    bbox = {"boxstyle": "round", "facecolor": "white", "edgecolor": "grey"}
    ax.text(x, y, text, fontsize=8, ha="center", va="center", bbox=bbox)


def diagram_arrow(ax: Any, a: tuple[float, float], b: tuple[float, float], color: str = "k") -> None:
    """An arrow of a concept diagram, from ``a`` to ``b``."""
    from matplotlib.patches import FancyArrowPatch

    ax.add_patch(FancyArrowPatch(a, b, arrowstyle="-|>", mutation_scale=10, color=color, linewidth=1.2))


def finish(fig: Figure, path: PathLike | None) -> Figure:
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig


def as_record(r: BenchRecord | Mapping[str, Any]) -> BenchRecord:
    return r if isinstance(r, BenchRecord) else BenchRecord.from_dict(r)


def throughput_vs_size(
    records: Sequence[BenchRecord | Mapping[str, Any]],
    *,
    x: str = "n",
    title: str = "Throughput",
    ylabel: str = "TFLOP/s (TOPS for int8)",
    path: PathLike | None = None,
) -> Figure:
    """Median rate against size (``x`` is "m", "n" or "k"), one line per provider, the 20-80% band shaded."""
    if x not in ("m", "n", "k"):
        raise ValueError(f"x must be 'm', 'n' or 'k', got {x!r}")
    by_name: dict[str, list[BenchRecord]] = {}
    for r in map(as_record, records):
        by_name.setdefault(r.name, []).append(r)
    fig = new_figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    for name, recs in by_name.items():
        recs.sort(key=lambda r: getattr(r, x))
        xs = [getattr(r, x) for r in recs]
        (line,) = ax.plot(xs, [r.tflops for r in recs], marker="o", label=name)
        t = [r.time for r in recs]
        if all(ti.q20 is not None and ti.q80 is not None for ti in t):
            # the rate at the 80% time is the band's low edge, at the 20% time its high edge
            lo = [r.tflops * ti.median / ti.q80 for r, ti in zip(recs, t, strict=True)]
            hi = [r.tflops * ti.median / ti.q20 for r, ti in zip(recs, t, strict=True)]
            ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
    ax.set_xscale("log", base=2)
    ax.set_xlabel(x)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    return finish(fig, path)


def _error_plot(
    xs: Sequence[float],
    errors: Mapping[str, Sequence[float]],
    native: float | Mapping[str, float] | None,
    *,
    xlabel: str,
    title: str,
    unit_roundoff: bool,
    path: PathLike | None,
) -> Figure:
    fig = new_figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    for name, errs in errors.items():
        if len(errs) != len(xs):
            raise ValueError(f"{name}: {len(errs)} errors for {len(xs)} x values")
        ax.plot(xs, errs, marker="o", label=name)
    natives = {"native DGEMM": native} if isinstance(native, int | float) else dict(native or {})
    for (label, value), style in zip(natives.items(), itertools.cycle(("--", "-.", ":"))):
        ax.axhline(value, color="black", linestyle=style, label=label)
    if unit_roundoff:
        ax.axhline(FP64_UNIT_ROUNDOFF, color="grey", linestyle=":", label="fp64 unit roundoff 2^-53")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("relative error (normwise)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    return finish(fig, path)


def accuracy_vs_slices(
    slices: Sequence[int],
    errors: Mapping[str, Sequence[float]],
    *,
    native: float | Mapping[str, float] | None = None,
    title: str = "Accuracy of the emulation against the number of slices",
    unit_roundoff: bool = True,
    path: PathLike | None = None,
) -> Figure:
    """Error of each emulation variant per slice count (log scale), native DGEMM as horizontal lines."""
    return _error_plot(slices, errors, native, xlabel="slices", title=title, unit_roundoff=unit_roundoff, path=path)


def accuracy_vs_phi(
    phis: Sequence[float],
    errors: Mapping[str, Sequence[float]],
    *,
    native: float | Mapping[str, float] | None = None,
    title: str = "Accuracy against the exponent spread of the inputs",
    unit_roundoff: bool = True,
    path: PathLike | None = None,
) -> Figure:
    """Error per phi, the spread of the inputs' exponents (entries (rand - 0.5) * exp(phi * randn))."""
    return _error_plot(
        phis, errors, native, xlabel="phi (exponent spread)", title=title, unit_roundoff=unit_roundoff, path=path
    )


def roofline(
    points: Mapping[str, tuple[float, float]] | Sequence[tuple[str, float, float]],
    ceilings: MeasuredCeilings,
    *,
    peaks: Peaks | None = None,
    title: str = "Roofline (measured ceilings)",
    path: PathLike | None = None,
) -> Figure:
    """Each kernel a point (arithmetic intensity in FLOP/byte, TFLOP/s) under the roofs measured in the run.

    ``points`` maps a label to ``(intensity, rate)`` or lists ``(label, intensity, rate)``. Each measured
    compute roof bends down along the measured copy bandwidth; data-sheet ``peaks`` are drawn dashed.
    """
    items = list(points.items()) if isinstance(points, Mapping) else [(p[0], (p[1], p[2])) for p in points]
    if not items:
        raise ValueError("no points")
    intensities = [v[0] for _, v in items]
    if min(intensities) <= 0:
        raise ValueError("arithmetic intensities must be positive")
    lo, hi = min(intensities) / 8, max(intensities) * 8
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    fig = new_figure(figsize=(7, 4.5))
    ax = fig.add_subplot()

    def roof(label: str, rate: float, bandwidth: float | None, style: str) -> None:
        ys = [rate if bandwidth is None else min(rate, bandwidth * x) for x in xs]
        ax.plot(xs, ys, linestyle=style, label=label)

    for label, rate in ceilings.roofs().items():
        roof(f"{label} {rate:.4g}", rate, ceilings.copy_tbs, "-")
    if ceilings.copy_tbs is not None and not ceilings.roofs():
        ax.plot(xs, [ceilings.copy_tbs * x for x in xs], label=f"copy {ceilings.copy_tbs:.3g} TB/s")
    if peaks is not None:
        sheet = {"FP64 tensor": peaks.fp64_tensor_tflops or peaks.fp64_tflops, "int8 tensor": peaks.int8_tensor_tops}
        for label, rate in sheet.items():
            roof(f"{peaks.name} data sheet, {label} {rate:.4g}", rate, peaks.bandwidth_tbs, "--")
    for label, (intensity, rate) in items:
        ax.plot([intensity], [rate], marker="o", linestyle="none", label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("TFLOP/s (TOPS for int8)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    return finish(fig, path)


def time_breakdown(
    variants: Mapping[str, Mapping[str, float]],
    *,
    stages: Sequence[str] | None = None,
    unit: str = "ms",
    title: str = "Where the time goes",
    path: PathLike | None = None,
) -> Figure:
    """Stacked bars, one per variant, one segment per stage (slicing, products, epilogue by default)."""
    if not variants:
        raise ValueError("no variants")
    order = list(stages or ("slicing", "products", "epilogue"))
    for parts in variants.values():
        order += [s for s in parts if s not in order]
    fig = new_figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    names = list(variants)
    bottoms = [0.0] * len(names)
    for stage in order:
        heights = [float(variants[v].get(stage, 0.0)) for v in names]
        if any(heights):
            ax.bar(names, heights, bottom=bottoms, label=stage)
            bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    ax.set_ylabel(unit)
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_ylim(0, 1.4 * max(bottoms))  # room above the bars for the legend
    ax.legend(ncols=2, loc="upper right")
    return finish(fig, path)


SWEEP_PANELS = (
    ("registers", "registers per thread"),
    ("spills", "spilled bytes"),
    ("occupancy", "occupancy"),
    ("tflops", "TFLOP/s (TOPS for int8)"),
)


def registers_occupancy(
    sweep: Sequence[Mapping[str, float]],
    *,
    x: str = "F",
    title: str = "Fused passes: registers, spills, occupancy, throughput",
    path: PathLike | None = None,
) -> Figure:
    """Four panels against ``x`` (the number of fused passes F): registers, spills, occupancy, throughput.

    Each entry of ``sweep`` holds ``x`` and the keys registers, spills, occupancy and tflops.
    """
    if not sweep:
        raise ValueError("empty sweep")
    needed = [x, *(key for key, _ in SWEEP_PANELS)]
    for i, entry in enumerate(sweep):
        missing = [key for key in needed if key not in entry]
        if missing:
            raise KeyError(f"sweep[{i}] lacks {missing}")
    rows = sorted(sweep, key=lambda e: e[x])
    xs = [e[x] for e in rows]
    fig = new_figure(figsize=(9, 6))
    axes = fig.subplots(2, 2, sharex=True)
    for ax, (key, label) in zip(axes.flat, SWEEP_PANELS, strict=True):
        ax.plot(xs, [e[key] for e in rows], marker="o")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel(x)
    fig.suptitle(title)
    return finish(fig, path)

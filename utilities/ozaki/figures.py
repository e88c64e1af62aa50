"""The Ozaki-I track's figures from benchmark records (CPU-only: matplotlib, no GPU imports)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from matplotlib.figure import Figure

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
    by_slices = sorted(
        (r.params["slices"], r.error["normwise"]) for r in acc if r.name == "ozaki.fused" and r.params["phi"] == 0.0
    )
    native = next((r.error["normwise"] for r in acc if r.name == "cublas.dgemm" and r.params["phi"] == 0.0), None)
    plots.accuracy_vs_slices(
        [s for s, _ in by_slices], {"fused, GPU": [e for _, e in by_slices]}, native=native, path=paths[2]
    )
    return [str(p) for p in paths]


# ------------------------------------------------------------------------------------------------------------
# Pictures of the ideas (no measurements): what notebooks 3a and 3b explain
# ------------------------------------------------------------------------------------------------------------


def digits_picture(
    x: float = 3.14159265358979, row_max: float = 3.5, slices: int = 7, path: str | Path | None = None
) -> Figure:
    """The balanced base-256 digits of one number: one bar per slice, its digit and the weight 2^(e - 7 - 8s)."""
    import numpy as np

    from .slicing import row_shifts, slice_rows

    row = np.array([[x, row_max]])
    e = int(row_shifts(row)[0])
    digits = slice_rows(row, slices)[0][:, 0, 0].astype(int)
    fig = plots.new_figure(figsize=(7.5, 3.4))
    ax = fig.add_subplot()
    colors = ["tab:blue" if d >= 0 else "tab:red" for d in digits]
    ax.bar(range(slices), digits, color=colors)
    for s, d in enumerate(digits):
        ax.annotate(f"{d}\n2^{e - 7 - 8 * s}", (s, d), ha="center", va="bottom" if d >= 0 else "top", fontsize=8)
    ax.axhline(127, color="grey", linestyle=":", linewidth=1)
    ax.axhline(-128, color="grey", linestyle=":", linewidth=1)
    ax.set_ylim(-175, 175)
    ax.set_xticks(range(slices), [f"slice {s}" for s in range(slices)])
    ax.set_ylabel("digit (int8)")
    ax.set_title(f"x = {x!r} with row maximum {row_max}: e = {e}, x = sum_s digit_s 2^(e - 7 - 8s)", fontsize=9)
    return plots.finish(fig, path)


def anti_diagonals_picture(slices: int = 7, path: str | Path | None = None) -> Figure:
    """The S x S grid of slice products A_s B_t: the kept ones (s + t < S) coloured by anti-diagonal d = s + t,
    the dropped ones grey; each diagonal weighs 2^(-14 - 8d)."""
    import numpy as np
    from matplotlib import colormaps
    from matplotlib.patches import Rectangle

    fig = plots.new_figure(figsize=(5.6, 5.0))
    ax = fig.add_subplot()
    cmap = colormaps["viridis"]
    for s in range(slices):
        for t in range(slices):
            d = s + t
            kept = d < slices
            color = cmap(d / max(1, slices - 1)) if kept else (0.88, 0.88, 0.88)
            ax.add_patch(Rectangle((t, s), 0.95, 0.95, color=color))
            ax.text(
                t + 0.47,
                s + 0.5,
                f"d={d}" if kept else "",
                ha="center",
                va="center",
                fontsize=7,
                color="white" if kept and d < slices / 2 else "black",
            )
    ax.set_xlim(0, slices)
    ax.set_ylim(slices, 0)
    ax.set_xticks(np.arange(slices) + 0.47, [f"B_{t}" for t in range(slices)])
    ax.set_yticks(np.arange(slices) + 0.47, [f"A_{s}" for s in range(slices)])
    ax.set_title(
        f"{slices * (slices + 1) // 2} products kept, {slices * (slices - 1) // 2} dropped (grey): "
        "one anti-diagonal d sums in int32",
        fontsize=9,
    )
    ax.set_aspect("equal")
    return plots.finish(fig, path)


def launch_order(tiles_m: int, tiles_n: int, group: int | None) -> list[tuple[int, int]]:
    """The (row tile, column tile) of C that blocks 0, 1, 2, ... take: the grid's own order (blockIdx.x fastest,
    so down the columns) when ``group`` is None, else ``simt.grouped_tile``'s order with ``group`` row tiles."""
    order = []
    for block in range(tiles_m * tiles_n):
        if group is None:
            order.append((block % tiles_m, block // tiles_m))
            continue
        first = (block // (group * tiles_n)) * group
        size = min(tiles_m - first, group)
        order.append((first + block % size, (block % (group * tiles_n)) // size))
    return order


def grouped_order_picture(
    tiles_m: int = 16, tiles_n: int = 12, group: int = 8, running: int = 24, path: str | Path | None = None
) -> Figure:
    """The order in which blocks take the tiles of C, the grid's against grouped (``simt.grouped_tile``), with the
    first ``running`` blocks (those on the GPU at once) outlined: grouped, they read fewer tiles of A and B."""
    import numpy as np
    from matplotlib.patches import Rectangle

    orders = {
        "the grid's order": launch_order(tiles_m, tiles_n, None),
        f"grouped, {group} row tiles a group": launch_order(tiles_m, tiles_n, group),
    }
    fig = plots.new_figure(figsize=(9.5, 4.6))
    for k, (title, order) in enumerate(orders.items()):
        ax = fig.add_subplot(1, 2, k + 1)
        grid = np.full((tiles_m, tiles_n), np.nan)
        for block, (i, j) in enumerate(order):
            grid[i, j] = block
        ax.imshow(grid, cmap="Blues_r", aspect="auto")
        first = order[:running]
        for i, j in first:
            ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="tab:red", linewidth=1.5))
        rows_a, cols_b = len({i for i, _ in first}), len({j for _, j in first})
        ax.set_title(
            f"{title}: the first {running} blocks\nread {rows_a} row tiles of A and {cols_b} column tiles of B",
            fontsize=9,
        )
        ax.set_xlabel("column tile of C")
        ax.set_ylabel("row tile of C")
    return plots.finish(fig, path)

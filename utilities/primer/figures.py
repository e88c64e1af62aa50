"""The primer's picture: where the nvmath.device objects of a block GEMM live, and the calls that move data."""

from __future__ import annotations

import os

from matplotlib.figure import Figure

from .. import plots


def kib(nbytes: float) -> str:
    """``16384`` -> ``"16 KiB"``; below 1 KiB, bytes."""
    return f"{nbytes / 1024:.3g} KiB" if nbytes >= 1024 else f"{nbytes:.0f} B"


def inventory(
    tile: tuple[int, int, int], threads: int, in_bytes: int = 2, acc_bytes: int = 4, depth: int = 2
) -> dict[str, str]:
    """What one block holds at each level for a (TM, TN, TK) tile: the labels of the picture.

    ``in_bytes`` and ``acc_bytes``: bytes of an operand and of an accumulator element; ``depth``: a device
    pipeline's stages in flight (each one tile of A and one of B).
    """
    tm, tn, tk = tile
    a, b = tm * tk * in_bytes, tk * tn * in_bytes
    return {
        "a_tile": f"A tile {tm} x {tk}: {kib(a)}",
        "b_tile": f"B tile {tk} x {tn}: {kib(b)}",
        "c_tile": f"C tile {tm} x {tn}: {kib(tm * tn * acc_bytes)}",
        "smem": f"sa, sb: {kib(a + b)} a block",
        "stages": f"{depth} stages: {kib(depth * (a + b))} a block",
        "fragment": f"acc: {tm * tn // threads} values a thread ({threads} threads)",
    }


def memory_picture(
    tile: tuple[int, int, int] = (128, 128, 64),
    threads: int = 128,
    *,
    in_bytes: int = 2,
    acc_bytes: int = 4,
    depth: int = 2,
    path: str | os.PathLike[str] | None = None,
) -> Figure:
    """Three levels of memory, one block's objects on each, and the calls that move data between them: on the left a
    block ``Matmul`` written by hand (copy, copy_wait, execute, store), on the right a ``DevicePipeline``."""
    from matplotlib.patches import FancyBboxPatch

    labels = inventory(tile, threads, in_bytes, acc_bytes, depth)
    fig = plots.new_figure(figsize=(11.0, 6.0))
    ax = fig.add_subplot()
    ax.set_xlim(0, 22)
    ax.set_ylim(0, 11)
    ax.axis("off")
    levels = (
        (7.6, "#f2e6d9", "global memory (HBM): the whole GPU's; large, far"),
        (4.0, "#e6eef7", "shared memory: one block's, on its SM; small, near"),
        (0.4, "#e8f4e4", "registers: one thread's; nearest"),
    )
    for y, color, title in levels:
        ax.add_patch(FancyBboxPatch((0.2, y), 21.6, 2.4, boxstyle="round,pad=0.1", color=color))
        ax.text(0.4, y + 2.05, title, fontsize=9, weight="bold")

    def box(x: float, y: float, text: str) -> None:
        plots.diagram_box(ax, x, y, text)

    def arrow(a: tuple[float, float], b: tuple[float, float], color: str = "k") -> None:
        plots.diagram_arrow(ax, a, b, color)

    def note(x: float, y: float, text: str, color: str = "k") -> None:
        backdrop = {"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none", "alpha": 0.85}
        ax.text(x, y, text, fontsize=7.5, color=color, va="center", zorder=3, bbox=backdrop)

    # a block Matmul by hand (the exercise)
    ax.text(5.6, 10.6, "a block Matmul, by hand", fontsize=10, ha="center", weight="bold")
    box(2.4, 8.6, labels["a_tile"])
    box(6.2, 8.6, labels["b_tile"])
    box(9.6, 8.6, labels["c_tile"])
    box(4.3, 5.0, f"sa, sb = make_tensor(smem, MM.suggest_layout_smem_a/b())\n{labels['smem']}")
    box(4.3, 1.4, f"acc = MM.suggest_accumulator()\n{labels['fragment']}")
    arrow((2.4, 8.2), (3.5, 5.5))
    arrow((6.2, 8.2), (5.1, 5.5))
    note(0.4, 6.95, "copy(a_tile, sa),\ncopy(b_tile, sb):\nasynchronous;\nthen copy_wait()")
    arrow((4.3, 4.5), (4.3, 1.9), "tab:green")
    note(4.5, 3.4, "MM.execute(sa, sb, acc): tensor cores", "tab:green")
    arrow((6.9, 1.6), (9.6, 8.2), "tab:red")
    note(8.9, 5.0, "acc.partition_and_copy(\n  acc.get_results(), c_tile)", "tab:red")

    # a device pipeline (3b-3d, 2b's pipelined kernel)
    ax.text(17.0, 10.6, "a DevicePipeline", fontsize=10, ha="center", weight="bold")
    box(14.8, 8.6, "A, B: whole arrays (the pipeline is made\non the host: suggest_device_pipeline)")
    box(20.2, 8.6, "C")
    box(15.4, 5.0, f"pipeline stages, filled by TMA\n{labels['stages']}")
    box(15.4, 1.4, "acc (registers)")
    arrow((14.8, 8.0), (15.2, 5.5))
    note(
        10.7, 7.0, "tile = get_tile(smem, (i, s), (j, t));\nreset_tile(tile, (i, s2), (j, t2))\nre-points the same tile"
    )
    arrow((15.4, 4.5), (15.4, 1.9), "tab:green")
    note(15.6, 3.4, "tile.execute(acc):\nthe whole K loop", "tab:green")
    arrow((17.0, 1.6), (20.2, 8.2), "tab:red")
    note(18.9, 5.0, "the same store", "tab:red")
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig

"""What an attendee sees: the CPU notebooks, executed in a fresh Jupyter kernel as JupyterLab runs them, show every
figure as an image (a figure that does not render shows as the text ``<Figure size ... with 1 Axes>``)."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from utilities import execution
from utilities.notebooks import SOLUTIONS

ROOT = Path(__file__).resolve().parent.parent
CPU_NOTEBOOKS = sorted(
    p.stem
    for p in (ROOT / SOLUTIONS).glob("*.ipynb")
    if json.loads(p.read_text()).get("metadata", {}).get("course", {}).get("gpu", True) is False
)


def test_the_figure_check_sees_a_figure_that_does_not_render() -> None:
    """The check itself: a bare Matplotlib Figure (no pyplot) shows as text, the course's as an image."""
    nb = nbformat.v4.new_notebook()
    plot = "fig.add_subplot().plot([1, 2])\nfig"
    nb.cells = [
        nbformat.v4.new_code_cell(f"from matplotlib.figure import Figure\nfig = Figure()\n{plot}"),
        nbformat.v4.new_code_cell(f"from utilities import plots\nfig = plots.new_figure()\n{plot}"),
    ]
    run = execution.execute(nb, ROOT)
    assert run.passed, run.error
    assert [line.split(":")[0] for line in execution.figures_without_images(run.notebook)] == ["code cell 0"]
    assert execution.images(run.notebook) == 1


@pytest.mark.slow
@pytest.mark.parametrize("stem", CPU_NOTEBOOKS)
def test_every_figure_of_a_cpu_notebook_is_an_image(stem: str) -> None:
    nb = nbformat.read(ROOT / SOLUTIONS / f"{stem}.ipynb", as_version=4)
    run = execution.execute(nb, ROOT / SOLUTIONS)
    assert run.passed, run.error
    assert not execution.figures_without_images(run.notebook), execution.figures_without_images(run.notebook)
    assert execution.images(run.notebook) > 0, f"{stem} shows no image at all"

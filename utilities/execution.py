"""Run a notebook as an attendee's JupyterLab does: in a fresh Jupyter kernel (nbclient), in the notebook's
folder, with whatever backend the kernel picks (no ``%matplotlib agg`` that would hide a figure that does not
render), and report what happened cell by cell.

Used by the CPU tests (figures must come out as images), the workshop run-through and the GPU ledger.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat

# the text a Matplotlib figure shows when nothing renders it as an image
FIGURE_TEXT = re.compile(r"<(?:[\w.]+\.)?\w*Figure size \d+(?:\.\d+)?x\d+(?:\.\d+)? with \d+ Axes>")


@dataclass
class CellRun:
    """One code cell: its index among the code cells, seconds, and the error it raised ("" if none)."""

    index: int
    seconds: float
    error: str = ""


@dataclass
class Execution:
    """A notebook run: the executed notebook, its code cells' runs, and the first error (empty if none)."""

    notebook: nbformat.NotebookNode
    cells: list[CellRun] = field(default_factory=list)
    wall_s: float = 0.0
    error: str = ""

    @property
    def passed(self) -> bool:
        return not self.error


def _error_text(output: Any) -> str:
    tail = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in output.get("traceback", [])][-6:]
    return f"{output.get('ename', 'Error')}: {output.get('evalue', '')}\n" + "\n".join(tail)


def execute(
    nb: nbformat.NotebookNode, cwd: Path, *, timeout: float = 1800, kernel: str = "python3", stop_on_error: bool = True
) -> Execution:
    """Execute ``nb`` in a fresh kernel started in ``cwd``; a cell tagged ``raises-exception`` may raise."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.from_dict(nb)
    client = NotebookClient(nb, timeout=timeout, kernel_name=kernel, resources={"metadata": {"path": str(cwd)}},
                            allow_errors=not stop_on_error)  # fmt: skip
    run = Execution(nb)
    start = time.perf_counter()
    with client.setup_kernel():
        index = -1
        for cell_number, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            index += 1
            began = time.perf_counter()
            try:
                client.execute_cell(cell, cell_number)
            except CellExecutionError:
                pass  # the cell's error output says what happened
            errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
            allowed = "raises-exception" in cell.metadata.get("tags", [])
            text = _error_text(errors[0]) if errors and not allowed else ""
            run.cells.append(CellRun(index, time.perf_counter() - began, text))
            if text and not run.error:
                run.error = f"code cell {index}: {text}"
                if stop_on_error:
                    break
    run.wall_s = time.perf_counter() - start
    return run


def figures_without_images(nb: nbformat.NotebookNode) -> list[str]:
    """Where a figure came out as its text (``<Figure size ... with 1 Axes>``) and not as an image: one line each,
    naming the code cell."""
    found, index = [], -1
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        index += 1
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            text = data.get("text/plain", "")
            text = "".join(text) if isinstance(text, list) else text
            if "image/png" not in data and FIGURE_TEXT.search(text):
                found.append(f"code cell {index}: {FIGURE_TEXT.search(text).group(0)} with no image/png")
    return found


def images(nb: nbformat.NotebookNode) -> int:
    """How many PNG images the executed notebook shows."""
    return sum(
        "image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
    )

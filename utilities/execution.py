"""Run a notebook as an attendee's JupyterLab does: in a fresh Jupyter kernel (nbclient), with whatever backend the
kernel picks (no ``%matplotlib agg`` that would hide a figure that does not render), and report what happened cell
by cell, with the full traceback of the first cell that failed.

Used by the CPU tests (figures must come out as images), the workshop run-through and the GPU ledger.

Where the kernel runs: by default in a private folder of its own (a copy of nothing: the course's notebooks read
no file relative to their folder), never in the checkout's ``notebooks/``. A lent GPU machine gets the working tree
copied anew at every call, and a process whose working folder is replaced under it fails at the next call that
needs the folder's name: ``os.getcwd()``, ``os.path.abspath`` of a relative path, an import that resolves one
(numba's imports do). Each of those raises ``FileNotFoundError: [Errno 2] No such file or directory`` with no file
name, which is how the first run-through on a GPU stopped in notebooks 1 and 4b (tests/test_tooling_execution.py shows
it). The kernel finds this checkout's ``utilities`` through ``PYTHONPATH``, whatever its folder.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat

REPO_ROOT = Path(__file__).resolve().parent.parent
# the text a Matplotlib figure shows when nothing renders it as an image
FIGURE_TEXT = re.compile(r"<(?:[\w.]+\.)?\w*Figure size \d+(?:\.\d+)?x\d+(?:\.\d+)? with \d+ Axes>")
RAISES_TAG = "raises-exception"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class CellRun:
    """One code cell: its index among the code cells, seconds, and the error it raised ("" if none)."""

    index: int
    seconds: float
    error: str = ""
    traceback: str = ""


@dataclass
class Execution:
    """A notebook run: the executed notebook, its code cells' runs, the first error (empty if none) and its full
    traceback."""

    notebook: nbformat.NotebookNode
    cells: list[CellRun] = field(default_factory=list)
    wall_s: float = 0.0
    error: str = ""
    traceback: str = ""

    @property
    def passed(self) -> bool:
        return not self.error


def _error_text(output: Any) -> tuple[str, str]:
    """(``Name: value`` with the traceback's last lines, the whole traceback), colours removed."""
    lines = [_ANSI.sub("", line) for line in output.get("traceback", [])]
    head = f"{output.get('ename', 'Error')}: {output.get('evalue', '')}"
    return head + "\n" + "\n".join(lines[-6:]), "\n".join(lines) or head


SIMULATOR_SWITCHES = ("NUMBA_ENABLE_CUDASIM", "COURSE_SIMULATOR_AUTO")


def python_env(root: Path = REPO_ROOT, *, simulator: bool = True, **extra: str) -> dict[str, str]:
    """The environment of a Python process started from here: this one, with ``root`` first on ``PYTHONPATH`` (its
    ``utilities`` is imported) and what the path held kept after it (a GPU machine's packages may live there:
    ``../shared/gpu/setup.sh`` puts nvmath under /tmp/site), numba's simulator switches left out unless
    ``simulator``, then ``extra``."""
    env = {k: v for k, v in os.environ.items() if simulator or k not in SIMULATOR_SWITCHES}
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(p for p in (str(root), env.get("PYTHONPATH", "")) if p))
    return {**env, **extra}


def kernel_env(root: Path = REPO_ROOT) -> dict[str, str]:
    """A Jupyter kernel's environment: :func:`python_env`, unbuffered."""
    return python_env(root, PYTHONUNBUFFERED="1")


@contextmanager
def private_folder(prefix: str = "course-run-") -> Iterator[Path]:
    """A folder of the kernel's own, removed afterwards (see the module docstring)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class Kernel:
    """A fresh Jupyter kernel that runs code cells one at a time and records each (see :func:`execute`).

    ``with Kernel(cwd) as kernel: kernel.run(cell, index)``; cells run are appended to ``kernel.notebook``.
    """

    def __init__(
        self,
        cwd: Path | None = None,
        *,
        timeout: float = 1800,
        kernel: str = "python3",
        env: dict[str, str] | None = None,
        notebook: nbformat.NotebookNode | None = None,
    ):
        self.cwd, self.timeout, self.kernel_name = cwd, timeout, kernel
        self.env = env if env is not None else kernel_env()
        self.notebook = nbformat.from_dict(notebook) if notebook is not None else nbformat.v4.new_notebook()
        self._client: Any = None
        self._stack: list[Any] = []

    def __enter__(self) -> Kernel:
        from nbclient import NotebookClient

        cwd = self.cwd
        if cwd is None:
            holder = private_folder()
            cwd = holder.__enter__()
            self._stack.append(holder)
        self.folder = Path(cwd)
        self._client = NotebookClient(
            self.notebook,
            timeout=self.timeout,
            kernel_name=self.kernel_name,
            resources={"metadata": {"path": str(cwd)}},
            allow_errors=True,
        )
        setup = self._client.setup_kernel(env=self.env)
        try:
            setup.__enter__()
        except BaseException:
            self.__exit__(None, None, None)  # the kernel did not start: remove the private folder, then say why
            raise
        self._stack.append(setup)
        return self

    def __exit__(self, *exc: Any) -> None:
        while self._stack:
            self._stack.pop().__exit__(*exc)

    def run_cell(self, cell: nbformat.NotebookNode, position: int, index: int) -> CellRun:
        """Run ``cell`` (at ``position`` in the notebook, ``index`` among its code cells); a cell tagged
        ``raises-exception`` may raise."""
        from nbclient.exceptions import CellExecutionError

        began = time.perf_counter()
        try:
            self._client.execute_cell(cell, position)
        except CellExecutionError:
            pass  # the cell's error output says what happened
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        allowed = RAISES_TAG in cell.metadata.get("tags", [])
        short, full = _error_text(errors[0]) if errors and not allowed else ("", "")
        return CellRun(index, time.perf_counter() - began, short, full)

    def run(self, source: str, index: int = -1) -> tuple[CellRun, nbformat.NotebookNode]:
        """Append a code cell holding ``source`` to the notebook and run it: its run and the executed cell."""
        cell = nbformat.v4.new_code_cell(source)
        self.notebook.cells.append(cell)
        return self.run_cell(cell, len(self.notebook.cells) - 1, index), cell


def execute(
    nb: nbformat.NotebookNode,
    cwd: Path | None = None,
    *,
    timeout: float = 1800,
    kernel: str = "python3",
    stop_on_error: bool = True,
    env: dict[str, str] | None = None,
) -> Execution:
    """Execute ``nb`` in a fresh kernel started in ``cwd`` (default: a private folder, see the module docstring)."""
    with Kernel(cwd, timeout=timeout, kernel=kernel, env=env, notebook=nb) as session:
        return run_all(session, stop_on_error)


def run_all(session: Kernel, stop_on_error: bool = True) -> Execution:
    """Run every code cell of the session's notebook, top to bottom (stopping at the first error if asked)."""
    run = Execution(session.notebook)
    start = time.perf_counter()
    index = -1
    for position, cell in enumerate(session.notebook.cells):
        if cell.cell_type != "code":
            continue
        index += 1
        cell_run = session.run_cell(cell, position, index)
        run.cells.append(cell_run)
        if cell_run.error and not run.error:
            run.error, run.traceback = f"code cell {index}: {cell_run.error}", cell_run.traceback
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


def stream_text(cell: nbformat.NotebookNode) -> str:
    """What a cell printed to stdout."""
    return "".join(
        o.get("text", "")
        for o in cell.get("outputs", [])
        if o.get("output_type") == "stream" and o.get("name") == "stdout"
    )

"""``utilities.execution``: a notebook in a fresh Jupyter kernel, and why that kernel does not run in ``notebooks/``.

The first run-through on a GPU stopped in notebooks 1 and 4b with ``FileNotFoundError: [Errno 2] No such file or
directory`` and no file name, at cells that ran fine when started again. A lent GPU machine gets the working tree
copied anew at every call (the lead polls a background run with such calls): a process whose working folder is
replaced under it fails at the next call that needs the folder's name, with exactly that message.
"""

from __future__ import annotations

from pathlib import Path

import nbformat

from utilities import execution

# what a re-copied working tree does to the folder a kernel runs in: the same path, a new folder
REPLACE = "import os, shutil\nshutil.rmtree({folder!r})\nos.mkdir({folder!r})"
NEEDS_CWD = "import os\nprint(os.path.abspath('relative'))\nprint(os.getcwd())"


def _notebook(*sources: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in sources]
    return nb


def test_a_kernel_whose_folder_is_replaced_fails_as_the_gpu_run_through_did(tmp_path: Path) -> None:
    folder = tmp_path / "notebooks"
    folder.mkdir()
    run = execution.execute(_notebook(REPLACE.format(folder=str(folder)), NEEDS_CWD), folder)
    assert not run.passed
    assert run.error.splitlines()[0] == "code cell 1: FileNotFoundError: [Errno 2] No such file or directory"
    assert "abspath" in run.traceback  # the whole traceback is kept, not only its last lines


def test_the_default_folder_is_private_so_a_replaced_checkout_does_not_matter(tmp_path: Path) -> None:
    folder = tmp_path / "notebooks"
    folder.mkdir()
    run = execution.execute(_notebook(REPLACE.format(folder=str(folder)), NEEDS_CWD, "import utilities"))
    assert run.passed, run.traceback
    assert str(folder) not in execution.stream_text(run.notebook.cells[1])


def test_a_session_runs_more_cells_in_the_same_kernel_and_records_each() -> None:
    with execution.Kernel(timeout=120) as session:
        first, _ = session.run("x = 41")
        second, cell = session.run("x += 1\nprint(x)")
        failed, _ = session.run("raise ValueError('named')")
        folder = session.folder
        assert folder.is_dir()
    assert not first.error and not second.error and execution.stream_text(cell) == "42\n"
    assert failed.error.startswith("ValueError: named") and "ValueError" in failed.traceback
    assert not folder.exists()  # the private folder goes with the kernel


def test_a_cell_tagged_raises_exception_may_raise(tmp_path: Path) -> None:
    nb = _notebook("raise RuntimeError('expected')", "y = 1")
    nb.cells[0].metadata["tags"] = [execution.RAISES_TAG]
    run = execution.execute(nb, tmp_path)
    assert run.passed and [c.error for c in run.cells] == ["", ""]


def test_a_started_python_finds_the_course_first_and_keeps_the_path_it_was_given(monkeypatch) -> None:
    monkeypatch.setenv("PYTHONPATH", "/tmp/site")
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    env = execution.python_env(Path("/course"), simulator=False, EXTRA="1")
    assert env["PYTHONPATH"].split(":") == ["/course", "/tmp/site"]
    assert "NUMBA_ENABLE_CUDASIM" not in env and env["EXTRA"] == "1"
    assert execution.python_env(Path("/course"))["NUMBA_ENABLE_CUDASIM"] == "1"
    monkeypatch.delenv("PYTHONPATH")
    assert execution.python_env(Path("/course"))["PYTHONPATH"] == "/course"

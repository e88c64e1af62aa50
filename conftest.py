"""Collection rules of the course's tests.

- nbval (``--nbval-lax``, see pyproject.toml) runs the notebooks in ``solutions/`` and ``notebooks/``, but for the
  CPU solution notebooks: ``tests/test_course_notebook_figures.py`` executes those, once a session.
  A notebook is CPU-only when its metadata holds ``"course": {"gpu": false}``; any other notebook needs a GPU:
  without one it shows as skipped with the reason, and with one its cells carry the ``gpu`` marker.
  Their kernels find ``utilities`` in this checkout.
- Tests marked ``@pytest.mark.gpu`` are skipped with the reason when no NVIDIA GPU is present.
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path

import pytest

from utilities.preflight import probe_gpus

ROOT = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    # Notebook kernels (nbval) import `utilities` from this checkout, installed or not.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))


@cache
def no_gpu_reason() -> str:
    """Why GPU work cannot run here ("" when an NVIDIA GPU is usable)."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0") and "COURSE_SIMULATOR_AUTO" not in os.environ:
        return "no NVIDIA GPU: NUMBA_ENABLE_CUDASIM=1 puts numba-cuda in its simulator"
    gpus, problem, _ = probe_gpus()
    return "" if gpus else f"no NVIDIA GPU: {problem} (run GPU work on a GPU machine: ./course gpu-suite)"


# Without a GPU, the plain numba kernels run in numba's CUDA simulator (tests/test_*_kernels.py): it has to be
# chosen before anything imports numba.cuda. With a GPU the same tests run on the device.
if no_gpu_reason() and "NUMBA_ENABLE_CUDASIM" not in os.environ:
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    os.environ["COURSE_SIMULATOR_AUTO"] = "1"


def notebook_needs_gpu(path: Path) -> bool:
    """True unless the notebook's metadata says ``"course": {"gpu": false}``."""
    metadata = json.loads(path.read_text(encoding="utf-8")).get("metadata", {})
    return metadata.get("course", {}).get("gpu", True) is not False


class SkippedNotebook(pytest.File):
    """A GPU notebook on a machine without a GPU: reported as skipped, with the reason."""

    reason = ""

    def collect(self):
        pytest.skip(self.reason)


@pytest.hookimpl(wrapper=True)
def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    collected = yield
    option = parent.config.option
    nbval_on = getattr(option, "nbval", False) or getattr(option, "nbval_lax", False)
    if file_path.suffix != ".ipynb" or not nbval_on:
        return collected
    if not notebook_needs_gpu(file_path):
        # A CPU solution notebook runs once a session, in tests/test_course_notebook_figures.py (every cell without
        # an error, every figure an image); nbval runs the exercise notebooks.
        return [] if file_path.parent == ROOT / "solutions" else collected
    reason = no_gpu_reason()
    if not reason:
        for collector in collected:
            collector.add_marker(pytest.mark.gpu)
        return collected
    skipped = SkippedNotebook.from_parent(parent, path=file_path)
    skipped.reason = f"{file_path.parent.name}/{file_path.name}: {reason}"
    return [skipped]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("gpu") and no_gpu_reason():
            item.add_marker(pytest.mark.skip(reason=no_gpu_reason()))

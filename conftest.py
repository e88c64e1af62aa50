"""Collection rules of the course's tests.

- nbval (``--nbval-lax``, see pyproject.toml) runs the notebooks in ``solutions/`` and ``notebooks/``, but for the
  CPU solution notebooks: ``tests/test_course_notebook_figures.py`` executes those, once a session.
  A notebook is CPU-only when its metadata holds ``"course": {"gpu": false}``; any other notebook needs a GPU:
  without one it shows as skipped with the reason, and with one its cells carry the ``gpu`` marker.
  Their kernels find ``utilities`` in this checkout.
- Tests marked ``@pytest.mark.gpu`` are skipped with the reason when no NVIDIA GPU is present.
- Without a GPU a test that runs past ``COURSE_TEST_LIMIT_S`` seconds (default 300) stops the run: its stacks are
  printed and pytest exits with status 3, so that a hang (numba's simulator can stall on its locks) is a named
  failure in minutes, not a CI run killed after its hour and a half. ``COURSE_TEST_LIMIT_S=0`` turns the guard off.
- Files run longest first (``utilities.suite_order``, from ``tests/file_seconds.json``), each in its own order.
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
import threading
from functools import cache
from pathlib import Path

import pytest

from utilities import suite_order
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
if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
    # device functions that never name `cuda` skip the simulator's per-call module swap and its locks
    from utilities.machinery.simulator import call_device_functions_directly

    call_device_functions_directly()


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
    # the longest files first (tests/file_seconds.json), so that ./course test's processes end together
    order = suite_order.longest_first([item.nodeid for item in items], suite_order.load())
    items[:] = [items[i] for i in order]


def test_time_limit() -> float:
    """Seconds a test may run before the guard stops the run (0: no guard). With a GPU there is no guard."""
    value = os.environ.get("COURSE_TEST_LIMIT_S", "300" if no_gpu_reason() else "0")
    try:
        return float(value)
    except ValueError:
        problem = f"COURSE_TEST_LIMIT_S={value!r} is not a number of seconds (0 turns the guard off)"
        raise pytest.UsageError(problem) from None


test_time_limit.__test__ = False  # a helper, not a test


def _stop_the_run(item: pytest.Item, limit: float) -> None:
    capture = item.config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        capture.suspend_global_capture(in_=True)
    sys.stderr.write(
        f"\n{item.nodeid} ran past {limit:g} s (COURSE_TEST_LIMIT_S): the run stops here. "
        "The stacks of every thread follow; make the test smaller for the simulator or move it to the GPU suite.\n"
    )
    sys.stderr.flush()
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    sys.stderr.flush()
    os._exit(3)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    limit = test_time_limit()
    if limit <= 0:
        return (yield)
    timer = threading.Timer(limit, _stop_the_run, (item, limit))
    timer.daemon = True
    timer.start()
    try:
        return (yield)
    finally:
        timer.cancel()

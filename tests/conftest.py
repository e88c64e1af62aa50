"""Fixtures shared by the test modules."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def ptx_written(tmp_path) -> Callable[[str], dict[str, str]]:
    """``ptx_written(script)``: runs ``script`` in a fresh interpreter outside numba's simulator, with ``tmp_path`` as
    its argument; the script compiles kernels to PTX, writes each as a ``.ptx`` file there and prints "ok". Returns
    the files' texts by name (they stay in ``tmp_path`` for ptxas)."""

    def run(script: str) -> dict[str, str]:
        from utilities.execution import python_env

        done = subprocess.run(
            [sys.executable, "-c", script, str(tmp_path)],
            cwd=ROOT,
            env=python_env(simulator=False),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
        return {path.name: path.read_text() for path in sorted(tmp_path.glob("*.ptx"))}

    return run


@pytest.fixture
def define(tmp_path) -> Callable[[str, str], Any]:
    """``define(source, name)``: the function ``name`` from ``source``, compiled from a real file.

    The checkers read an exercise's source to tell a placeholder from a wrong answer, so it must live in a file.
    """

    def make(source: str, name: str) -> Any:
        path = tmp_path / f"{name}.py"
        path.write_text(source)
        namespace: dict[str, Any] = {}
        exec(compile(source, str(path), "exec"), namespace)
        return namespace[name]

    return make


@pytest.fixture(scope="session")
def mutation_tool() -> Any:
    """``tools/mutation_test.py`` as a module, loaded once (importing it selects numba's simulator)."""
    spec = importlib.util.spec_from_file_location("mutation_test_for_tests", ROOT / "tools" / "mutation_test.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def judged(mutation_tool: Any) -> Callable[..., Any]:
    """``judged(mistake_or_alternative, seeds)``: the mutation tool's verdict on it, on its exercise's solution."""
    from utilities import mutants

    def judge(item: Any, seeds: tuple[int, ...]) -> Any:
        text, build, run, _ = mutation_tool.EXERCISES[item.exercise]()
        return mutants.judge(item, text, build, run, seeds)

    return judge


@pytest.fixture(scope="module")
def gpu():
    """CuPy, with the course's build cache on (a GPU test module's kernels build once)."""
    import cupy as cp

    from utilities.machinery import buildcache

    buildcache.install(quiet=True)
    return cp


@pytest.fixture
def check_twice() -> Callable[..., float]:
    """``check_twice(check, *args, **kwargs)``: a checker run twice, the first run building what it needs; both must
    pass. Returns the second run's seconds and prints them: how long a check takes once its kernels are built is
    measured by the run-through (``utilities.workshop``, ``longest_check_after_edit_s``), not asserted here."""

    def run(check: Callable[..., Any], *args: Any, **kwargs: Any) -> float:
        first = check(*args, **kwargs)
        assert first.status == "passed", first
        start = time.perf_counter()
        second = check(*args, **kwargs)
        elapsed = time.perf_counter() - start
        assert second.status == "passed", second
        print(f"{getattr(check, '__name__', check)}: {elapsed:.1f} s after its build")
        return elapsed

    return run


# ------------------------------------------------------------------------------------------------------------
# A fused multiply-add, emulated exactly (``utilities.rounding.fma``): what a GPU computes where its compiler
# contracts ``a * b + c``
# ------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def fma() -> Callable[..., np.ndarray]:
    """``fma(a, b, c, dtype=np.float64)``: a fused multiply-add emulated exactly (``utilities.rounding.fma``)."""
    from utilities.rounding import fma as fma_exact

    return fma_exact

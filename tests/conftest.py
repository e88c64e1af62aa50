"""Fixtures shared by the test modules."""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent


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
# A fused multiply-add, emulated exactly (Python 3.11 has no math.fma): what a GPU computes where its compiler
# contracts ``a * b + c``
# ------------------------------------------------------------------------------------------------------------


def _two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Knuth's TwoSum: ``s = fl(a + b)`` and ``s + e = a + b`` exactly (any finite a, b whose sum does not overflow)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _two_prod(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dekker's product with Veltkamp's split: ``p = fl(a b)`` and ``p + e = a b`` exactly while |a|, |b| < 2^995 and
    the product stays far from underflow (the caller checks)."""

    def split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        y = x * 134217729.0  # 2^27 + 1
        hi = y - (y - x)
        return hi, x - hi

    p = a * b
    (ah, al), (bh, bl) = split(a), split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _round_fraction(q: Fraction, dtype: type) -> float:
    """q rounded to nearest (ties to even) in ``dtype``. float(q) is q correctly rounded to FP64; rounding that to
    FP32 rounds twice only where it landed on an FP32 midpoint, which q itself then decides."""
    try:
        r64 = float(q)
    except OverflowError:  # past the largest double: round to nearest overflows to infinity
        r64 = float("inf") if q > 0 else float("-inf")
    if dtype is np.float64 or not np.isfinite(r64):
        return r64
    with np.errstate(over="ignore"):
        r32 = np.float32(r64)
    if not np.isfinite(r32) or float(r32) == r64 or Fraction(r64) == q:
        return float(r32)
    other = np.nextafter(r32, np.float32(np.inf) if r64 > float(r32) else np.float32(-np.inf))
    if Fraction(float(r32)) + Fraction(float(other)) != 2 * Fraction(r64):
        return float(r32)  # r64 is no midpoint: q rounds as r64 does
    return float(other) if abs(Fraction(float(other)) - q) < abs(Fraction(float(r32)) - q) else float(r32)


def _half_gap(r: np.ndarray) -> np.ndarray:
    """Half the distance from r to its nearer neighbour in r's own format (0 where that underflows)."""
    down = np.abs(r - np.nextafter(r, np.zeros_like(r)))
    up = np.abs(np.nextafter(r, np.copysign(np.full_like(r, np.inf), r)) - r)
    return np.minimum(down, up) / 2


def fma_exact(a: Any, b: Any, c: Any, dtype: type = np.float64) -> np.ndarray:
    """``a * b + c`` rounded once to ``dtype`` (float64 or float32), elementwise, as a fused multiply-add computes it.

    In FP64 the exact value is ``r + re + we`` (TwoProduct, then three TwoSums), and r = fl(s + w) is its rounding
    unless ``|re| + |we|`` reaches half the gap from r to its neighbour; FP32 operands' products are exact in FP64,
    and the exact ``s + t`` rounds to FP32 as s does unless ``|s - fl32(s)| + |t|`` reaches half an FP32 gap. Entries
    that cannot be decided so (those, non-finite values, products near underflow or overflow) are computed with
    ``fractions.Fraction`` and rounded once."""
    a, b, c = np.broadcast_arrays(*(np.asarray(v, dtype=dtype).astype(np.float64) for v in (a, b, c)))
    shape = a.shape
    a, b, c = a.ravel(), b.ravel(), c.ravel()
    with np.errstate(all="ignore"):
        if dtype is np.float32:
            s, t = _two_sum(a * b, c)  # a b is exact in FP64
            out = s.astype(np.float32)
            sure = np.abs(s - out) + np.abs(t) < _half_gap(out).astype(np.float64)
        else:
            p, pe = _two_prod(a, b)
            s, t = _two_sum(p, c)
            w, we = _two_sum(t, pe)
            out, re = _two_sum(s, w)
            sure = np.abs(re) + np.abs(we) < _half_gap(out)
            in_range = (np.abs(p) > 2.0**-900) & (np.abs(p) < 2.0**1000) & (np.maximum(np.abs(a), np.abs(b)) < 2.0**995)
            sure &= in_range | (a == 0) | (b == 0)
        sure &= np.isfinite(a) & np.isfinite(b) & np.isfinite(c) & np.isfinite(out)
    for i in np.flatnonzero(~sure):
        x, y, z = float(a[i]), float(b[i]), float(c[i])
        if np.isfinite(x) and np.isfinite(y) and np.isfinite(z):
            out[i] = _round_fraction(Fraction(x) * Fraction(y) + Fraction(z), dtype)
        else:
            out[i] = x * y + z  # NaN and Inf as IEEE's fused multiply-add gives them
    return out.reshape(shape)


@pytest.fixture(scope="session")
def fma() -> Callable[..., np.ndarray]:
    """``fma(a, b, c, dtype=np.float64)``: a fused multiply-add emulated exactly (:func:`fma_exact`)."""
    return fma_exact

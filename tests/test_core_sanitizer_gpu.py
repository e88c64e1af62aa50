"""The sanitizer run on a GPU (skipped without one, and where compute-sanitizer is not installed: ``pip install
nvidia-cuda-sanitizer-api``): a planted race is found and named, its fix is clean, and the course's own kernels pass
a check with ``sanitize=True`` (the script rebuilt from their sources runs under every tool)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from utilities import sanitizer

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tool():
    if sanitizer.find_binary() is None:
        pytest.skip(sanitizer.MISSING)
    spec = importlib.util.spec_from_file_location("sanitizer_race", ROOT / "tools" / "sanitizer_race.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_a_planted_race_is_found_and_named(tool):
    clean, message = tool.run(barrier=False)
    assert not clean, message
    assert "racecheck: Error: Race reported between Write access" in message or "hazard detected" in message
    assert "exchange_kernel" in message and "cuda.syncthreads() is missing" in message


def test_the_same_kernel_with_its_barrier_is_clean(tool):
    clean, message = tool.run(barrier=True)
    assert clean, message
    assert "found nothing" in message


def test_the_ozaki2_stage_kernels_pass_their_checks_sanitized(tool, capsys):
    from utilities.ozaki2 import check, simt
    from utilities.ozaki2 import tensorcore as T

    def digits(products):
        return T.digits_on_gpu(products, digit_factory=simt.make_digit)

    assert check.check_digits(digits, seed=1, exercise=simt.make_digit, sanitize=True).status == "passed"

    def reconstruction(*args):
        return T.reconstruct_on_gpu(*args, reconstruct_factory=simt.make_reconstruct_kernel)

    result = check.check_reconstruction(reconstruction, seed=2, exercise=simt.make_reconstruct_kernel, sanitize=True)
    assert result.status == "passed"
    assert capsys.readouterr().out.count("found nothing") == 2


def test_the_primer_kernel_passes_its_check_sanitized(tool, capsys):
    import cupy as cp

    from utilities.guard import Canvas
    from utilities.primer import check
    from utilities.primer.tensorcore import TILE_CONFIG, TileGemm, make_tile_gemm_kernel

    m, n = 2 * TILE_CONFIG.tile_m, 3 * TILE_CONFIG.tile_n
    plan = TileGemm(m, n)

    def run(a, b):
        c = Canvas((m, n), cp.float32, xp=cp, fill=np.nan)
        plan(cp.asarray(a), cp.asarray(b), out=c.out)
        return c.written()

    tile = (TILE_CONFIG.tile_m, TILE_CONFIG.tile_n)
    result = check.check_tile_gemm(run, shape=(m, n, plan.k), tile=tile, exercise=make_tile_gemm_kernel, sanitize=True)
    assert result.status == "passed" and "found nothing" in capsys.readouterr().out

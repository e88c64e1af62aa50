"""The simulator shim (utilities.machinery.simulator): device functions that never name ``cuda`` are called directly,
the others still see the simulated thread's ``cuda``, and a kernel gets the same results either way."""

from __future__ import annotations

import numpy as np
import pytest
from numba import config, cuda

from utilities.machinery import simulator


def plain(x, y):
    return x * 2 + y


def lane():
    return cuda.threadIdx.x


def nested():
    def inner():
        return cuda.threadIdx.x

    return inner()


def test_only_functions_that_name_cuda_need_the_swap() -> None:
    assert not simulator.needs_cuda_swap(plain)
    assert simulator.needs_cuda_swap(lane)
    assert simulator.needs_cuda_swap(nested), "a nested function's use of cuda counts"


@pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="the shim acts in numba's simulator only")
def test_kernels_get_the_same_results_with_direct_calls() -> None:
    assert simulator.call_device_functions_directly(), "conftest.py installs the shim in the simulator"
    twice, where = cuda.jit(device=True)(plain), cuda.jit(device=True)(lane)

    @cuda.jit
    def kernel(out):
        i = cuda.grid(1)
        out[i] = twice(i, where())

    out = cuda.to_device(np.zeros(64, np.int64))
    kernel[2, 32](out)
    assert out.copy_to_host().tolist() == [2 * i + i % 32 for i in range(64)]
    assert twice.__dict__.get("course_direct") is True
    assert where.__dict__.get("course_direct") is False


@pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="the corner blocks are the simulator's")
def test_corner_blocks_run_the_first_and_last_block_of_each_axis_only() -> None:
    @cuda.jit
    def mark(out):
        cuda.atomic.add(out, (cuda.blockIdx.x, cuda.blockIdx.y), 1)

    out = np.zeros((5, 7), np.int32)
    with simulator.corner_blocks() as blocks:
        mark[(5, 7), 2](out)
        mark[(1, 3), 2](out)
    assert blocks == {"ran": 4 + 2, "skipped": 31 + 1}
    want = np.zeros((5, 7), np.int32)
    want[[0, 0, 4, 4], [0, 6, 0, 6]] = 2  # one block of each corner, two threads each
    want[0, [0, 2]] += 2  # the 1 x 3 grid's corners
    np.testing.assert_array_equal(out, want)
    mark[(5, 7), 2](out)  # outside it, every block again
    assert (out - want == 2).all()


def test_every_test_that_runs_corner_blocks_skips_outside_the_simulator() -> None:
    """On a GPU ``corner_blocks`` runs every block and counts none, so a test asserting its counts fails there: each
    test that enters it carries a skip outside the simulator (a decorator naming ``ENABLE_CUDASIM`` or a mark named
    ``in_simulator``). Once, a helper inserted above such a test took its mark, and only the GPU proof saw it."""
    import ast
    from pathlib import Path

    unmarked = []
    for path in sorted(Path(__file__).parent.glob("test_*.py")):
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                calls = [c.func for c in ast.walk(node) if isinstance(c, ast.Call)]
                if not any(getattr(f, "attr", getattr(f, "id", "")) == "corner_blocks" for f in calls):
                    continue
                marks = " ".join(ast.get_source_segment(text, d) or "" for d in node.decorator_list)
                if "ENABLE_CUDASIM" not in marks and "in_simulator" not in marks:
                    unmarked.append(f"{path.name}::{node.name}")
    assert not unmarked, f"tests entering corner_blocks() without a skip outside the simulator: {unmarked}"

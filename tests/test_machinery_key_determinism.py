"""Real course kernels keep their build-cache keys whatever their process built before (on the CPU, no GPU).

Each check builds prebuild jobs in fresh processes through ``utilities.machinery.cpu_build``, typing the kernels
only (libmathdx generates no code; each piece of it stands in the key as its recipe's key, as in a linked key), as
``tools/key_determinism.py --typing-only`` does for every job. The subset covers what made keys vary:

- the primer's device-pipeline kernel built after its tile kernel, as notebook 0 builds them: both kernels' modules
  tie once numba's numbers are removed (each process also tries two other orders of them), the tile kernel made
  libmathdx tensors first (their UIDs count tensors), and the second kernel inlines overloads whose locals numba
  names by compilation number;
- Ozaki-I's plain slicing kernels after a cuBLASDx kernel, whose struct types llvmlite then declares everywhere.

Needs the GPU stack as pinned (nvmath-python, nvidia-libmathdx-cu13, numba-cuda[cu13]) and a C compiler: skipped,
with the reason, where they are missing. About two minutes on a 2-core machine.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from utilities.machinery import cpu_build

ROOT = Path(__file__).resolve().parent.parent
WHY = cpu_build.unavailable()
needs_stack = pytest.mark.skipif(WHY is not None, reason=f"no CPU build of kernels here: {WHY}")


def tool():
    spec = importlib.util.spec_from_file_location("key_determinism", ROOT / "tools" / "key_determinism.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def after(cache):
    """The jobs' kernels and keys built in one process, in notebook 0's order and then the slicing kernels."""
    return tool().run(["primer:tile", "primer:stack", "slicing:392@7"], False, cache)


@pytest.mark.slow
@needs_stack
def test_a_cublasdx_kernel_keeps_its_key_after_another_and_in_any_module_order(after, cache):
    alone = tool().run(["primer:stack"], False, cache)["primer:stack"]
    assert [name.rsplit(".", 1)[-1] for name, _ in alone] == ["stack_sum_kernel"]
    assert tool().compare("primer:stack", alone, after["primer:stack"]) == []


@pytest.mark.slow
@needs_stack
def test_plain_kernels_keep_their_keys_after_a_cublasdx_kernel(after, cache):
    alone = tool().run(["slicing:392@7"], False, cache)["slicing:392@7"]
    names = {name.rsplit(".", 1)[-1] for name, _ in alone}
    assert {"slice_rows_kernel", "slice_cols_kernel"} <= names
    assert tool().compare("slicing:392@7", alone, after["slicing:392@7"]) == []


def test_the_check_tells_a_changed_key():  # the comparison itself: a key that moved, a kernel missing, an order
    compare = tool().compare
    assert compare("j", [["k", "1"]], [["k", "2"]]) == ["other keys for k"]
    assert compare("j", [["k", "1"]], [["k", "1"], ["m", "3"]]) == ["other keys for m"]
    assert compare("j", [["k", "1"], ["m", "3"]], [["k", "1"]]) == []  # m was built by the history already
    assert compare("j", [["k", "1 (another order of its modules gave another key)"]], [["k", "1"]]) != []
    assert compare("j", [], []) == ["it built no kernel"]

"""``utilities.machinery.padded_layouts``: nvmath's tensor API keeps an explicit leading dimension.

The wrapper's choice is tested with a stand-in for ``nvmath.device.cublasdx``; what libmathdx makes of it is read
from the real stack in a CPU build (``utilities.machinery.cpu_build``): the halo kernel's A and B layouts padded,
every other ``Matmul``'s unchanged."""

from __future__ import annotations

import subprocess
import sys
import types
from collections import namedtuple
from pathlib import Path

import pytest

from utilities.execution import python_env
from utilities.machinery import cpu_build, padded_layouts, versions

ROOT = Path(__file__).resolve().parent.parent
LD = namedtuple("LD", "a b c")


class FakeMM:
    size, function, precision, data_type, sm, transpose_mode = (128, 64, 64), "MM", "f16", "real", None, None
    arrangement, alignment, block_dim = ("row_major",) * 3, (16, 16, 16), None
    _static_block_dim, _execution, _with_pipeline, _enable_input_streaming = True, "Block", False, False

    def __init__(self, ld, padded=True):
        self._leading_dimension = ld
        if padded and ld is not None and not isinstance(ld, str):
            padded_layouts.pad(self)


@pytest.fixture
def fake_cublasdx(monkeypatch):
    module = types.SimpleNamespace(
        _blas_handle=lambda MM, execute_api=None: ("plain", execute_api),
        generate_MM=lambda **kw: types.SimpleNamespace(descriptor=("padded", kw["leading_dimension"])),
    )

    def compile_blas_execute(blas, code_type, execute_api=None, tensor_types=None):  # nvmath's: ld only if static
        ld = blas._leading_dimension if execute_api == "static_leading_dimensions" else None
        return module.generate_MM(leading_dimension=ld).descriptor, code_type

    module.compile_blas_execute = compile_blas_execute
    numba_side = types.SimpleNamespace(compile_blas_execute=compile_blas_execute)
    nvmath_device = types.ModuleType("nvmath.device")
    nvmath_device.cublasdx, nvmath_device.cublasdx_numba = module, numba_side
    monkeypatch.setitem(sys.modules, "nvmath.device", nvmath_device)
    monkeypatch.setitem(sys.modules, "nvmath.device.cublasdx", module)
    monkeypatch.setitem(sys.modules, "nvmath.device.cublasdx_numba", numba_side)
    module.numba_side = numba_side
    monkeypatch.setattr(padded_layouts, "_installed", False)
    monkeypatch.setattr(versions, "verified", lambda distributions: True)
    return module


def test_only_an_explicit_leading_dimension_in_the_tensor_api_changes_the_handle(fake_cublasdx):
    padded_layouts.install()
    padded_layouts.install()  # once
    handle = fake_cublasdx._blas_handle
    ld = LD(72, 72, 64)
    assert handle(FakeMM(ld), "tensors") == ("padded", ld)
    assert handle(FakeMM(None), "tensors") == ("plain", "tensors")
    assert handle(FakeMM("suggested"), "tensors") == ("plain", "tensors")
    assert handle(FakeMM(ld), "static_leading_dimensions") == ("plain", "static_leading_dimensions")
    assert handle(FakeMM(ld)) == ("plain", None)
    resolved = FakeMM(LD(64, 64, 64), padded=False)  # nvmath turns "suggested" into numbers: not marked, not touched
    assert handle(resolved, "tensors") == ("plain", "tensors")
    with pytest.raises(ValueError, match="needs a Matmul made with leading_dimension"):
        padded_layouts.pad(FakeMM(None))


def test_the_gemm_is_compiled_for_the_same_padded_layouts(fake_cublasdx):
    padded_layouts.install()
    ld = LD(72, 72, 64)
    compile_execute = fake_cublasdx.numba_side.compile_blas_execute
    assert compile_execute is fake_cublasdx.compile_blas_execute, "numba's name for it replaced too"
    assert compile_execute(FakeMM(ld), "sm90", "tensors") == (("padded", ld), "sm90")
    assert compile_execute(FakeMM(None), "sm90", "tensors") == (("padded", None), "sm90"), "no ld: nvmath's own"
    assert fake_cublasdx.generate_MM(leading_dimension=None).descriptor == ("padded", None), "nothing held after"


def test_a_compile_on_one_thread_lends_its_leading_dimension_to_no_other(fake_cublasdx):
    """While one thread compiles a padded GEMM, a handle made on another thread gets nvmath's own arguments."""
    import threading

    inside, release, seen = threading.Event(), threading.Event(), {}

    def compile_blas_execute(blas, code_type, execute_api=None, tensor_types=None):  # nvmath's, paused inside
        inside.set()
        release.wait(5)
        return fake_cublasdx.generate_MM(leading_dimension=None).descriptor, code_type

    fake_cublasdx.compile_blas_execute = fake_cublasdx.numba_side.compile_blas_execute = compile_blas_execute
    padded_layouts.install()
    ld = LD(72, 72, 64)

    def compile_padded():
        seen["compiled"] = fake_cublasdx.compile_blas_execute(FakeMM(ld), "sm90", "tensors")

    worker = threading.Thread(target=compile_padded)
    worker.start()
    assert inside.wait(5)
    seen["other"] = fake_cublasdx.generate_MM(leading_dimension=None).descriptor
    release.set()
    worker.join(5)
    assert seen["other"] == ("padded", None), "the other thread's handle: no leading dimension lent"
    assert seen["compiled"] == (("padded", ld), "sm90")


PROBE = """
from utilities.machinery import cpu_build
cpu_build.enter((9, 0), link=False)
from utilities.conv.halo import HaloConfig
from utilities.conv.tensorcore_halo import halo_matmul
from utilities.tiles import block_matmul
for cfg in (HaloConfig(), HaloConfig(tile_k=32, tile_n=32)):
    MM = halo_matmul(cfg)
    print(MM.get_layout_smem_a().cosize, MM.get_layout_smem_b().cosize, MM.get_layout_smem_c().cosize)
print(block_matmul("float16", (128, 64, 64), 256, b="row_major").get_layout_smem_a().cosize)
"""


@pytest.mark.slow
@pytest.mark.skipif(cpu_build.unavailable() is not None, reason=f"no CPU build here: {cpu_build.unavailable()}")
def test_libmathdx_pads_the_halo_kernels_layouts_and_no_other(tmp_path):
    env = python_env(ROOT, simulator=False, COURSE_BUILD_CACHE=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.split("\n")
    assert lines[0].split() == [str(127 * 72 + 64), str(63 * 72 + 64), str(128 * 64)], "A and B padded, C plain"
    assert lines[1].split() == [str(127 * 40 + 32), str(31 * 40 + 32), str(128 * 32)]
    assert lines[2] == str(128 * 64), "a Matmul without a leading dimension keeps its dense layout"

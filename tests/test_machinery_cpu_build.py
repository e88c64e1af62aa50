"""The pieces of a CPU build that need no GPU stack: the stand-in driver, NumPy as CuPy, the target's name.

A whole kernel built on the CPU is in tests/test_machinery_key_determinism.py (skipped without the stack).
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from utilities.machinery import cpu_build


@pytest.mark.parametrize("text", ["9.0", "90", "sm_90", "sm_90a", " SM_90A "])
def test_a_target_is_read_in_each_spelling(text):
    assert cpu_build.target(text) == (9, 0)


def test_a_target_is_ten_or_more_and_nothing_is_none():
    assert cpu_build.target("sm_100") == (10, 0) and cpu_build.target("12.0") == (12, 0)
    assert cpu_build.target("") is None
    with pytest.raises(ValueError, match="sm_90 or 9.0"):
        cpu_build.target("hopper")


@pytest.mark.skipif(cpu_build._compiler() is None, reason="no C compiler (cc, gcc or clang) here")
def test_the_stand_in_driver_has_its_five_functions(tmp_path):
    library = cpu_build.driver_library(tmp_path)
    assert cpu_build.driver_library(tmp_path) == library, "compiled once, then found"
    driver = ctypes.CDLL(str(library))
    version = ctypes.c_int(0)
    assert driver.cuDriverGetVersion(ctypes.byref(version)) == 0 and version.value == 13000
    assert driver.cuInit(0) == 0
    pointer = ctypes.c_void_p(1)
    assert driver.cuGetProcAddress(b"cuLaunchKernel", ctypes.byref(pointer), 13000, 0) == 500 and not pointer.value
    status = ctypes.c_int(0)
    args = (b"cuInit", ctypes.byref(pointer), 13000, 0, ctypes.byref(status))
    assert driver.cuGetProcAddress_v2(*args) == 500 and status.value == 1
    table = ctypes.c_void_p(1)
    assert driver.cuGetExportTable(ctypes.byref(table), None) == 500 and not table.value  # NVRTC asks for it


@pytest.fixture
def cupy(monkeypatch):
    monkeypatch.setitem(cpu_build._STATE, "cc", (9, 0))
    return cpu_build.numpy_cupy()


def test_numpy_stands_in_for_cupy_with_what_the_plans_ask_of_an_array(cupy):
    a = cupy.zeros((4, 8), cupy.float16)
    assert isinstance(a, cupy.ndarray) and a.dtype == np.float16 and a.flags.c_contiguous
    assert a.data.ptr == a.ctypes.data and a.data.ptr % 16 == 0  # the plans check operand alignment
    assert isinstance(a.get(), np.ndarray) and not isinstance(a.get(), cupy.ndarray)
    b = cupy.asarray(np.arange(6.0).reshape(2, 3))
    assert isinstance(b, cupy.ndarray) and isinstance(b.T, cupy.ndarray) and isinstance(b + 1, cupy.ndarray)
    r = cupy.random.RandomState(1).standard_normal((3, 2), dtype=cupy.float32)  # CuPy's own signature
    assert isinstance(r, cupy.ndarray) and r.dtype == np.float32
    assert cupy.random.default_rng(2).standard_normal(5, dtype=cupy.float16).dtype == np.float16
    assert type(cupy.asnumpy(b)) is np.ndarray


def test_the_stand_in_device_reports_a_hopper_and_does_nothing(cupy):
    device = cupy.cuda.Device()
    assert device.compute_capability == "90" and device.attributes["MultiProcessorCount"] == 132
    device.synchronize()
    cupy.cuda.get_current_stream().synchronize()
    cupy.cuda.Stream(non_blocking=True).wait_event(cupy.cuda.Event(disable_timing=True))  # Ozaki-II's two streams
    assert cupy.cuda.runtime.getDeviceProperties(0)["major"] == 9
    free, total = device.mem_info  # Ozaki-II's digits="auto" weighs its products against the free memory
    assert free == total == cpu_build.MEMORY_BYTES and cupy.get_default_memory_pool().free_bytes() == 0
    assert cupy.cuda.device.get_cublas_handle() == 0 and cupy.cuda.cublas.CUBLAS_OP_T == 0  # Ozaki-II's igemm
    assert cupy.cuda.cublas.gemmEx(0, 1, 2) == 0 and cupy.cuda.runtime.CUDA_R_8I == 0  # ... does nothing
    with pytest.raises(RuntimeError, match="needs a GPU"):
        cupy.ElementwiseKernel("float32 x", "float32 y", "y = x", "copy")


def test_numba_types_a_stand_in_array_as_a_cupy_array(cupy):
    typeof = pytest.importorskip("numba.cuda.typing.typeof").typeof
    a = cupy.zeros((4, 8), cupy.float16)
    assert typeof(a) == typeof(np.zeros((4, 8), np.float16))  # array(float16, 2d, C), as CuPy's interface gives
    assert str(typeof(a)) == "array(float16, 2d, C)" and str(typeof(a.T)) == "array(float16, 2d, F)"


def test_occupancy_without_a_device_counts_threads_and_shared_memory():
    assert cpu_build.resources(256, 98_352)["blocks_per_sm"] == 2  # 232448 // 98352: shared memory binds
    assert cpu_build.resources(1024, 1024)["blocks_per_sm"] == 2  # 2048 threads an SM
    assert cpu_build.resources(32, 0)["blocks_per_sm"] == 32  # the blocks-per-SM limit

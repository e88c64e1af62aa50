"""CPU checks of two GPU helpers that reach into library internals: the fast launch path's argument packing
(numba's kernel ABI) and the aligned global-memory layouts' version guard. No GPU needed."""

from __future__ import annotations

import ctypes
import importlib.metadata
import warnings
from types import SimpleNamespace

import pytest

numba = pytest.importorskip("numba")


def fake_array(shape: tuple[int, ...], itemsize: int, ptr: int) -> SimpleNamespace:
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.insert(0, step)
        step *= n
    size = 1
    for n in shape:
        size *= n
    return SimpleNamespace(
        size=size, itemsize=itemsize, data=SimpleNamespace(ptr=ptr), shape=shape, strides=tuple(strides)
    )


def values(fields: list[object]) -> list[float | int | None]:
    return [f.value for f in fields]  # type: ignore[attr-defined]


def test_packers_follow_numbas_array_abi() -> None:
    from numba.core import types

    from utilities.machinery import launch

    packers = launch._packers((types.float16[:, :, ::1], types.float32, types.int64, types.float64))
    assert packers is not None
    x = fake_array((3, 5, 96), 2, 0x7F00_0000_0100)
    fields = packers[0](x)
    # meminfo, parent, nitems, itemsize, data, shape..., strides... (bytes)
    assert values(fields) == [None, None, 3 * 5 * 96, 2, 0x7F00_0000_0100, 3, 5, 96, 5 * 96 * 2, 96 * 2, 2]
    assert [type(f) for f in fields[:5]] == [
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_ssize_t,
        ctypes.c_ssize_t,
        ctypes.c_void_p,
    ]
    (alpha,), (plane,), (beta,) = packers[1](0.5), packers[2](2), packers[3](-1.5)
    assert (type(alpha), alpha.value) == (ctypes.c_float, 0.5)
    assert (type(plane), plane.value) == (ctypes.c_int64, 2)
    assert (type(beta), beta.value) == (ctypes.c_double, -1.5)


def test_unknown_argument_types_fall_back_to_numba(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    import numpy as np
    from numba.core import types

    from utilities.machinery import launch

    assert launch._packers((types.float16[:, ::1], types.complex64)) is None
    monkeypatch.setitem(sys.modules, "cupy", SimpleNamespace(ndarray=type("ndarray", (), {})))  # CI has no CuPy
    assert launch._signature((0.5,)) is None  # a Python float: numba decides its type
    assert launch._signature((np.float32(0.5), np.int64(3))) == (np.dtype(np.float32).char, np.dtype(np.int64).char)


def test_aligned_layouts_are_guarded_by_the_nvmath_version(monkeypatch: pytest.MonkeyPatch) -> None:
    from utilities.machinery import aligned_copy, versions

    try:
        installed = importlib.metadata.version("nvmath-python")
    except importlib.metadata.PackageNotFoundError:
        installed = None
    assert aligned_copy.supported() == (installed == versions.PINS["nvmath-python"])

    with pytest.raises(ValueError, match="'a', 'b' or 'c'"):
        aligned_copy.gmem_layout(object(), "d")

    monkeypatch.setattr(aligned_copy, "supported", lambda: False)
    monkeypatch.setattr(versions, "_warned", set())
    aligned_copy.gmem_layout.cache_clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        layout = aligned_copy.gmem_layout(object(), "a")
    aligned_copy.gmem_layout.cache_clear()
    assert any(
        "verified with nvmath-python" in str(w.message) and "one element at a time" in str(w.message) for w in caught
    )
    assert callable(layout)  # nvmath's own layout, as a device function: correct, only slower


def test_fast_path_compiles_once_per_kernel_and_forgets_freed_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    from numba.core import types

    from utilities.machinery import launch

    compiles: list[str] = []  # (never the kernels themselves: a reference would keep them alive)

    class FakeKernel:  # stands in for a numba dispatcher
        targetoptions: dict[str, object] = {}

    def fake_compiled(kernel: object, *args: object) -> SimpleNamespace:
        compiles.append(type(kernel).__name__)
        library = SimpleNamespace(get_cufunc=lambda: f"function of kernel {len(compiles)}")
        return SimpleNamespace(argument_types=(types.float32,), debug=False, _codelibrary=library)

    monkeypatch.setattr(launch.versions, "verified", lambda distributions: True)
    monkeypatch.setattr(launch, "_signature", lambda args: ("f",))
    monkeypatch.setattr(launch, "compiled", fake_compiled)
    monkeypatch.setattr(launch, "_function_handle", lambda cufunc: cufunc)

    first = FakeKernel()
    entry = launch._fast_launcher(first, 0, (0.5,))
    assert launch._fast_launcher(first, 0, (0.25,)) is entry and len(compiles) == 1  # typed and compiled once
    assert entry[0] == "function of kernel 1"

    del first, entry
    gc.collect()
    second = FakeKernel()  # may reuse the freed kernel's address: it must still get its own compiled code
    assert launch._fast_launcher(second, 0, (0.5,))[0] == "function of kernel 2"
    assert len(launch._fast) == 1


def test_fast_path_is_off_with_another_numba_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    from utilities.machinery import launch, versions

    monkeypatch.setattr(versions, "installed", lambda name: "9.9.9")
    monkeypatch.setattr(versions, "_warned", set())
    compiles: list[object] = []
    monkeypatch.setattr(launch, "compiled", lambda *a: compiles.append(a))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert launch._fast_launcher(object(), 0, (0.5,)) is None  # numba's dispatcher launches instead
        assert launch._fast_launcher(object(), 0, (0.5,)) is None
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1 and "numba-cuda 0.30.4" in messages[0] and "numba-cuda 9.9.9" in messages[0]
    assert compiles == []  # nothing of numba's internals was touched


def test_versions_are_read_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast launch asks ``versions.verified`` on every launch: ``importlib.metadata`` scans the installed
    packages each time it is asked (0.5-0.8 ms, more than a launch itself), so a version is read once a process."""
    from utilities.machinery import versions

    reads: list[str] = []

    def version(name: str) -> str:
        reads.append(name)
        return versions.PINS.get(name, "1.0")

    monkeypatch.setattr(versions.importlib.metadata, "version", version)
    versions._metadata_version.cache_clear()
    try:
        for _ in range(1000):
            assert versions.verified(versions.FAST_LAUNCH)
        assert reads == ["numba-cuda"]
        assert versions.installed("nvmath-python") == versions.PINS["nvmath-python"] and len(reads) == 2
    finally:
        versions._metadata_version.cache_clear()  # the next test reads the real installation again

"""numba's CUDA simulator without its locks on the hot path: device functions that do not name ``cuda`` are called as
the plain Python functions they are.

In the simulator every call of a device function swaps the ``cuda`` module in the function's module globals under a
per-module lock, even when the function never names ``cuda``. A block of simulated threads is a block of Python
threads, and with the GIL handing them over every few milliseconds, a kernel that calls small device functions
(a residue per entry and per modulus) queues on those locks, for a time that changes from run to run
(instructor-notes/machinery.md has the figures). A device function whose body does not name ``cuda`` needs no swap:
it runs the same Python either way. The tests install this (conftest.py); the course's own code never needs it.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

from . import versions

SIMULATOR_CALLS = ("numba-cuda",)  # FakeCUDAKernel's call of a device function


def _names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def needs_cuda_swap(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` reaches the ``cuda`` module through its globals (``cuda.threadIdx``, ``cuda.syncthreads``...):
    only then must the simulator swap its module's ``cuda`` for the simulated thread's."""
    from numba import cuda
    from numba.cuda.simulator.kernelapi import FakeCUDAModule

    glob = getattr(fn, "__globals__", {})
    # while a kernel of the same module runs, its globals hold the simulated thread's module instead of cuda
    return any(
        value is cuda or isinstance(value, FakeCUDAModule) for value in (glob.get(name) for name in _names(fn.__code__))
    )


def call_device_functions_directly() -> bool:
    """In numba's simulator, make device functions that do not name ``cuda`` plain calls. Returns whether it is on
    (off outside the simulator, and with another numba-cuda than the pinned one, which it says once)."""
    from numba import config

    if not config.ENABLE_CUDASIM:
        return False
    if not versions.verified(SIMULATOR_CALLS):
        versions.fall_back("direct device-function calls in the simulator", SIMULATOR_CALLS, "the simulator's own")
        return False
    from numba.cuda.simulator import kernel as sim

    original = sim.FakeCUDAKernel.__call__
    if getattr(original, "course_direct", False):
        return True

    def call(self: Any, *args: Any) -> Any:
        direct = self.__dict__.get("course_direct")
        if direct is None:
            direct = self.__dict__["course_direct"] = self._device and not needs_cuda_swap(self.fn)
        return self.fn(*args) if direct else original(self, *args)

    call.course_direct = True  # type: ignore[attr-defined]
    sim.FakeCUDAKernel.__call__ = call
    return True

"""numba's CUDA simulator without its locks on the hot path: device functions that do not name ``cuda`` are called as
the plain Python functions they are.

In the simulator every call of a device function swaps the ``cuda`` module in the function's module globals under a
per-module lock, even when the function never names ``cuda``. A block of simulated threads is a block of Python
threads, and with the GIL handing them over every few milliseconds, a kernel that calls small device functions
(a residue per entry and per modulus) queues on those locks, for a time that changes from run to run
(instructor-notes/machinery.md has the figures). A device function whose body does not name ``cuda`` needs no swap:
it runs the same Python either way. The tests install this (conftest.py); the course's own code never needs it.

:func:`corner_blocks` is for the tests that look for an index past the end of a buffer at full-size shapes: the
simulator takes about a second a block of 512 threads, so it runs the blocks at the corners of each grid only.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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


@contextmanager
def corner_blocks() -> Iterator[dict[str, int]]:
    """Within it, numba's simulator runs, of each launch, only the blocks at the corners of its grid (first or last
    along every axis: at most 2, 4 or 8 blocks), and counts the blocks it ran and left out (``{"ran", "skipped"}``).

    What it is for: an index past the end of a buffer, at a shape whose full grid the simulator cannot run in a test's
    time. The largest indices a launch reaches are its last blocks' along each axis, the smallest its first blocks'
    (a kernel's indices grow with its block index; one that permutes its blocks, as ``grouped_tile`` does, needs the
    full grid). What the left-out blocks would have written is missing, so values read afterwards are not the
    kernel's: such a run checks bounds, not results. Outside the simulator, and with another numba-cuda than the
    pinned one (it says so once), every block runs.
    """
    from numba import config

    counts = {"ran": 0, "skipped": 0}
    if not config.ENABLE_CUDASIM:
        yield counts
        return
    if not versions.verified(SIMULATOR_CALLS):
        versions.fall_back("corner blocks in the simulator", SIMULATOR_CALLS, "every block of each grid runs")
        yield counts
        return
    from numba.cuda.simulator import kernel as sim

    whole = sim.BlockManager

    class CornerBlocks(whole):  # type: ignore[misc, valid-type]
        def run(self, grid_point: tuple[int, ...], *args: Any) -> None:
            if all(i in (0, size - 1) for i, size in zip(grid_point, self._grid_dim, strict=True)):
                counts["ran"] += 1
                super().run(grid_point, *args)
            else:
                counts["skipped"] += 1

    sim.BlockManager = CornerBlocks
    try:
        yield counts
    finally:
        sim.BlockManager = whole

"""Launch helpers for numba kernels that use nvmath.device: large dynamic shared memory, and a fast path.

The fast path: numba's dispatcher types every argument on every call and wraps each CuPy array as a numba
device array, on every call. That is host time, but a benchmark sees it too: CUDA events are recorded around
the launch (``tools/launch_overhead.py`` measures both paths; ``instructor-notes/machinery.md`` has the figures).
``launch`` therefore compiles through numba once per argument signature, keeps the compiled function, and
then packs the arguments itself (numba's kernel ABI: an array is meminfo, parent, size, itemsize, data, shape,
strides) and calls ``cuLaunchKernel`` on CuPy's current stream. Arguments it does not know how to pack (a
``DevicePipeline``, which nvmath packs) go through numba's dispatcher as before: every plan calls ``launch``, and
this is the one place that decides the path.

The argument layout and the compiled kernel's code library are numba-cuda internals: the fast path runs only
with the numba-cuda pinned in ``utilities.machinery.versions``; with another version every launch goes through
numba's dispatcher (correct, slower to launch) and a warning says so once.
"""

from __future__ import annotations

import ctypes
import weakref
from typing import Any

import numpy as np
from numba import config
from numba.cuda.typing import typeof as cuda_typeof

from . import versions

_raised: set[tuple[int, int]] = set()


def _function_handle(cufunc: Any) -> Any:
    from cuda.bindings import driver

    handle = cufunc.handle
    if isinstance(handle, ctypes.c_void_p):
        return handle.value
    if isinstance(handle, driver.CUkernel):
        err, func = driver.cuKernelGetFunction(handle)
        if err != driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"cuKernelGetFunction failed: {err}")
        return func
    return handle


def compiled(kernel: Any, *args: Any) -> Any:
    """The compiled overload of ``kernel`` for these arguments (builds it on first use)."""
    return kernel.compile(tuple(cuda_typeof.typeof(a) for a in args))


def _cufunc(overload: Any) -> Any:
    """The driver function of a compiled overload (its code library's: numba-cuda 0.30 keeps it private)."""
    library = getattr(overload, "library", None) or getattr(overload, "_codelibrary", None)
    if library is None:
        found = versions.installed("numba-cuda")
        raise RuntimeError(
            f"numba-cuda {found}: a compiled kernel exposes no code library, so its shared-memory limit and "
            f"occupancy cannot be read; install the pinned numba-cuda {versions.PINS['numba-cuda']}"
        )
    return library.get_cufunc()


def allow_shared_memory(kernel: Any, nbytes: int, *args: Any) -> None:
    """Raise the kernel's dynamic shared-memory limit to ``nbytes`` (needed above 48 KiB, once per kernel).

    cuBLASDx pipelines use about 96 KiB; without this the launch fails with CUDA_ERROR_INVALID_VALUE.
    """
    from cuda.bindings import driver

    cufunc = _cufunc(compiled(kernel, *args))
    key = (id(cufunc), nbytes)
    if key in _raised:
        return
    (err,) = driver.cuFuncSetAttribute(
        _function_handle(cufunc),
        driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        nbytes,
    )
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"could not allow {nbytes} bytes of dynamic shared memory: {err}")
    _raised.add(key)


def _signature(args: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """A cheap key for the argument types, or None when some argument needs numba's own handling."""
    import cupy as cp

    key: list[Any] = []
    for a in args:
        if isinstance(a, cp.ndarray):
            key.append((a.dtype.char, a.ndim, a.flags.c_contiguous, a.flags.f_contiguous))
        elif isinstance(a, np.generic) and a.dtype.kind in "fiu":
            key.append(a.dtype.char)
        else:
            return None
    return tuple(key)


def _packers(argument_types: tuple[Any, ...]) -> list[Any] | None:
    """For each kernel argument, a function from the value to its ctypes fields (numba's kernel ABI)."""
    from numba.core import types

    ssize = ctypes.c_ssize_t

    def array(x: Any) -> list[Any]:
        return [
            ctypes.c_void_p(0),
            ctypes.c_void_p(0),
            ssize(x.size),
            ssize(x.itemsize),
            ctypes.c_void_p(x.data.ptr),
            *(ssize(n) for n in x.shape),
            *(ssize(n) for n in x.strides),
        ]

    packers: list[Any] = []
    for ty in argument_types:
        if isinstance(ty, types.Array):
            packers.append(array)
        elif ty == types.float32:
            packers.append(lambda x: [ctypes.c_float(x)])
        elif ty == types.float64:
            packers.append(lambda x: [ctypes.c_double(x)])
        elif isinstance(ty, types.Integer):
            c_type = getattr(ctypes, f"c_{ty}")
            packers.append(lambda x, c_type=c_type: [c_type(x)])
        else:
            return None
    return packers


# kernel -> {(shared, signature): entry}. Weak keys: an entry lives as long as its kernel, and a kernel built
# later (an edited exercise, say) can never be served the compiled code of one that was freed.
_fast: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], Any]] = weakref.WeakKeyDictionary()
# kernel -> {(shared, signature)} whose limit the dispatcher path has raised (weak keys, as above)
_raised_for: weakref.WeakKeyDictionary[Any, set[tuple[int, Any]]] = weakref.WeakKeyDictionary()


def _fast_launcher(kernel: Any, shared: int, args: tuple[Any, ...]) -> Any:
    """(CUfunction, packers) for this kernel and argument signature, or None to use numba's dispatcher."""
    if not versions.verified(versions.FAST_LAUNCH):
        versions.fall_back(
            "the fast launch path (utilities.machinery.launch)",
            versions.FAST_LAUNCH,
            "kernels launch through numba's dispatcher",
        )
        return None
    signature = _signature(args)
    if signature is None:
        return None
    entries = _fast.setdefault(kernel, {})
    key = (shared, signature)
    if key not in entries:
        if shared > 0:  # static shared memory counts towards the 48 KiB default too: raise the limit, once
            allow_shared_memory(kernel, shared, *args)
        overload = compiled(kernel, *args)
        packers = _packers(tuple(overload.argument_types))
        if packers is None or overload.debug or kernel.targetoptions.get("extensions"):
            entries[key] = None
        else:
            entries[key] = (_function_handle(_cufunc(overload)), packers)
    return entries[key]


def launch(kernel: Any, grid: Any, block: Any, shared: int, *args: Any) -> None:
    """Launch with ``shared`` bytes of dynamic shared memory, raising the limit first when needed.

    In numba's simulator (``NUMBA_ENABLE_CUDASIM=1``) this is the simulated kernel's own call: the tests run the
    plans' host code there as it is, on NumPy buffers, where an index past the end of one raises."""
    if config.ENABLE_CUDASIM:
        kernel[grid, block, 0, shared](*args)
        return
    fast = _fast_launcher(kernel, shared, args)  # (each step that types the arguments runs once per signature)
    if fast is None:
        if shared > 0:  # static shared memory counts towards the 48 KiB default too: raise the limit
            signature = _signature(args)
            done = _raised_for.setdefault(kernel, set())
            if signature is None or (shared, signature) not in done:  # once per signature where it can be keyed
                allow_shared_memory(kernel, shared, *args)
                done.add((shared, signature))
        kernel[grid, block, 0, shared](*args)
        return
    import cupy as cp
    from cuda.bindings import driver

    function, packers = fast
    fields = [field for pack, a in zip(packers, args, strict=True) for field in pack(a)]
    pointers = (ctypes.c_void_p * len(fields))(*(ctypes.addressof(f) for f in fields))
    gx, gy, gz = (*grid, 1, 1)[:3] if isinstance(grid, tuple) else (grid, 1, 1)
    bx, by, bz = (*block, 1, 1)[:3] if isinstance(block, tuple) else (block, 1, 1)
    stream = cp.cuda.get_current_stream().ptr
    (err,) = driver.cuLaunchKernel(function, gx, gy, gz, bx, by, bz, shared, stream, ctypes.addressof(pointers), 0)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuLaunchKernel failed: {err}")


def resources(kernel: Any, threads: int, shared: int, *args: Any) -> dict[str, Any]:
    """What the compiled kernel takes, per thread and per block, and how many blocks fit on one SM.

    ``spills`` is the local memory per thread in bytes (spilled registers; the kernel has no local arrays that
    stay in memory when it does not spill). Occupancy comes from the driver for ``shared`` bytes of dynamic
    shared memory, as a fraction of the SM's 64 warps.
    """
    from cuda.bindings import driver

    overload = compiled(kernel, *args)
    if shared > 48 * 1024:
        allow_shared_memory(kernel, shared, *args)
    function = _function_handle(_cufunc(overload))
    err, blocks = driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(function, threads, shared)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuOccupancyMaxActiveBlocksPerMultiprocessor failed: {err}")
    from numba import cuda

    device = cuda.get_current_device()
    warps = device.MAX_THREADS_PER_MULTIPROCESSOR // 32
    return {
        "registers": int(overload.regs_per_thread),
        "spills": int(overload.local_mem_per_thread),
        "smem": int(overload.shared_mem_per_block) + int(shared),
        "blocks_per_sm": int(blocks),
        "occupancy": int(blocks) * (threads // 32) / warps,
    }

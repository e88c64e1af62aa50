"""Launch helpers for numba kernels that use nvmath.device: large dynamic shared memory."""

from __future__ import annotations

import ctypes
from typing import Any

from numba.cuda.typing import typeof as cuda_typeof

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


def allow_shared_memory(kernel: Any, nbytes: int, *args: Any) -> None:
    """Raise the kernel's dynamic shared-memory limit to ``nbytes`` (needed above 48 KiB, once per kernel).

    cuBLASDx pipelines use about 96 KiB; without this the launch fails with CUDA_ERROR_INVALID_VALUE.
    """
    from cuda.bindings import driver

    overload = compiled(kernel, *args)
    cufunc = overload.library.get_cufunc() if hasattr(overload, "library") else overload._codelibrary.get_cufunc()
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


def launch(kernel: Any, grid: Any, block: Any, shared: int, *args: Any) -> None:
    """Launch with ``shared`` bytes of dynamic shared memory, raising the limit first when needed."""
    if shared > 48 * 1024:
        allow_shared_memory(kernel, shared, *args)
    kernel[grid, block, 0, shared](*args)


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
    cufunc = overload.library.get_cufunc() if hasattr(overload, "library") else overload._codelibrary.get_cufunc()
    err, blocks = driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(_function_handle(cufunc), threads, shared)
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

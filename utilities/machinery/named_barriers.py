"""Named barriers for numba kernels: ``bar.sync id, threads`` and ``bar.arrive id, threads``.

``cuda.syncthreads()`` is barrier 0 and waits for every thread of the block. A kernel whose warps split into
groups with different work (warps that gather the next stage's tile while others multiply, issue 44) needs two
groups to meet without the rest: barrier ``id`` (1 to 15) completes once ``threads`` threads (a multiple of 32,
counting every thread of each warp that takes part) have reached it. ``sync`` waits for it; ``arrive`` counts this
warp in and goes on. So a producer writes a stage, then ``arrive``s at the stage's FULL barrier, and a consumer
``sync``s there before it reads; the consumer ``arrive``s at the stage's EMPTY barrier when it is done, and the
producer ``sync``s there before it writes that stage again. Like ``bar.sync``, ``bar.arrive`` makes the memory
accesses a thread made before it visible to the threads that complete the barrier (PTX ISA, "bar, barrier").

Each is one PTX instruction with its id and count as immediates (compile-time ints, checked here). numba's
simulator has no named barriers: these are GPU-only, as ``cp_async``'s intrinsics are.
"""

from __future__ import annotations

import functools

from .cp_async import ptx_statement

MAX_ID = 15  # PTX has 16 barriers a block; 0 is cuda.syncthreads()'s
MAX_THREADS = 1024


def _check(barrier: int, threads: int) -> None:
    if not isinstance(barrier, int) or not 1 <= barrier <= MAX_ID:
        raise ValueError(f"a named barrier's id must be an int from 1 to {MAX_ID} (0 is syncthreads'), got {barrier!r}")
    if not isinstance(threads, int) or threads <= 0 or threads % 32 or threads > MAX_THREADS:
        raise ValueError(
            f"a named barrier counts whole warps: threads must be a multiple of 32 up to {MAX_THREADS}, got {threads!r}"
        )


@functools.cache
def _statement(op: str, barrier: int, threads: int):  # type: ignore[no-untyped-def]
    return ptx_statement(f"bar.{op} {barrier}, {threads};")


def sync(barrier: int, threads: int):  # type: ignore[no-untyped-def]
    """An intrinsic that waits at named barrier ``barrier`` until ``threads`` threads have reached it."""
    _check(barrier, threads)
    return _statement("sync", barrier, threads)


def arrive(barrier: int, threads: int):  # type: ignore[no-untyped-def]
    """An intrinsic that counts this thread's warp in at named barrier ``barrier`` (of ``threads``) without
    waiting."""
    _check(barrier, threads)
    return _statement("arrive", barrier, threads)

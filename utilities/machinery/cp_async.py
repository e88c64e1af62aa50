"""Asynchronous-copy groups for numba kernels: ``cp.async.commit_group`` and ``cp.async.wait_group N``.

nvmath.device's ``copy`` issues ``cp.async`` copies into shared memory, and its ``copy_wait`` waits for all of
them. A pipeline deeper than two stages must wait for the oldest stage only, while the newer ones stay in
flight. These two intrinsics give that: ``commit()`` closes the group of copies this thread issued since the
last commit, and ``wait_prior(n)`` returns once at most ``n`` of this thread's committed groups are still
pending. Neither is a barrier: follow ``wait_prior`` with ``cuda.syncthreads()`` before reading what other
threads copied. Each is one PTX instruction (``sm_80`` and later); numba's simulator has no asynchronous
copies, so these are GPU-only.
"""

from __future__ import annotations

import functools

from llvmlite import ir
from numba.core import types
from numba.cuda.extending import intrinsic


def _ptx_statement(text: str):  # type: ignore[no-untyped-def]
    """An intrinsic taking no arguments that emits the PTX ``text`` (a memory clobber: no reordering across it)."""

    @intrinsic
    def statement(typingctx):  # type: ignore[no-untyped-def]
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), text, "~{memory}", side_effect=True)
            builder.call(asm, [])
            return context.get_dummy_value()

        return types.void(), codegen

    return statement


commit = _ptx_statement("cp.async.commit_group;")  # close this thread's group of copies issued since the last


@functools.cache
def _wait(pending: int):  # type: ignore[no-untyped-def]
    return _ptx_statement(f"cp.async.wait_group {pending};")


def wait_prior(pending: int):  # type: ignore[no-untyped-def]
    """An intrinsic that waits until at most ``pending`` committed groups are in flight (a compile-time int)."""
    if not isinstance(pending, int) or pending < 0 or pending > 7:
        raise ValueError(f"pending must be an int from 0 to 7 (PTX's wait_group immediate), got {pending!r}")
    return _wait(pending)

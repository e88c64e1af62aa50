"""Asynchronous copies for numba kernels: a 16-byte ``cp.async`` with zero fill, ``commit_group``, ``wait_group N``.

nvmath.device's ``copy`` issues ``cp.async`` copies into shared memory, and its ``copy_wait`` waits for all of
them. A pipeline deeper than two stages must wait for the oldest stage only, while the newer ones stay in
flight. These two intrinsics give that: ``commit()`` closes the group of copies this thread issued since the
last commit, and ``wait_prior(n)`` returns once at most ``n`` of this thread's committed groups are still
pending. Neither is a barrier: follow ``wait_prior`` with ``cuda.syncthreads()`` before reading what other
threads copied. Each is one PTX instruction (``sm_80`` and later); numba's simulator has no asynchronous
copies, so these are GPU-only.

``copy16(dst, dst_at, src, src_at, src_bytes)`` is the copy a gather needs, which cuBLASDx's ``copy`` (a whole
tile at a time) cannot do: 16 bytes from ``src[src_at]`` (global memory) to ``dst[dst_at]`` (shared memory), both
16-byte aligned, ``src_at`` and ``dst_at`` counted in elements of each array. Only ``src_bytes`` (0 or 16) are
read; the rest of the 16 are zero: ``src_bytes = 0`` writes 16 zeros (a convolution's padding) and reads nothing.
It is ``cp.async.ca`` (kept in L1 too), so that neighbouring taps that read the same pixels soon after find them
there. It belongs to the group that the next ``commit()`` closes.
"""

from __future__ import annotations

import functools

from llvmlite import ir
from numba.core import types
from numba.cuda.extending import intrinsic

COPY16 = (
    "{ .reg .u64 sa; .reg .u32 sa32; cvta.to.shared.u64 sa, $0; cvt.u32.u64 sa32, sa; "
    "cp.async.ca.shared.global [sa32], [$1], 16, $2; }"
)


def ptx_statement(text: str):  # type: ignore[no-untyped-def]
    """An intrinsic taking no arguments that emits the PTX ``text`` (a memory clobber: no reordering across it)."""

    @intrinsic
    def statement(typingctx):  # type: ignore[no-untyped-def]
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), text, "~{memory}", side_effect=True)
            builder.call(asm, [])
            return context.get_dummy_value()

        return types.void(), codegen

    return statement


commit = ptx_statement("cp.async.commit_group;")  # close this thread's group of copies issued since the last


@functools.cache
def _wait(pending: int):  # type: ignore[no-untyped-def]
    return ptx_statement(f"cp.async.wait_group {pending};")


def wait_prior(pending: int):  # type: ignore[no-untyped-def]
    """An intrinsic that waits until at most ``pending`` committed groups are in flight (a compile-time int)."""
    if not isinstance(pending, int) or pending < 0 or pending > 7:
        raise ValueError(f"pending must be an int from 0 to 7 (PTX's wait_group immediate), got {pending!r}")
    return _wait(pending)


@intrinsic
def copy16(typingctx, dst, dst_at, src, src_at, src_bytes):  # type: ignore[no-untyped-def]
    """16 bytes from ``src[src_at]`` (global) to ``dst[dst_at]`` (shared), asynchronously; only ``src_bytes`` of
    them read, the rest zero-filled."""
    arrays = isinstance(dst, types.Array) and isinstance(src, types.Array)
    if not (arrays and all(isinstance(t, types.Integer) for t in (dst_at, src_at, src_bytes))):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        dst_v, dst_i, src_v, src_i, nbytes = args
        dst_t, dst_it, src_t, src_it, nbytes_t = signature.args

        def address(array_type, value, index, index_type):  # type: ignore[no-untyped-def]
            data = context.make_array(array_type)(context, builder, value).data
            at = context.cast(builder, index, index_type, types.int64)
            return builder.ptrtoint(builder.gep(data, [at]), ir.IntType(64))

        i64, i32 = ir.IntType(64), ir.IntType(32)
        asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [i64, i64, i32]), COPY16, "l,l,r,~{memory}", side_effect=True)
        size = context.cast(builder, nbytes, nbytes_t, types.int32)
        builder.call(asm, [address(dst_t, dst_v, dst_i, dst_it), address(src_t, src_v, src_i, src_it), size])
        return context.get_dummy_value()

    return types.void(dst, dst_at, src, src_at, src_bytes), codegen

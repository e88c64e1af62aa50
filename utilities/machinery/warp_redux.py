"""Warp reductions in one instruction for numba kernels: ``redux.sync`` (sm_80 and later).

A warp's maximum or sum by shuffles is five ``shfl.sync`` steps, each waiting for the one before; a 64-bit sum
takes two shuffles and a carried add a step. ``redux.sync`` reduces a 32-bit integer over the warp in one
instruction, the result in every lane. numba has no binding for it: these intrinsics emit it as inline PTX, over
all 32 lanes (member mask ``0xffffffff``: every lane of the warp must call it, as with ``shfl_xor_sync``).

- ``max_s32(v)``: the warp's largest int32;
- ``add_u32(v)``: the warp's sum of uint32 values, modulo 2^32 (the caller keeps each lane's part small enough
  that it cannot wrap: ``utilities.precision_gpu`` splits a 64-bit sum into two such parts).

numba's simulator has no ``redux``: the kernels that use these keep their shared-memory path there, and a GPU test
(``tests/test_machinery_warp_redux.py``) checks both against NumPy.
"""

from __future__ import annotations

from llvmlite import ir
from numba.core import types
from numba.cuda.extending import intrinsic

FULL_MASK = "0xffffffff"


def _redux(op: str, numba_type: types.Integer):  # type: ignore[no-untyped-def]
    """An intrinsic ``f(value) -> value`` over the whole warp: ``redux.sync.{op}``, 32-bit operands."""
    text = f"redux.sync.{op} $0, $1, {FULL_MASK};"

    @intrinsic
    def reduce(typingctx, value):  # type: ignore[no-untyped-def]
        if value != numba_type:
            return None

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            i32 = ir.IntType(32)
            # side effects: a warp-wide instruction that the optimiser must neither drop nor move across branches
            asm = ir.InlineAsm(ir.FunctionType(i32, [i32]), text, "=r,r", side_effect=True)
            return builder.call(asm, [args[0]])

        return numba_type(numba_type), codegen

    return reduce


max_s32 = _redux("max.s32", types.int32)
add_u32 = _redux("add.u32", types.uint32)

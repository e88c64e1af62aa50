"""Hopper's tensor memory accelerator (TMA) for numba kernels: tiled tensor copies into shared memory, and the
transaction barriers (``mbarrier``) that say when they have landed.

A ``cp.async`` gather costs each thread an address, a bounds test and one instruction per 16 bytes; one
``cp.async.bulk.tensor`` moves a whole box of a tensor (up to five dimensions) in one instruction of one thread,
fills what lies outside the tensor with zeros, and writes it swizzled the way the tensor cores' operands want
it. The box's shape, the tensor's strides and the swizzle live in a 128-byte *tensor map* that the host encodes
(``cuTensorMapEncodeTiled``) and the kernel reads from global memory.

Device side (GPU only; numba's simulator has none of these instructions), every shared-memory operand given as an
array and an element index, as in ``cp_async.copy16``:

- ``barrier_init(smem, at, count)``: an ``mbarrier`` of ``count`` arrivals at ``smem[at]`` (8 bytes, aligned);
- ``fence_barrier_init()``: makes the initialised barriers visible to the copy engine (then ``syncthreads``);
- ``expect_bytes(smem, at, nbytes)``: this thread arrives at the barrier and tells it ``nbytes`` more are coming;
- ``wait_parity(smem, at, parity)``: spins until the barrier's phase of that parity (0, 1, 0, ...) completes;
- ``load_4d(smem, at, tmap, c0, c1, c2, c3, bar_at)``: the box at coordinates ``(c0, c1, c2, c3)`` (innermost
  first, signed: a box may hang over any edge) into ``smem[at]``, its bytes counted at the barrier
  ``smem[bar_at]``;
- ``load_2d(smem, at, tmap, map_at, c0, c1, bar_at)``: the same for a 2-D map stored at byte ``map_at`` of
  ``tmap`` (a kernel's second map, beside the first: one argument carries both);
- ``fence_async_shared()``: orders this thread's earlier shared-memory accesses before its later copies (a slot
  that ordinary stores or loads used is about to be written by the copy engine);
- ``acquire_map(tmap, map_at)``: once per map, before the first copy through a map that the host wrote to global
  memory.

Host side: :func:`nhwc_map` encodes the map of an NHWC FP16 tensor for boxes of ``(channels, box_w, box_h, 1)``,
:func:`matrix_map` that of a row-major FP16 matrix (the filters), :func:`box_of` says which box a convolution's row
tile of ``tile_m`` pixels needs, or why none does, and :func:`unavailable` why this GPU has no tensor copies (before
Hopper), or None.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from llvmlite import ir
from numba.core import types
from numba.cuda.extending import intrinsic

from .cp_async import ptx_statement

MAP_BYTES = 128  # a CUtensorMap
MAP_ALIGN = 64
SWIZZLES = {128: 3, 64: 2}  # row bytes -> CU_TENSOR_MAP_SWIZZLE_128B, _64B (the enum's values)
BOX_MAX = 256  # elements along any dimension of a box


def _pointer(context, builder, array_type, value, index, index_type):  # type: ignore[no-untyped-def]
    """The generic address of ``array[index]`` as an i64."""
    data = context.make_array(array_type)(context, builder, value).data
    at = context.cast(builder, index, index_type, types.int64)
    return builder.ptrtoint(builder.gep(data, [at]), ir.IntType(64))


def _asm(text: str, constraints: str, operand_types: list[Any]) -> ir.InlineAsm:
    return ir.InlineAsm(
        ir.FunctionType(ir.VoidType(), operand_types), text, constraints + ",~{memory}", side_effect=True
    )


def _integers(*values: Any) -> bool:
    return all(isinstance(v, types.Integer) for v in values)


fence_barrier_init = ptx_statement("fence.mbarrier_init.release.cluster; fence.proxy.async.shared::cta;")
fence_async_shared = ptx_statement("fence.proxy.async.shared::cta;")

_INIT = (
    "{ .reg .u64 a; .reg .u32 a32; cvta.to.shared.u64 a, $0; cvt.u32.u64 a32, a; "
    "mbarrier.init.shared::cta.b64 [a32], $1; }"
)
_EXPECT = (
    "{ .reg .u64 a; .reg .u32 a32; cvta.to.shared.u64 a, $0; cvt.u32.u64 a32, a; "
    "mbarrier.arrive.expect_tx.shared::cta.b64 _, [a32], $1; }"
)
_WAIT = (
    "{ .reg .u64 a; .reg .u32 a32; .reg .pred done; cvta.to.shared.u64 a, $0; cvt.u32.u64 a32, a; "
    "TMA_WAIT: mbarrier.try_wait.parity.shared::cta.b64 done, [a32], $1; @!done bra TMA_WAIT; }"
)
_LOAD_4D = (
    "{ .reg .u64 d, b; .reg .u32 d32, b32; cvta.to.shared.u64 d, $0; cvt.u32.u64 d32, d; "
    "cvta.to.shared.u64 b, $2; cvt.u32.u64 b32, b; "
    "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
    "[d32], [$1, {$3, $4, $5, $6}], [b32]; }"
)
_LOAD_2D = (
    "{ .reg .u64 d, b; .reg .u32 d32, b32; cvta.to.shared.u64 d, $0; cvt.u32.u64 d32, d; "
    "cvta.to.shared.u64 b, $2; cvt.u32.u64 b32, b; "
    "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
    "[d32], [$1, {$3, $4}], [b32]; }"
)
_ACQUIRE = "fence.proxy.tensormap::generic.acquire.gpu [$0], 128;"


def _barrier_op(text: str):  # type: ignore[no-untyped-def]
    """An intrinsic ``f(smem, at, value)``: ``text`` with $0 the barrier's generic address and $1 a 32-bit value."""

    @intrinsic
    def op(typingctx, smem, at, value):  # type: ignore[no-untyped-def]
        if not (isinstance(smem, types.Array) and _integers(at, value)):
            return None

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            i64, i32 = ir.IntType(64), ir.IntType(32)
            address = _pointer(context, builder, signature.args[0], args[0], args[1], signature.args[1])
            v = context.cast(builder, args[2], signature.args[2], types.int32)
            builder.call(_asm(text, "l,r", [i64, i32]), [address, v])
            return context.get_dummy_value()

        return types.void(smem, at, value), codegen

    return op


barrier_init = _barrier_op(_INIT)
expect_bytes = _barrier_op(_EXPECT)
wait_parity = _barrier_op(_WAIT)


@intrinsic
def load_4d(typingctx, smem, at, tmap, c0, c1, c2, c3, bar_at):  # type: ignore[no-untyped-def]
    """The box of ``tmap`` at ``(c0, c1, c2, c3)`` into ``smem[at]``, its bytes completed at ``smem[bar_at]``."""
    if not (isinstance(smem, types.Array) and isinstance(tmap, types.Array) and _integers(at, c0, c1, c2, c3, bar_at)):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        i64, i32 = ir.IntType(64), ir.IntType(32)
        smem_t, at_t, tmap_t = signature.args[:3]
        dst = _pointer(context, builder, smem_t, args[0], args[1], at_t)
        bar = _pointer(context, builder, smem_t, args[0], args[7], signature.args[7])
        the_map = _pointer(context, builder, tmap_t, args[2], context.get_constant(types.int64, 0), types.int64)
        coords = [context.cast(builder, v, t, types.int32) for v, t in zip(args[3:7], signature.args[3:7], strict=True)]
        builder.call(_asm(_LOAD_4D, "l,l,l,r,r,r,r", [i64, i64, i64, i32, i32, i32, i32]), [dst, the_map, bar, *coords])
        return context.get_dummy_value()

    return types.void(smem, at, tmap, c0, c1, c2, c3, bar_at), codegen


@intrinsic
def load_2d(typingctx, smem, at, tmap, map_at, c0, c1, bar_at):  # type: ignore[no-untyped-def]
    """The box at ``(c0, c1)`` of the 2-D tensor map at byte ``map_at`` of ``tmap`` into ``smem[at]``, its bytes
    completed at ``smem[bar_at]``."""
    arrays = isinstance(smem, types.Array) and isinstance(tmap, types.Array)
    if not (arrays and _integers(at, map_at, c0, c1, bar_at)):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        i64, i32 = ir.IntType(64), ir.IntType(32)
        smem_t, at_t, tmap_t, map_at_t = signature.args[:4]
        dst = _pointer(context, builder, smem_t, args[0], args[1], at_t)
        bar = _pointer(context, builder, smem_t, args[0], args[6], signature.args[6])
        the_map = _pointer(context, builder, tmap_t, args[2], args[3], map_at_t)
        coords = [context.cast(builder, v, t, types.int32) for v, t in zip(args[4:6], signature.args[4:6], strict=True)]
        builder.call(_asm(_LOAD_2D, "l,l,l,r,r", [i64, i64, i64, i32, i32]), [dst, the_map, bar, *coords])
        return context.get_dummy_value()

    return types.void(smem, at, tmap, map_at, c0, c1, bar_at), codegen


@intrinsic
def acquire_map(typingctx, tmap, map_at):  # type: ignore[no-untyped-def]
    """Orders the host's writes of the tensor map at byte ``map_at`` of ``tmap`` (a device array) before this
    thread's copies through it."""
    if not (isinstance(tmap, types.Array) and isinstance(map_at, types.Integer)):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        i64 = ir.IntType(64)
        address = _pointer(context, builder, signature.args[0], args[0], args[1], signature.args[1])
        builder.call(_asm(_ACQUIRE, "l", [i64]), [address])
        return context.get_dummy_value()

    return types.void(tmap, map_at), codegen


# ------------------------------------------------------------------------------------------------------------
# Host side
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Box:
    """The box a row tile of a 3x3 (or 1x1) convolution reads for one tap: ``width`` pixels of ``rows`` image rows,
    ``channels`` channels a pixel. A tile starting at pixel (b, h, w) reads tap (r, s) at coordinates
    ``(c0, w + s - 1, h + r - 1, b)``: the rows of the box, in order, are the tile's pixels."""

    channels: int
    width: int
    rows: int

    @property
    def nbytes(self) -> int:
        return 2 * self.channels * self.width * self.rows


def box_of(height: int, width: int, tile_m: int, tile_k: int) -> Box:
    """The box of a row tile of ``tile_m`` pixels, or ValueError naming why a tensor copy cannot fetch it: a tile
    must be part of one image row (W a multiple of the tile) or whole rows of one image (the tile a multiple of W,
    H a multiple of the rows it spans)."""
    if 2 * tile_k not in SWIZZLES:
        raise ValueError(f"a tensor copy writes rows of 64 or 128 bytes here (tile_k 32 or 64), got tile_k = {tile_k}")
    if width % tile_m == 0:
        return Box(tile_k, tile_m, 1)
    if tile_m % width == 0 and height % (tile_m // width) == 0:
        return Box(tile_k, width, tile_m // width)
    raise ValueError(
        f"a row tile of {tile_m} pixels in an image {height} x {width} is not one box: W must be a multiple of "
        f"{tile_m}, or {tile_m} a multiple of W with H a multiple of {tile_m} / W; use the gathering kernel "
        "(utilities.conv.tensorcore_persistent.PipelinedConv) for this shape"
    )


def unavailable() -> str | None:
    """Why this machine's GPU cannot run tensor copies (a compute capability below 9.0, a cuda-bindings without
    ``cuTensorMapEncodeTiled``), or None. A CPU build (``machinery.cpu_build``) builds them for its target."""
    from . import cpu_build

    if cpu_build.active():
        return None
    try:
        import cupy as cp

        major = int(cp.cuda.Device().compute_capability[:-1])
    except Exception as exc:  # noqa: BLE001 (no GPU, no CuPy: the reason is the answer)
        return f"no GPU to ask: {type(exc).__name__}: {exc}"
    if major < 9:
        return f"tensor copies (TMA) need compute capability 9.0 or later (Hopper); this GPU has {major}.x"
    try:
        _driver()
    except RuntimeError as exc:
        return str(exc)
    return None


@functools.cache
def _driver() -> Any:
    try:
        from cuda.bindings import driver
    except ImportError as exc:  # pragma: no cover - the GPU image has it
        raise RuntimeError(f"tensor maps need cuda-bindings (cuda.bindings.driver): {exc}") from None
    if not hasattr(driver, "cuTensorMapEncodeTiled"):
        raise RuntimeError("this cuda-bindings has no cuTensorMapEncodeTiled: install cuda-bindings 12.4 or later")
    return driver


def address(x: Any) -> int:
    """The device address of a CuPy array (of a NumPy one in a CPU build, whose arrays stand in for CuPy's)."""
    data = x.data
    return int(data.ptr) if hasattr(data, "ptr") else int(x.ctypes.data)


def nhwc_map(x: Any, box: Box) -> Any:
    """The tensor map (a CuPy uint8 array of 128 bytes) of the NHWC FP16 tensor ``x`` (4-D, C-contiguous, 16-byte
    aligned) for boxes ``box``, swizzled as cuBLASDx's A tiles (``machinery.swizzle``), zeros outside. In a CPU
    build (``machinery.cpu_build``), 128 zero bytes: the kernel is linked, never launched."""
    import cupy as cp
    import numpy as np

    from . import cpu_build

    if x.ndim != 4 or x.dtype != np.float16 or not x.flags.c_contiguous or address(x) % 16:
        raise ValueError("nhwc_map needs a C-contiguous 4-D FP16 array (B, H, W, C) on a 16-byte boundary")
    if cpu_build.active():
        return cp.zeros(MAP_BYTES, np.uint8)
    d = _driver()
    batch, height, width, channels = (int(v) for v in x.shape)
    if channels % box.channels or (2 * channels) % 16:
        raise ValueError(f"C = {channels} must be a multiple of the box's {box.channels} channels and of 8")
    dims = [d.cuuint64_t(v) for v in (channels, width, height, batch)]
    strides = [d.cuuint64_t(2 * v) for v in (channels, width * channels, height * width * channels)]
    boxes = [d.cuuint32_t(v) for v in (box.channels, box.width, box.rows, 1)]
    ones = [d.cuuint32_t(1)] * 4
    err, tmap = d.cuTensorMapEncodeTiled(
        d.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        4,
        address(x),
        dims,
        strides,
        boxes,
        ones,
        d.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        d.CUtensorMapSwizzle(SWIZZLES[2 * box.channels]),
        d.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        d.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    )
    if err != d.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed: {err} (shape {tuple(x.shape)}, box {box})")
    return _on_device(tmap)


def _on_device(tmap: Any) -> Any:
    import cupy as cp
    import numpy as np

    words = np.array([int(v) for v in tmap.opaque], dtype=np.uint64)
    return cp.asarray(words.view(np.uint8))


def matrix_map(w: Any, rows: int, cols: int) -> Any:
    """The tensor map (128 bytes on the GPU) of the row-major FP16 matrix ``w`` (2-D, C-contiguous, 16-byte aligned)
    for boxes of ``rows`` x ``cols``, each row of the box swizzled by its bytes (``cols`` 64: 128-byte swizzle, 32:
    64-byte), zeros outside. In a CPU build, 128 zero bytes."""
    import cupy as cp
    import numpy as np

    from . import cpu_build

    if w.ndim != 2 or w.dtype != np.float16 or not w.flags.c_contiguous or address(w) % 16:
        raise ValueError("matrix_map needs a C-contiguous 2-D FP16 array on a 16-byte boundary")
    if 2 * cols not in SWIZZLES or rows > BOX_MAX or (2 * w.shape[1]) % 16:
        raise ValueError(f"a box of {rows} x {cols} FP16 of a matrix {tuple(w.shape)}: cols must be 32 or 64")
    if cpu_build.active():
        return cp.zeros(MAP_BYTES, np.uint8)
    d = _driver()
    height, width = (int(v) for v in w.shape)
    err, tmap = d.cuTensorMapEncodeTiled(
        d.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        2,
        address(w),
        [d.cuuint64_t(width), d.cuuint64_t(height)],
        [d.cuuint64_t(2 * width)],
        [d.cuuint32_t(cols), d.cuuint32_t(rows)],
        [d.cuuint32_t(1), d.cuuint32_t(1)],
        d.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        d.CUtensorMapSwizzle(SWIZZLES[2 * cols]),
        d.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        d.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    )
    if err != d.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed: {err} (matrix {tuple(w.shape)}, box {rows} x {cols})")
    return _on_device(tmap)

"""Global-memory layouts that tell cuBLASDx the data is 16-byte aligned, so its ``copy`` moves 16 bytes at a time.

Why: nvmath-python 1.0.0 describes every global-memory tensor to libmathdx with the alignment of one element
(``_BlasMatmulLayout`` hard-codes it, and ``compile_blas_copy`` drops its ``alignment`` argument). cuBLASDx then
copies global to shared memory one element per thread and instruction (``ld.global.u16`` in the PTX), two
orders of magnitude below HBM bandwidth. libmathdx itself accepts an alignment for a global tensor
(``CublasdxTensorOption.ALIGNMENT_BYTES``, which nvmath's ``generate_tensor`` can set but never does).

:func:`gmem_layout` returns a device function ``layout(ld)`` that builds such a layout inside a kernel, where
``MM.get_layout_gmem_a(ld)`` would build the one-element-aligned one. It reaches into nvmath internals, so it
is switched on only for the nvmath-python pinned in ``utilities.machinery.versions``; with another version it
falls back to nvmath's own layout (correct, slower) and warns once.

The caller guarantees the alignment: every tile's first element and every leading dimension a multiple of
16 bytes (the plans check this; CuPy allocations are 256-byte aligned).

Where it helps, read in the PTX of the course's kernels: the global->shared ``copy`` of A and B becomes 16-byte
``cp.async``. Where it does not: ``copy_fragment`` between registers and a global C (an accumulator's
partition) stays one element per instruction, with or without the alignment; the C layouts carry it anyway.
"""

from __future__ import annotations

import functools
from typing import Any

from . import versions

ALIGNMENT = 16  # bytes


def supported() -> bool:
    """Whether the installed nvmath-python is the version these internals were verified with."""
    return versions.verified(versions.ALIGNED_COPY)


@functools.cache
def _machinery() -> Any:
    """Build the layout and numba type classes (once; they need nvmath.device, hence a GPU driver)."""
    from numba.core import typing
    from numba.cuda.extending import intrinsic, typeof_impl
    from numba.cuda.models import register_model
    from nvmath.bindings import mathdx
    from nvmath.device import cublasdx, cublasdx_backend, cublasdx_numba
    from nvmath.device.common_opaque_tensor import LayoutModel

    class AlignedGmemLayout(cublasdx._BlasMatmulLayout):
        """nvmath's global-memory layout, described to libmathdx with ``ALIGNMENT`` bytes of alignment."""

        def __init__(self, MM: Any, layout: str) -> None:
            super().__init__(MM, layout)
            self._alignment_bytes = ALIGNMENT

        def _get_descriptor(self) -> Any:
            handle = cublasdx._blas_tensors_handle(self._MM)
            return cublasdx_backend.generate_tensor(handle, self._tensor_type, ALIGNMENT)

    class AlignedLikeLayout(cublasdx._BlasMatmulLikeLayout):
        """The same layout for another element type (an FP16 output of an FP32 accumulator, say)."""

        def __init__(self, MM: Any, layout: str, dtype: Any) -> None:
            super().__init__(MM, layout, dtype)
            self._alignment_bytes = ALIGNMENT

        def _get_descriptor(self) -> Any:
            return _tensor_like(cublasdx._blas_tensors_handle(self._MM), self._tensor_type, self._dtype)

    @functools.cache
    def _tensor_like(handle: int, tensor_type: str, dtype: Any) -> Any:  # generate_tensor_like, plus alignment
        src = cublasdx_backend.generate_tensor(handle, tensor_type, ALIGNMENT)
        dst = mathdx.cublasdx_make_tensor_like(src.descriptor, cublasdx_backend.NP_TYPES_TO_MATHDX_TYPES[dtype])
        mathdx.cublasdx_set_tensor_option_int64(dst, mathdx.CublasdxTensorOption.ALIGNMENT_BYTES, ALIGNMENT)
        mathdx.cublasdx_finalize_tensors(1, [dst])
        return cublasdx_backend.DescriptorWrapper(dst, mathdx.cublasdx_destroy_tensor)

    class AlignedLayoutType(cublasdx_numba.BlasLayoutType):
        def __init__(self, layout: Any) -> None:
            super().__init__(layout)
            self.name = f"Aligned{ALIGNMENT}{self.name}"  # a distinct numba type: never confused with nvmath's

        def make_layout_like(self, dtype: Any) -> Any:
            return AlignedLayoutType(AlignedLikeLayout(self.layout.MM, self.layout.layout, dtype))

    register_model(AlignedLayoutType)(LayoutModel)

    @typeof_impl.register(AlignedLikeLayout)
    def _typeof_like(layout: Any, c: Any) -> Any:  # nvmath types a global layout afresh; keep the alignment
        return AlignedLayoutType(AlignedLikeLayout(layout.MM, layout.layout, layout.dtype))

    @typeof_impl.register(AlignedGmemLayout)
    def _typeof_gmem(layout: Any, c: Any) -> Any:
        return AlignedLayoutType(AlignedGmemLayout(layout.MM, layout.layout))

    def make(MM: Any, tensor: str) -> Any:
        ty = AlignedLayoutType(AlignedGmemLayout(MM, f"get_layout_gmem_{tensor}"))

        @intrinsic
        def layout(typingctx: Any, ld: Any) -> Any:
            def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
                return cublasdx_numba.lower_blas_layout_codegen(context, builder, ty, args[0], signature.args[0])

            return typing.signature(ty, ld), codegen

        return layout

    return make


@functools.cache
def gmem_layout(MM: Any, tensor: str) -> Any:
    """A device function ``layout(ld)``: the global-memory layout of operand ``tensor`` ('a', 'b' or 'c') of MM.

    16-byte aligned with the verified nvmath-python; nvmath's own (element-aligned) layout otherwise.
    """
    if tensor not in ("a", "b", "c"):
        raise ValueError(f"tensor must be 'a', 'b' or 'c', not {tensor!r}")
    if supported():
        return _machinery()(MM, tensor)
    versions.fall_back(
        "16-byte global-memory layouts (utilities.machinery.aligned_copy)",
        versions.ALIGNED_COPY,
        "using nvmath's own layouts (correct, but copies move one element at a time)",
    )
    return _fallback(MM, tensor)


def _fallback(MM: Any, tensor: str) -> Any:
    """nvmath's own global-memory layout of ``tensor``, as a device function of the leading dimension."""
    from numba import cuda

    @cuda.jit(device=True)
    def layout_a(ld):  # type: ignore[no-untyped-def]
        return MM.get_layout_gmem_a(ld)

    @cuda.jit(device=True)
    def layout_b(ld):  # type: ignore[no-untyped-def]
        return MM.get_layout_gmem_b(ld)

    @cuda.jit(device=True)
    def layout_c(ld):  # type: ignore[no-untyped-def]
        return MM.get_layout_gmem_c(ld)

    return {"a": layout_a, "b": layout_b, "c": layout_c}[tensor]

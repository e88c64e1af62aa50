"""Shared-memory layouts with a leading dimension in cuBLASDx's tensor API (nvmath-python 1.0.0, GPU stack only).

nvmath-python describes every tensor of a ``Matmul``'s tensor API (``get_layout_smem_*``, ``execute`` on tensors,
``copy``, the accumulator's partition) from a libmathdx handle made without the leading-dimension operator:
``nvmath.device.cublasdx._blas_handle`` passes ``leading_dimension`` only to the static-ld execute API. So
``Matmul(leading_dimension=...)`` changes nothing there, and a kernel that pads its tiles reads them as dense ones
(``instructor-notes/conv.md``, 2026-11-23: every output wrong, in plausible magnitudes). libmathdx itself takes the
operator in a tensor-API handle: the layouts then have the leading dimension (a 128 x 64 FP16 A tile at ld 72:
``cosize`` 9,208 instead of 8,192, read on a CPU build), and every function generated from that handle reads
those layouts.

:func:`install` wraps ``_blas_handle`` (the layouts, copies, partitions) and ``compile_blas_execute`` (the GEMM,
which makes a handle of its own) so that a ``Matmul`` made with an explicit ``leading_dimension`` keeps it in the
tensor API; every other ``Matmul`` gets the same handles as before. The layouts alone are not enough: a CPU build
with only the first wrapper gave padded layouts and a GEMM whose ``ldmatrix`` addresses stepped through dense ones
(B's 16-row step 0x800 bytes, not 0x900: read from its SASS). It reaches into nvmath-python's internals:
with another nvmath-python or libmathdx than the verified ones it installs nothing, and :func:`unavailable` says
why (the halo convolution's plan then refuses, naming the pipelined kernel).
"""

from __future__ import annotations

from typing import Any

from . import versions

_installed = False


def unavailable() -> str | None:
    """Why padded tensor-API layouts cannot be used here, or None."""
    if not versions.verified(versions.PADDED_LAYOUTS):
        pinned = ", ".join(f"{n} {versions.PINS[n]}" for n in versions.PADDED_LAYOUTS)
        seen = ", ".join(f"{n} {v or 'missing'}" for n, v in versions.found(versions.PADDED_LAYOUTS).items())
        return (
            f"padded shared-memory layouts reach into nvmath-python's internals, verified with {pinned}; found {seen}"
        )
    return None


def explicit(MM: Any) -> Any:
    """The leading dimensions ``MM`` was made with (a ``LeadingDimension``), or None (none, or "suggested")."""
    ld = getattr(MM, "_leading_dimension", None)
    return None if ld is None or isinstance(ld, str) else ld


def install() -> None:
    """Make the tensor API keep an explicit leading dimension (once a process). RuntimeError when
    :func:`unavailable`."""
    global _installed
    if _installed:
        return
    why = unavailable()
    if why is not None:
        raise RuntimeError(why)
    from nvmath.device import cublasdx

    plain = cublasdx._blas_handle

    def handle(MM: Any, execute_api: str | None = None) -> Any:
        ld = explicit(MM)
        if ld is None or execute_api != "tensors":
            return plain(MM, execute_api)
        made = cublasdx.generate_MM(
            size=MM.size,
            function=MM.function,
            precision=MM.precision,
            data_type=MM.data_type,
            sm=MM.sm,
            transpose_mode=MM.transpose_mode,
            arrangement=MM.arrangement,
            alignment=MM.alignment,
            block_dim=MM.block_dim,
            static_block_dim=MM._static_block_dim,
            leading_dimension=ld,
            execution=MM._execution,
            execute_api=execute_api,
            with_pipeline=MM._with_pipeline,
            enable_input_streaming=MM._enable_input_streaming,
        )
        return made.descriptor

    from nvmath.device import cublasdx_numba

    compile_plain = cublasdx.compile_blas_execute

    def compile_execute(blas: Any, code_type: Any, execute_api: str | None = None, tensor_types: Any = None) -> Any:
        """nvmath's ``compile_blas_execute``, whose own handle keeps the leading dimension in the tensor API."""
        ld = explicit(blas)
        if ld is None or execute_api != "tensors":
            return compile_plain(blas, code_type, execute_api, tensor_types)
        generate_plain = cublasdx.generate_MM

        def generate(**kwargs: Any) -> Any:
            if kwargs.get("leading_dimension") is None:
                kwargs["leading_dimension"] = ld
            return generate_plain(**kwargs)

        cublasdx.generate_MM = generate
        try:
            return compile_plain(blas, code_type, execute_api, tensor_types)
        finally:
            cublasdx.generate_MM = generate_plain

    cublasdx._blas_handle = handle
    cublasdx.compile_blas_execute = compile_execute
    cublasdx_numba.compile_blas_execute = compile_execute  # imported there by name
    _installed = True

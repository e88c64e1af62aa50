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
which makes a handle of its own, through ``generate_MM``) so that a ``Matmul`` marked by :func:`pad` keeps its
leading dimension in the tensor API; every other ``Matmul`` gets the same handles as before (the compile's leading
dimension is held per thread, for the call's duration). The layouts alone are not enough: a CPU build
with only the first wrapper gave padded layouts and a GEMM whose ``ldmatrix`` addresses stepped through dense ones
(B's 16-row step 0x800 bytes, not 0x900: read from its SASS). It reaches into nvmath-python's internals:
with another nvmath-python or libmathdx than the verified ones it installs nothing, and :func:`unavailable` says
why (the halo convolution's plan then refuses, naming the pipelined kernel).
"""

from __future__ import annotations

import threading
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


def pad(MM: Any) -> Any:
    """Mark ``MM`` (made with an explicit ``leading_dimension``) as one whose tensor API keeps it; returns ``MM``.
    Only marked Matmuls are touched: nvmath turns ``leading_dimension="suggested"`` into numbers too, and those
    Matmuls keep nvmath's own handles."""
    if explicit_dimensions(MM) is None:
        raise ValueError("pad() needs a Matmul made with leading_dimension=(lda, ldb, ldc)")
    MM._course_padded = True
    return MM


def explicit_dimensions(MM: Any) -> Any:
    """The leading dimensions ``MM`` holds (a ``LeadingDimension``), or None."""
    ld = getattr(MM, "_leading_dimension", None)
    return None if ld is None or isinstance(ld, str) else ld


def explicit(MM: Any) -> Any:
    """The leading dimensions the tensor API keeps for ``MM``: those of a Matmul marked by :func:`pad`, else None."""
    return explicit_dimensions(MM) if getattr(MM, "_course_padded", False) else None


def install() -> None:
    """Make the tensor API keep an explicit leading dimension (once a process). RuntimeError when
    :func:`unavailable`."""
    global _installed
    if _installed:
        return
    why = unavailable()
    if why is not None:
        raise RuntimeError(why)
    from nvmath.device import cublasdx, cublasdx_numba

    plain, compile_plain, generate_plain = cublasdx._blas_handle, cublasdx.compile_blas_execute, cublasdx.generate_MM

    def handle(MM: Any, execute_api: str | None = None) -> Any:
        ld = explicit(MM)
        if ld is None or execute_api != "tensors":
            return plain(MM, execute_api)
        made = generate_plain(
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

    wanted = threading.local()  # the leading dimensions a compile on this thread asks for, while it runs

    def generate(**kwargs: Any) -> Any:
        """nvmath's ``generate_MM``, given the leading dimensions while :func:`compile_execute` runs on this thread
        for a padded Matmul (nvmath's compile passes none to the tensor API)."""
        ld = getattr(wanted, "ld", None)
        if ld is not None and kwargs.get("leading_dimension") is None:
            kwargs["leading_dimension"] = ld
        return generate_plain(**kwargs)

    def compile_execute(blas: Any, code_type: Any, execute_api: str | None = None, tensor_types: Any = None) -> Any:
        """nvmath's ``compile_blas_execute``, whose own handle keeps the leading dimension in the tensor API."""
        ld = explicit(blas)
        if ld is None or execute_api != "tensors":
            return compile_plain(blas, code_type, execute_api, tensor_types)
        outer, wanted.ld = getattr(wanted, "ld", None), ld
        try:
            return compile_plain(blas, code_type, execute_api, tensor_types)
        finally:
            wanted.ld = outer

    cublasdx.generate_MM = generate
    cublasdx._blas_handle = handle
    cublasdx.compile_blas_execute = compile_execute
    cublasdx_numba.compile_blas_execute = compile_execute  # imported there by name
    _installed = True

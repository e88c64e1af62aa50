"""Where cuBLASDx's suggested shared-memory layout keeps each 16-byte chunk of an FP16 A tile (row-major, TK wide).

A kernel that fills an A tile itself (the convolution's gather, which no ``copy`` can do) must write the layout
that ``Matmul.execute`` reads. For a row-major FP16 tile of TK = 8 c columns (c chunks of 16 bytes a row), the
layout libmathdx 0.3.2.6 suggests through nvmath-python 1.0.0 is the XOR swizzle: chunk L = row c + chunk (in
row-major order) sits at ``L ^ ((L >> 3) & (c - 1))``, for TK = 32 and 64. It was measured on an H100 with
``tools/smem_layout_probe.py`` (every element of 128 x 32 and 128 x 64 tiles), and the convolution's GPU tests
check it again through the kernel's results. The layout is not a documented promise: with another
nvmath-python or libmathdx, :func:`a_tile` warns once, and a kernel's wrong results would name the stage; run
the probe to see the new layout.
"""

from __future__ import annotations

from typing import Any

from . import versions

VERIFIED_TK = (32, 64)


def a_tile(tile_k: int) -> Any:
    """A device function ``chunk -> chunk``: row-major 16-byte chunk L of an FP16 A tile TK wide, to where the
    suggested layout keeps it."""
    from numba import cuda

    if tile_k not in VERIFIED_TK:
        raise ValueError(
            f"the A swizzle was measured for TK in {VERIFIED_TK}, not {tile_k}: run "
            f"tools/smem_layout_probe.py --tile 128x{tile_k} and extend utilities.machinery.swizzle"
        )
    if not versions.verified(versions.SWIZZLE):
        versions.fall_back(
            "the A tile's swizzle (utilities.machinery.swizzle)",
            versions.SWIZZLE,
            "assuming the measured one: check the convolution with its tests (./course gpu-suite)",
        )
    mask = tile_k // 8 - 1

    @cuda.jit(device=True)
    def swizzle(chunk):
        return chunk ^ ((chunk >> 3) & mask)

    return swizzle

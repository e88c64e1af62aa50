"""Device helpers that more than one track's plain numba kernels use (numba only: they run in numba's CUDA
simulator on a machine without a GPU)."""

from __future__ import annotations

from numba import cuda, int32


@cuda.jit(device=True)
def pack_digits(d0, d1, d2, d3):
    """Four int8 digits as one little-endian int32 word: four bytes stored with one instruction."""
    w = (int(d0) & 255) | ((int(d1) & 255) << 8) | ((int(d2) & 255) << 16) | ((int(d3) & 255) << 24)
    return int32(w - 4294967296 if w >= 2147483648 else w)

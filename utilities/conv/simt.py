"""The implicit GEMM's index map as a numba device function: the exercise of notebook 2c.

``neighbor(m, r, s, height, width)`` is the input pixel that tap (r, s) of output pixel m reads, or -1 where it
falls in the zero padding (``utilities.conv.reference.neighbor`` is its NumPy twin). The kernel of
``utilities.conv.tensorcore`` calls it once per pixel of its row tile and tap, into a table in shared memory,
then gathers every A tile through that table. A plain Python function underneath (``neighbor.py_func``), so the
checker runs it on a CPU in microseconds, before any kernel is built.

The pipelined kernels (``utilities.conv.tensorcore_persistent``) compute the same map without a table: each thread
keeps the pixel and (h, w) of its rows of a tile (:func:`pixel_coords`) and asks :func:`tap_source` for each tap.
Both are tested against ``utilities.conv.reference.neighbor`` on a CPU.
"""

from __future__ import annotations

from numba import cuda


@cuda.jit(device=True)
def neighbor(m, r, s, height, width):
    """Pixel m = (b H + h) W + w; tap (r, s) reads (b, h + r - 1, w + s - 1), or nothing (-1) outside the image."""
    # TODO (about 6 lines): the flat index of the input pixel tap (r, s) reads, or -1 in the padding
    # SKELETON: return m
    # BEGIN SOLUTION
    h = (m // width) % height
    w = m % width
    if h + r - 1 < 0 or h + r - 1 >= height or w + s - 1 < 0 or w + s - 1 >= width:
        return -1
    return m + (r - 1) * width + (s - 1)  # the same image: one image row is `width` pixels
    # END SOLUTION


@cuda.jit(device=True)
def pixel_coords(m, height, width):
    """(h, w) of output pixel m = (b H + h) W + w."""
    return (m // width) % height, m % width


@cuda.jit(device=True)
def tap_source(m, h, w, tap, height, width):
    """The input pixel that tap ``tap`` = 3 r + s of pixel m, at (h, w), reads, or -1 in the padding."""
    r = tap // 3
    s = tap - 3 * r
    if h + r - 1 < 0 or h + r - 1 >= height or w + s - 1 < 0 or w + s - 1 >= width:
        return -1
    return m + (r - 1) * width + (s - 1)


@cuda.jit(device=True)
def stage_chunk(tid, i, k0, c_in, chunks_per_row, rows_per_pass):
    """Copy i of thread ``tid`` for the A stage that starts at GEMM column k0: the tile's row, the 16-byte chunk
    within the row, the tap, and the first input channel of the chunk. Consecutive threads take consecutive chunks
    of a row (one pixel's channels, contiguous in NHWC), so a warp's copies are coalesced."""
    tap = k0 // c_in
    unit = tid % chunks_per_row
    return tid // chunks_per_row + i * rows_per_pass, unit, tap, k0 - tap * c_in + unit * 8

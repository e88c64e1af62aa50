"""The implicit GEMM's index map as a numba device function: the exercise of notebook 2c.

``neighbor(m, r, s, height, width)`` is the input pixel that tap (r, s) of output pixel m reads, or -1 where it
falls in the zero padding (``utilities.conv.reference.neighbor`` is its NumPy twin). The kernel of
``utilities.conv.tensorcore`` calls it once per pixel of its row tile and tap, into a table in shared memory,
then gathers every A tile through that table. A plain Python function underneath (``neighbor.py_func``), so the
checker runs it on a CPU in microseconds, before any kernel is built.

The pipelined kernels (``utilities.conv.tensorcore_persistent``) compute the same map without a table and without
a division per copy: once per tile, each thread keeps the pixel of each of its rows and a 9-bit mask of the taps
that fall inside the image (:func:`pixel_coords`, :func:`tap_mask`); once per stage it finds the stage's tap and
channels (:func:`stage_tap`) and the pixel offset that tap reads (:func:`tap_offset`); a copy is then a bit test,
an add and a multiply. Both maps are tested against ``utilities.conv.reference.neighbor`` on a CPU.
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
def tap_mask(h, w, height, width):
    """Bit 3 r + s is set where tap (r, s) of the pixel at (h, w) reads inside the image (not the padding)."""
    cols = 2  # the middle column s = 1 is always inside
    if w > 0:
        cols |= 1
    if w < width - 1:
        cols |= 4
    mask = cols << 3  # the middle row r = 1
    if h > 0:
        mask |= cols
    if h < height - 1:
        mask |= cols << 6
    return mask


@cuda.jit(device=True)
def tap_offset(tap, width):
    """How far, in pixels, the input pixel that tap ``tap`` = 3 r + s reads lies from the output pixel."""
    r = tap // 3
    return (r - 1) * width + (tap - 3 * r - 1)


@cuda.jit(device=True)
def stage_tap(k0, c_in):
    """The tap of the A stage that starts at GEMM column k0, and the stage's first input channel (a stage never
    spans two taps)."""
    tap = k0 // c_in
    return tap, k0 - tap * c_in


@cuda.jit(device=True)
def chunk_row(tid, i, chunks_per_row, rows_per_pass):
    """Copy i of thread ``tid`` in an A stage: the tile's row and the 16-byte chunk within the row. Consecutive
    threads take consecutive chunks of a row (one pixel's channels, contiguous in NHWC), so a warp's copies are
    coalesced."""
    return tid // chunks_per_row + i * rows_per_pass, tid % chunks_per_row

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

The halo kernel (``utilities.conv.tensorcore_halo``) reads each input pixel of a row tile's neighbourhood once: the
three input rows around the tile's image row, one pixel wider on each side (:func:`halo_copy` says where each
16-byte copy goes and what it reads). Tap (r, s) of the tile's pixel i then sits at halo row r, pixel i + s, so
each tap's A tile is a window of the halo, read in place. Its epilogue (:func:`make_epilogue`) adds the bias to an
FP32 tile staged in shared memory, by row and channel: plain code, run in numba's simulator by the tests.

The tensor-copy kernel (``utilities.conv.tensorcore_tma``) fetches each tap's A tile as one box of the input
(:func:`box_coords` says where it starts); the copy engine does the padding.
"""

from __future__ import annotations

import functools
from typing import Any

from numba import cuda, float32, int32


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


@cuda.jit(device=True)
def halo_copy(k, m0, h0, w0, height, width, chunks, halo_width, ld):
    """Copy k of a row tile's halo: ``(dst, src, ok, unit)``.

    The tile's output pixels m0 ... m0 + TM - 1 lie in image row h0 from column w0; its halo holds input rows
    h0 - 1, h0, h0 + 1 (halo rows 0, 1, 2) at columns w0 - 1 ... w0 + TM (halo pixels 0 ... TM + 1 =
    ``halo_width`` - 1), one pixel every ``ld`` FP16 values, each pixel ``chunks`` copies of 8 channels. ``dst``:
    the copy's FP16 offset in the halo; ``src``: the input pixel it reads; ``ok``: 1 inside the image, 0 in the
    padding (then ``src`` is m0, a valid address the copy reads 0 bytes of); ``unit``: its 8 channels' place in
    the pixel."""
    unit = k % chunks
    pq = k // chunks
    rr = pq // halo_width
    q = pq - rr * halo_width
    hh = h0 + rr - 1
    ww = w0 + q - 1
    ok = 1 if hh >= 0 and hh < height and ww >= 0 and ww < width else 0
    return (rr * halo_width + q) * ld + unit * 8, m0 + ((rr - 1) * width + q - 1) * ok, ok, unit


@cuda.jit(device=True)
def box_coords(m0, tap, taps, height, width):
    """Where the tensor copy of tap ``tap`` (3 r + s; ``taps`` 9, or 1 for a 1x1 convolution) of the row tile that
    starts at output pixel ``m0`` begins: ``(w, h, b)``, the input column, row and image of the box's first pixel
    (``utilities.conv.tensorcore_tma``; the box is one image row of the tile's width, or the tile's whole rows).
    Negative or past the edge where the tap reads the padding: the copy engine fills those pixels with zeros."""
    plane = height * width
    b = m0 // plane
    h0 = (m0 - b * plane) // width
    w0 = m0 - b * plane - h0 * width
    r = 1 if taps == 1 else tap // 3
    s = 1 if taps == 1 else tap - 3 * (tap // 3)
    return int32(w0 + s - 1), int32(h0 + r - 1), int32(b)


@functools.cache
def make_epilogue(tile_m: int, tile_n: int, threads: int, fused: bool) -> Any:
    """A device function ``epilogue(smem32, c32, bias, out, row0, col0)``: the FP32 tile at ``smem32[c32:]``
    (row-major, ``tile_n`` wide), plus the bias of each value's channel and ReLU (``fused``), rounded once to FP16
    into ``out[row0:, col0:]``. Each thread keeps the same 8 channels of every row it writes, so it reads their bias
    once a tile."""
    UNITS = tile_n // 8
    assert threads % UNITS == 0, "each thread keeps one 8-channel unit of the rows it writes"
    ROWS_PER_PASS = threads // UNITS
    PER_THREAD = tile_m // ROWS_PER_PASS
    assert PER_THREAD * ROWS_PER_PASS == tile_m, "the tile's rows must spread evenly over the threads"

    @cuda.jit(device=True)
    def epilogue(smem32, c32, bias, out, row0, col0):
        tid = int32(cuda.threadIdx.x)
        col = int32((tid % UNITS) * 8)
        b = cuda.local.array(8, float32)
        for j in range(8):
            b[j] = float32(bias[col0 + col + j]) if fused else float32(0)
        for i in range(PER_THREAD):
            row = int32(tid // UNITS + i * ROWS_PER_PASS)
            at = int32(c32 + row * tile_n + col)
            for j in range(8):
                v = smem32[at + j]
                if fused:
                    v = v + b[j]
                    v = v if v > 0 else float32(0)
                out[row0 + row, col0 + col + j] = v

    return epilogue

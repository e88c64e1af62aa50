"""The implicit GEMM's index map as a numba device function: the exercise of notebook 2c.

``neighbor(m, r, s, height, width)`` is the input pixel that tap (r, s) of output pixel m reads, or -1 where it
falls in the zero padding (``utilities.conv.reference.neighbor`` is its NumPy twin). The kernel of
``utilities.conv.tensorcore`` calls it once per pixel of its row tile and tap, into a table in shared memory,
then gathers every A tile through that table. A plain Python function underneath (``neighbor.py_func``), so the
checker runs it on a CPU in microseconds, before any kernel is built.
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

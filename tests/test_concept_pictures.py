"""The pictures of the course's ideas render, and draw what the kernels do (not a hand-made copy of it)."""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

from utilities.fusion.figures import b2b_dataflow_picture
from utilities.multipass.figures import phase_timeline_picture
from utilities.ozaki.figures import anti_diagonals_picture, digits_picture, grouped_order_picture, launch_order

PICTURES = {
    "digits": digits_picture,
    "anti_diagonals": anti_diagonals_picture,
    "grouped_order": grouped_order_picture,
    "phase_timeline": phase_timeline_picture,
    "b2b_dataflow": b2b_dataflow_picture,
}


@pytest.mark.parametrize("name", PICTURES)
def test_picture_renders_a_png(name, tmp_path):
    path = tmp_path / f"{name}.png"
    fig = PICTURES[name](path=path)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert fig.axes, "the figure has no axes"


def test_digits_picture_shows_digits_that_add_up_to_the_number():
    fig = digits_picture(x=-2.718281828459045, row_max=3.5, slices=7)
    ax = fig.axes[0]
    digits = [int(round(bar.get_height())) for bar in ax.patches]
    e = 2  # 3.5 < 2^2
    value = sum(d * 2.0 ** (e - 7 - 8 * s) for s, d in enumerate(digits))
    assert all(-128 <= d <= 127 for d in digits)
    assert abs(value - -2.718281828459045) <= 2.0 ** (e - 7 - 8 * 6)


@pytest.mark.parametrize("tiles_m, tiles_n", [(16, 12), (13, 5), (3, 7)])
def test_launch_orders_visit_every_tile_once(tiles_m, tiles_n):
    for group in (None, 8):
        order = launch_order(tiles_m, tiles_n, group)
        assert sorted(order) == [(i, j) for i in range(tiles_m) for j in range(tiles_n)]


@pytest.mark.device
@pytest.mark.parametrize("tiles_m, tiles_n", [(13, 5), (3, 7)])
def test_grouped_order_is_the_kernels_order(tiles_m, tiles_n):
    """``launch_order(..., GROUP_M)`` is ``simt.grouped_tile``'s order (run in the simulator without a GPU)."""
    from numba import int32

    from utilities.ozaki.simt import GROUP_M, grouped_tile

    @cuda.jit
    def record(out):
        i, j = grouped_tile()
        block = cuda.blockIdx.x + cuda.blockIdx.y * cuda.gridDim.x
        if cuda.threadIdx.x == 0:
            out[block, 0] = int32(i)
            out[block, 1] = int32(j)

    out = cuda.to_device(np.zeros((tiles_m * tiles_n, 2), np.int32))
    record[(tiles_m, tiles_n), 1](out)
    got = [tuple(int(v) for v in row) for row in out.copy_to_host()]
    assert got == launch_order(tiles_m, tiles_n, GROUP_M)

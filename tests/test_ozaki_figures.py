"""The Ozaki-I figures render from a run's records (synthetic records here; the GPU suite passes real ones), and its
pictures of the ideas draw what the kernels do (not a hand-made copy of it)."""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

from utilities.bench import make_record
from utilities.ozaki.figures import (
    anti_diagonals_picture,
    breakdown,
    digits_picture,
    grouped_order_picture,
    launch_order,
    save_plots,
    timed_alone,
)


def synthetic_records():
    recs = []
    for size, scale in ((2048, 1 / 64), (4096, 1 / 8), (8192, 1.0)):
        recs.append(make_record("cublas.dgemm", [20.0 * scale] * 3, m=size, n=size, k=size))
        recs.append(make_record("ozaki.fused", [37.0 * scale] * 3, m=size, n=size, k=size, params={"slices": 7}))
    recs.append(make_record("ozaki.slicing", [1.0] * 3, m=8192, n=8192, k=8192, params={"slices": 7}))
    recs.append(make_record("ozaki.fused.kernel", [36.0] * 3, m=8192, n=8192, k=8192, params={"slices": 7}))
    for variant, products in (("unfused", 40.0), ("partial", 42.0)):
        recs.append(make_record(f"ozaki.{variant}", [products + 6] * 3, m=8192, n=8192, k=8192))
        recs.append(make_record(f"ozaki.{variant}.products", [products] * 3, m=8192, n=8192, k=8192))
        recs.append(make_record(f"ozaki.{variant}.epilogue", [4.0] * 3, m=8192, n=8192, k=8192))
    for slices in range(3, 11):
        error = {"normwise": 10.0 ** (-3 - slices), "max_elementwise": 1e-9, "against": "double-double"}
        recs.append(
            make_record(
                "ozaki.fused", [1.0], m=2048, n=2048, k=2048, params={"slices": slices, "phi": 0.0}, error=error
            )
        )
    native = {"normwise": 5e-16, "max_elementwise": 1e-10, "against": "double-double"}
    recs.append(make_record("cublas.dgemm", [1.0], m=2048, n=2048, k=2048, params={"phi": 0.0}, error=native))
    return recs


def test_breakdown_has_every_variant_and_dgemm():
    parts = breakdown([r for r in synthetic_records() if r.m == 8192 and "phi" not in r.params])
    assert set(parts) == {"unfused", "partial", "fused", "cuBLAS DGEMM"}
    assert parts["unfused"] == {"slicing": 1.0, "products": 40.0, "epilogue": 4.0}
    assert parts["fused"] == {"slicing": 1.0, "products + epilogue": 36.0}


def test_save_plots_writes_three_pngs(tmp_path):
    paths = save_plots(synthetic_records(), str(tmp_path))
    assert len(paths) == 3
    for path in paths:
        data = open(path, "rb").read()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_interleaved_headline_and_sweeps_stay_out_of_the_breakdown():
    headline = make_record(
        "ozaki.fused", [99.0] * 3, m=8192, n=8192, k=8192, params={"slices": 7, "timing": "interleaved"}
    )
    recs = [*synthetic_records(), headline]
    alone = timed_alone(recs)
    assert headline not in alone and not any("phi" in r.params for r in alone)
    assert breakdown([r for r in alone if r.m == 8192])["fused"]["products + epilogue"] == 36.0


PICTURES = {"digits": digits_picture, "anti_diagonals": anti_diagonals_picture, "grouped_order": grouped_order_picture}


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

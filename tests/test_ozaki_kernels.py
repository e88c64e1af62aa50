"""The plain numba kernels of Ozaki-I against the NumPy reference, bit for bit.

Without a GPU they run in numba's CUDA simulator (conftest.py selects it), on small sizes; on a GPU machine
the same tests run on the device.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

from utilities import inputs, ozaki
from utilities.ozaki import simt as kernels

pytestmark = pytest.mark.device


def _pairs():
    yield "normal", inputs.normal(9, 70, 1), inputs.normal(70, 11, 2)
    yield "spread phi=3", inputs.exponent_spread(9, 70, 3.0, 3), inputs.exponent_spread(70, 11, 3.0, 4)
    yield from inputs.adversarial_pairs(6, 40, 7, 5)


PAIRS = list(_pairs())
IDS = [p[0] for p in PAIRS]


def _padded(k: int) -> int:
    return -(-k // 128) * 128


def _slice_rows(a: np.ndarray, slices: int, threads: int = 32) -> tuple[np.ndarray, np.ndarray]:
    m, k = a.shape
    kp = _padded(k)
    out, e = np.full((slices, m, kp), 99, np.int8), np.zeros(m, np.int32)
    d_out, d_e = cuda.to_device(out.view(np.int32)), cuda.to_device(e)
    kernels.make_slice_rows_kernel(k, kp, slices, threads)[m, threads](cuda.to_device(a), d_out, d_e)
    out = d_out.copy_to_host().view(np.int8)
    assert not out[:, :, k:].any(), "the padding must hold zero digits"
    return out[:, :, :k], d_e.copy_to_host()


def _slice_cols(
    b: np.ndarray, slices: int, block: tuple[int, int] = kernels.COLS_BLOCK
) -> tuple[np.ndarray, np.ndarray]:
    k, n = b.shape
    mu, bad, f = (cuda.to_device(np.zeros(n, t)) for t in (np.float64, np.int32, np.int32))
    d_b = cuda.to_device(b)
    kernels.make_col_max_kernel(16, 32)[(-(-n // 32), -(-k // 16)), 32](d_b, mu, bad)
    kernels.shifts_from_max_kernel[-(-n // 32), 32](mu, bad, f)
    assert not mu.copy_to_host().any() and not bad.copy_to_host().any(), "shifts_from_max must zero the maxima"
    kp = _padded(k)
    tile, rows = block
    out = cuda.to_device(np.full((slices, n, kp), 99, np.int8).view(np.int32))
    kernels.make_slice_cols_kernel(slices, tile, rows)[(-(-n // tile), kp // (4 * tile)), block](d_b, f, out)
    out = out.copy_to_host().view(np.int8)
    assert not out[:, :, k:].any(), "the padding must hold zero digits"
    return out[:, :, :k], f.copy_to_host()


def test_shifts_from_max_fills_a_padded_shifts_vector_and_stays_in_the_maxima():
    """A plan's f has its padded width, B's maxima one entry a column: launched over f, the kernel gives its padded
    entries 0 (a zero column's shift) and touches the maxima only below their length (on an H200 it wrote past them,
    into the next buffer of CuPy's pool: ``tests/test_ozaki_plans.py``)."""
    mu = np.array([0.0, 1.0, 3.0, 2.0**-1074, 1.6e308])
    bad = np.array([0, 0, 1, 0, 0], np.int32)
    f = np.full(128, 99, np.int32)
    d_mu, d_bad, d_f = cuda.to_device(mu), cuda.to_device(bad), cuda.to_device(f)
    step = next(s for s in kernels.slicing_launches(4, 5, 300, 384, 7, np_=128) if s.name == "shifts_from_max")
    step.kernel[step.grid, step.block](d_mu, d_bad, d_f)
    got = d_f.copy_to_host()
    want = ozaki.col_shifts(np.array([[0.0, 1.0, np.nan, 2.0**-1074, 1.6e308]]))
    np.testing.assert_array_equal(got[:5], want)
    assert not got[5:].any(), "padded columns get shift 0"
    assert not d_mu.copy_to_host().any() and not d_bad.copy_to_host().any()


@pytest.mark.parametrize("slices", [1, 7, 8, 9, 12])
@pytest.mark.parametrize(("name", "a", "b"), PAIRS, ids=IDS)
def test_slicing_kernels_match_reference(name, a, b, slices):
    got, e = _slice_rows(a, slices)
    want, want_e = ozaki.slice_rows(a, slices)
    np.testing.assert_array_equal(e, want_e)
    np.testing.assert_array_equal(got, want)
    got, f = _slice_cols(b, slices)
    want, want_f = ozaki.slice_cols(b, slices)
    np.testing.assert_array_equal(f, want_f)
    np.testing.assert_array_equal(got, want)


def test_slicing_kernel_marks_nonfinite_rows():
    a = inputs.normal(4, 50, 0)
    a[1, 3], a[2, 0] = np.nan, -np.inf
    got, e = _slice_rows(a, 7)
    assert list(e == ozaki.NONFINITE_SHIFT) == [False, True, True, False]
    assert not got[:, 1:3].any()


@pytest.mark.parametrize("slices", [7, 9])
def test_ties_at_the_last_digit_round_half_to_even(slices):
    """N = rint(x 2^(8S - 1 - e)) with exact halves: the kernels must round them to even, in both directions."""
    rng = np.random.default_rng(slices)
    halves = (rng.integers(-(2**40), 2**40, (3, 33)) + 0.5) * 2.0 ** -(8 * slices - 1)
    a = np.concatenate([np.full((3, 1), 0.5), halves], axis=1)  # the 0.5 makes e = 0
    want = ozaki.slice_rows(a, slices)[0]
    np.testing.assert_array_equal(_slice_rows(a, slices)[0], want)
    np.testing.assert_array_equal(_slice_cols(np.ascontiguousarray(a.T), slices)[0], want)
    np.testing.assert_array_equal(_slice_cols(np.ascontiguousarray(a.T), slices, block=(32, 8))[0], want)


def test_slicing_kernel_blocks_are_checked():
    with pytest.raises(ValueError, match="must divide"):
        kernels.make_slice_cols_kernel(7, 32, 12)
    with pytest.raises(ValueError, match="multiple of 4"):
        kernels.make_slice_rows_kernel(10, 130, 7)
    with pytest.raises(ValueError, match="multiple of 32"):
        kernels.make_slice_rows_kernel(10, 128, 7, threads=48)


def test_negative_entry_needing_more_than_53_bits():
    """An entry whose digits need more than 53 bits (floor-based FP64 extraction would round it): exact."""
    a = np.array([[1.0, -(2.0**-55 + 2.0**-66)]])
    got, _ = _slice_rows(a, 7)
    np.testing.assert_array_equal(got, ozaki.slice_rows(a, 7)[0])


@pytest.mark.parametrize("variant", ["partial", "unfused"])
@pytest.mark.parametrize(("name", "a", "b"), PAIRS[:4], ids=IDS[:4])
def test_epilogue_kernel_matches_reference(name, a, b, variant):
    slices = 7
    st = ozaki.ozaki_stages(a, b, slices)
    m, n = a.shape[0], b.shape[1]
    if variant == "partial":
        terms, offsets = st.diagonals, np.arange(slices + 1, dtype=np.int32)
    else:
        terms = ozaki.slice_products(st.a_slices, st.b_slices)
        offsets = np.array([d * (d + 1) // 2 for d in range(slices + 1)], np.int32)
    c = np.random.default_rng(0).standard_normal((m, n))
    for alpha, beta in ((1.0, 0.0), (2.0, 0.0)):  # bit-identical: no alpha/beta rounding to fuse
        out = cuda.to_device(np.full((m, n), np.nan))
        kernel = kernels.make_epilogue_kernel()
        kernel[(-(-n // 8), -(-m // 8)), (8, 8)](terms, offsets, st.e, st.f, alpha, beta, c, out)
        np.testing.assert_array_equal(out.copy_to_host(), ozaki.reconstruct(st.diagonals, st.e, st.f, alpha, beta, c))


def test_epilogue_kernel_with_beta_and_nonfinite_lines():
    a, b = inputs.normal(5, 30, 1), inputs.normal(30, 6, 2)
    a[2, 0] = np.nan
    st = ozaki.ozaki_stages(np.nan_to_num(a, nan=0.0), b, 7)
    e = st.e.copy()
    e[2] = ozaki.NONFINITE_SHIFT
    c = np.random.default_rng(1).standard_normal((5, 6))
    out = cuda.to_device(np.zeros((5, 6)))
    kernels.make_epilogue_kernel()[(1, 1), (8, 8)](
        st.diagonals, np.arange(8, dtype=np.int32), e, st.f, 1.5, -0.5, c, out
    )
    got = out.copy_to_host()
    want = ozaki.reconstruct(st.diagonals, e, st.f, 1.5, -0.5, c)
    assert np.isnan(got[2]).all() and np.isnan(want[2]).all()
    ok = np.arange(5) != 2
    np.testing.assert_allclose(got[ok], want[ok], rtol=4e-16, atol=0)


@pytest.mark.parametrize("grid", [(1, 1), (3, 5), (8, 8), (13, 4), (17, 9)])
def test_grouped_tile_gives_every_block_its_own_tile(grid):
    """The tensor-core kernels take their tile from grouped_tile: every tile of the grid exactly once, in groups."""

    @cuda.jit
    def record(tiles):
        bx, by = kernels.grouped_tile()
        block = cuda.blockIdx.x + cuda.blockIdx.y * cuda.gridDim.x
        tiles[block, 0] = bx
        tiles[block, 1] = by

    tiles = cuda.to_device(np.full((grid[0] * grid[1], 2), -1, np.int32))
    record[grid, 1](tiles)
    got = tiles.copy_to_host()
    assert sorted(map(tuple, got)) == [(i, j) for i in range(grid[0]) for j in range(grid[1])]
    group = min(kernels.GROUP_M, grid[0])
    assert list(got[:group, 0]) == list(range(group)) and not got[:group, 1].any(), "launch order: down a group first"

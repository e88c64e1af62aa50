"""Warp reductions by ``redux.sync`` (``utilities.machinery.warp_redux``) and the chunk reductions of the row
statistics built on them (``utilities.precision_gpu.chunk_reducers``).

On a CPU: a 64-bit sum split at ``TERM_SPLIT`` into two uint32 warp sums is exact at the largest parts a lane can
hold, where splits at 28 or 16 bits wrap. On a GPU (skipped without one): each instruction against NumPy, on a warp
that is all negative, one that holds ``NO_EXPONENT``, and uint32 sums that wrap; and the chunk's S of 32 lanes at
their largest parts, joined from its halves, against Python's integers."""

from __future__ import annotations

import numpy as np
import pytest

from utilities import precision_gpu as pg

LANES = 32
WIDTH = 2 * LANES  # the GPU kernels' block (a shared array's length must be a constant, not an expression)


def split_sums(parts: np.ndarray, split: int) -> tuple[int, bool]:
    """The warp sum of int64 ``parts`` as ``chunk_reducers`` forms it with ``split``: the low bits and the rest
    summed apart as uint32 (wrapping as ``redux.sync.add.u32`` does), then joined; and whether neither sum wrapped."""
    low = parts & ((1 << split) - 1)
    high = parts >> split
    wide = [int(low.sum()), int(high.sum())]
    narrow = [v % 2**32 for v in wide]
    return (narrow[1] << split) + narrow[0], narrow == wide


@pytest.mark.parametrize("fill", ["largest", "one below", "mixed"])
def test_the_split_sum_is_exact_at_the_largest_parts(fill):
    rng = np.random.default_rng(3)
    if fill == "largest":
        parts = np.full(LANES, pg.LANE_TERMS_MAX, np.int64)
    elif fill == "one below":
        parts = np.full(LANES, pg.LANE_TERMS_MAX - 1, np.int64)
    else:
        parts = rng.integers(0, pg.LANE_TERMS_MAX + 1, LANES, dtype=np.int64)
    total, fits = split_sums(parts, pg.TERM_SPLIT)
    assert fits and total == int(parts.sum())


@pytest.mark.parametrize("split", [16, 28])
def test_a_split_at_other_bits_wraps(split):
    """Splits that look as good fail at the largest parts: 28 low bits over 32 lanes pass 2^32, and so do the 28
    high bits that a split at 16 leaves."""
    parts = np.full(LANES, pg.LANE_TERMS_MAX - 1, np.int64)
    total, fits = split_sums(parts, split)
    assert not fits and total != int(parts.sum())


@pytest.mark.gpu
def test_redux_max_and_add_match_numpy_on_a_gpu():
    import cupy as cp
    from numba import cuda

    from utilities.machinery import warp_redux

    @cuda.jit
    def kernel(ints, uints, out_max, out_add):
        i = cuda.grid(1)
        out_max[i] = warp_redux.max_s32(ints[i])
        out_add[i] = warp_redux.add_u32(uints[i])

    rng = np.random.default_rng(7)
    ints = rng.integers(-(2**31), 2**31, 4 * LANES, dtype=np.int64).astype(np.int32)
    ints[:LANES] = -rng.integers(1, 2**31, LANES)  # a warp of negatives only
    ints[LANES : 2 * LANES] = pg.NO_EXPONENT  # a chunk of zeros everywhere
    ints[LANES + 5] = -1005
    uints = rng.integers(0, 2**32, 4 * LANES, dtype=np.uint64).astype(np.uint32)  # sums past 2^32: they wrap
    out_max, out_add = cp.zeros(4 * LANES, np.int32), cp.zeros(4 * LANES, np.uint32)
    kernel[2, 2 * LANES](cp.asarray(ints), cp.asarray(uints), out_max, out_add)
    for warp in range(4):
        lanes = slice(warp * LANES, (warp + 1) * LANES)
        assert (cp.asnumpy(out_max[lanes]) == ints[lanes].max()).all(), warp
        assert (cp.asnumpy(out_add[lanes]) == int(uints[lanes].astype(np.uint64).sum()) % 2**32).all(), warp


@pytest.mark.gpu
def test_a_chunks_s_from_its_halves_on_a_gpu():
    import cupy as cp
    from numba import cuda, int64

    high_of_warp, total_of_warp = pg.chunk_reducers(2 * LANES)

    @cuda.jit
    def kernel(parts, exps, out_total, out_high):
        scratch_l = cuda.shared.array(WIDTH, int64)
        scratch_i = cuda.shared.array(WIDTH, np.int32)
        tid = cuda.threadIdx.x
        out_total[tid] = total_of_warp(parts[tid], scratch_l, tid)
        out_high[tid] = high_of_warp(exps[tid], scratch_i, tid)

    rng = np.random.default_rng(11)
    parts = np.concatenate(
        [np.full(LANES, pg.LANE_TERMS_MAX, np.int64), rng.integers(0, pg.LANE_TERMS_MAX + 1, LANES, dtype=np.int64)]
    )
    exps = np.concatenate([np.full(LANES, pg.NO_EXPONENT, np.int32), rng.integers(-1074, 1025, LANES).astype(np.int32)])
    out_total, out_high = cp.zeros(2 * LANES, np.int64), cp.zeros(2 * LANES, np.int32)
    kernel[1, 2 * LANES](cp.asarray(parts), cp.asarray(exps), out_total, out_high)
    for warp in range(2):
        lanes = slice(warp * LANES, (warp + 1) * LANES)
        assert (cp.asnumpy(out_total[lanes]) == sum(int(p) for p in parts[lanes])).all(), warp
        assert (cp.asnumpy(out_high[lanes]) == exps[lanes].max()).all(), warp

"""2c's and 2d's checkers against wrong versions written for issue 35 (not the course's mutants in ``tools/mistakes``):
each is rejected on every seed, by the stage it breaks, with a message that names it; the correct alternatives pass.
The index map runs as the attendee writes it (plain Python); the convolutions are NumPy stand-ins for the kernels,
with FP32 sums and the FP16 stores the GPU makes (the checker takes any function of its contract).

Kinds: a filter applied in the wrong direction (named even when the first wrong entry is a padding tap), the batch
forgotten in the flat index, the FP32 sum rounded to FP16 a step too early (seen where the bias cancels the sum), a
block width of 64 hard-coded where the plan's blocks are 32 wide, and a store outside the output.
"""

from __future__ import annotations

import numpy as np
import pytest

from utilities.conv import check
from utilities.conv import reference as ref
from utilities.guard import Canvas

SEEDS = (1, 2, 3, 4, 5)
F16 = np.float16


def flipped(m, r, s, height, width):
    """The filter applied flipped: tap (r, s) reads (h - r + 1, w - s + 1), with that tap's own padding."""
    h, w = (m // width) % height, m % width
    if not (0 <= h - r + 1 < height and 0 <= w - s + 1 < width):
        return -1
    return m - (r - 1) * width - (s - 1)


def flipped_offset(m, r, s, height, width):
    """The right padding test, the offset mirrored."""
    h, w = (m // width) % height, m % width
    if not (0 <= h + r - 1 < height and 0 <= w + s - 1 < width):
        return -1
    return m - (r - 1) * width - (s - 1)


def batch_forgotten(m, r, s, height, width):
    """The flat index rebuilt from (h, w) alone: every image after the first reads the first image."""
    h, w = (m // width) % height, m % width
    if not (0 <= h + r - 1 < height and 0 <= w + s - 1 < width):
        return -1
    return (h + r - 1) * width + (w + s - 1)


def flipped_rows(m, r, s, height, width):
    """The filter flipped along r only, with that tap's own padding (issue 41: it was told "this tap falls outside
    the image", from its first wrong entry)."""
    h, w = (m // width) % height, m % width
    if not (0 <= h - r + 1 < height and 0 <= w + s - 1 < width):
        return -1
    return m - (r - 1) * width + (s - 1)


def flipped_columns_offset(m, r, s, height, width):
    """The right padding test, the offset mirrored along s only."""
    h, w = (m // width) % height, m % width
    if not (0 <= h + r - 1 < height and 0 <= w + s - 1 < width):
        return -1
    return m + (r - 1) * width - (s - 1)


def one_tap_off(m, r, s, height, width):
    """A mistake no hint knows (tap (2, 2) one pixel too far): the entries, and no guess."""
    right = ref.neighbor(m, r, s, height, width)
    return right + 1 if (r, s) == (2, 2) and right >= 0 else right


def unflattened(m, r, s, height, width):
    """Right: (b, h, w) from m with divmod, then the neighbour's flat index."""
    b, rest = divmod(m, height * width)
    h, w = divmod(rest, width)
    hh, ww = h + r - 1, w + s - 1
    return (b * height + hh) * width + ww if 0 <= hh < height and 0 <= ww < width else -1


@pytest.mark.parametrize(
    ("fn", "says"),
    [
        (flipped, "the wrong direction"),
        (flipped_offset, "the wrong direction"),
        (batch_forgotten, "the batch is missing from the flat index"),
        (flipped_rows, "the wrong direction along the rows"),
        (flipped_columns_offset, "the wrong direction along the columns"),
    ],
    ids=lambda v: getattr(v, "__name__", "")[:30],
)
@pytest.mark.parametrize("seed", SEEDS)
def test_each_wrong_index_map_is_rejected_on_every_seed_with_its_name(fn, says, seed):
    with pytest.raises(check.CheckFailure) as info:
        check.check_neighbor(fn, seed=seed)
    assert info.value.stage == "index map" and says in str(info.value), str(info.value)


def test_a_mistake_no_hint_recomputes_is_told_by_its_entries_alone():
    with pytest.raises(check.CheckFailure) as info:
        check.check_neighbor(one_tap_off, seed=1)
    message = str(info.value)
    assert "tap (r 2, s 2)" in message and "hint:" not in message, message


@pytest.mark.parametrize("seed", SEEDS)
def test_an_unflattened_index_map_passes_on_every_seed(seed):
    assert check.check_neighbor(unflattened, seed=seed).status == "passed"


def conv(
    flip: bool = False, early: bool = False, wide: int | None = None, stray: bool = False, relu_first: bool = False
):
    """``run(x, w, bias)``: FP32 sums of the implicit GEMM, then the epilogue, as the kernel computes them, with the
    chosen mistakes; ``wide``: the plan's block width when a width of 64 is hard-coded in the bias's offset."""

    def run(x, w, bias):
        shape = ref.shape_of(x, w)
        taps = w[::-1, ::-1] if flip else w
        acc = ref.im2col_rows(x).astype(np.float32) @ ref.filters_matrix(np.ascontiguousarray(taps)).astype(np.float32)
        if early:
            acc = acc.astype(F16).astype(np.float32)
        if relu_first:  # v = max(acc, 0) + bias, then the kernel's own v if v > 0 else 0
            acc = np.maximum(acc, 0)
        b = bias.astype(np.float32)
        if wide:  # column c reads bias[64 (c // TN) + c % TN]; past the bias a GPU reads whatever lies there
            cols = np.arange(shape.c_out)
            index = 64 * (cols // wide) + cols % wide
            b = np.where(index < shape.c_out, b[np.minimum(index, shape.c_out - 1)], np.float32(0.0))
        out = np.maximum(acc + b, 0).astype(F16).reshape(shape.batch, shape.height, shape.width, shape.c_out)
        if not stray:
            return out
        canvas = Canvas(out.shape, F16, fill=np.nan)
        canvas.out[...] = out
        canvas.buffer[canvas.guard + canvas.size + 3] = 0  # a tile stored one row of pixels too far
        return canvas.written()

    return run


@pytest.mark.parametrize(
    ("run", "tile_n", "stage", "says"),
    [
        (conv(flip=True), None, "out", "the wrong direction: the filter was applied flipped"),
        (conv(early=True), None, "out", "rounded to FP16 before the bias"),
        (conv(wide=32), 32, "out", "a block width of 64 hard-coded"),
        (conv(stray=True), None, "out", "wrote outside its output"),
        (conv(relu_first=True), None, "out", "ReLU applied before the bias"),
    ],
    ids=["flipped filter", "early FP16 rounding", "64 hard-coded", "stray store", "ReLU before the bias"],
)
@pytest.mark.parametrize("seed", SEEDS)
def test_each_wrong_convolution_is_rejected_on_every_seed_with_its_name(run, tile_n, stage, says, seed):
    with pytest.raises(check.CheckFailure) as info:
        check.check_conv(run, tile_n=tile_n, seed=seed)
    assert info.value.stage == stage and says in str(info.value), str(info.value)


@pytest.mark.parametrize("tile_n", [64, 32])
def test_the_right_convolution_passes_at_both_block_widths(tile_n):
    for seed in SEEDS:
        assert check.check_conv(conv(), tile_n=tile_n, seed=seed).status == "passed"


def b2b(early: bool = False):
    """``run(x, w0, w1, bias1)`` and ``stages()``: the fused kernel's FP16 D0 and D1, or D1's FP32 sum rounded to
    FP16 before bias1 (``early``)."""
    kept = {}

    def run(x, w0, w1, bias1):
        shape = ref.b2b_shape_of(x, w0, w1)
        d0, d1 = ref.conv_b2b_fp16(x, w0, w1, bias1)
        if early:
            acc = d0.reshape(shape.m, shape.c_mid).astype(np.float32) @ w1.astype(np.float32)
            d1 = np.maximum(acc.astype(F16).astype(np.float32) + bias1.astype(np.float32), 0).astype(F16)
            d1 = d1.reshape(shape.batch, shape.height, shape.width, shape.c_out)
        kept["d0"] = d0
        return d1

    return run, lambda: dict(kept)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_second_sum_rounded_early_is_named_against_the_kernels_own_d0(seed):
    run, stages = b2b(early=True)
    with pytest.raises(check.CheckFailure) as info:
        check.check_conv_b2b(run, stages=stages, seed=seed)
    assert info.value.stage == "d1" and "second FP32 sum was rounded to FP16 before the bias" in str(info.value)
    run, stages = b2b()
    assert check.check_conv_b2b(run, stages=stages, seed=seed).status == "passed"

"""Back-to-back convolutions on the CPU (notebook 2d): the FP64 chain against two direct convolutions, the FP16
semantics within the derived bounds, the byte model, and a checker that names each stage's usual mistakes."""

from __future__ import annotations

import numpy as np
import pytest

from utilities.checker import CheckFailure
from utilities.conv import check, model
from utilities.conv import reference as ref

SHAPE = ref.B2BShape(2, 6, 10, 64, 32, 48)


def direct_chain(x: np.ndarray, w0: np.ndarray, w1: np.ndarray, bias1: np.ndarray) -> np.ndarray:
    """Zero-padded 3x3 loop over taps, ReLU, then a 1x1 convolution (an einsum over the channels), bias, ReLU."""
    b, h, wd, _ = x.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    mid = np.zeros((b, h, wd, w0.shape[3]))
    for r in range(3):
        for s in range(3):
            mid += np.einsum("bhwc,cd->bhwd", xp[:, r : r + h, s : s + wd], w0[r, s].astype(np.float64))
    out = np.einsum("bhwc,cd->bhwd", np.maximum(mid, 0), w1.astype(np.float64)) + bias1.astype(np.float64)
    return np.maximum(out, 0)


@pytest.mark.parametrize("case", ref.B2B_CASES)
def test_chain_reference_is_two_direct_convolutions_and_bounds_hold(case):
    x = ref.b2b_inputs(SHAPE, case, 11)
    r = ref.conv_b2b_ref(*x.args())
    np.testing.assert_allclose(r.d1, direct_chain(*x.args()).reshape(SHAPE.m, -1), rtol=0, atol=1e-9)
    d0, d1 = ref.conv_b2b_fp16(*x.args())
    assert np.all(np.abs(d0.reshape(SHAPE.m, -1).astype(np.float64) - r.d0) <= r.bound_d0)
    assert np.all(np.abs(d1.reshape(SHAPE.m, -1).astype(np.float64) - r.d1) <= r.bound_d1)


def test_corner_cases_do_what_they_say():
    first_relu = ref.conv_b2b_ref(*ref.b2b_inputs(SHAPE, "first ReLU zeroes half", 1).args())
    assert (first_relu.conv0 < 0).mean() > 0.4 and (first_relu.d0 == 0).mean() > 0.4
    x = ref.b2b_inputs(SHAPE, "bias cancels the sum", 2)
    cancel = ref.conv_b2b_ref(*x.args())
    assert 0.2 < (cancel.d1 > 0).mean() < 0.8
    positive = cancel.d1 > 0  # small outputs of large sums: where rounding order shows
    sums = cancel.d0 @ x.w1.astype(np.float64)
    assert np.median(cancel.d1[positive]) < 0.1 * np.median(sums[positive])
    ones = ref.conv_b2b_ref(*ref.b2b_inputs(SHAPE, "ones: counts the taps inside the image", 3).args())
    assert ones.d1.reshape(2, 6, 10, -1)[0, 0, 0, 0] == 4 * SHAPE.c_in / 8  # a corner: 4 taps


def emulated(**mistake):
    """The fused kernel's semantics, and D0, with one of the usual mistakes."""
    kept = {}

    def run(x, w0, w1, bias1):
        s = ref.b2b_shape_of(x, w0, w1)
        a = ref.im2col_rows(x).astype(np.float32) @ ref.filters_matrix(w0).astype(np.float32)
        d0 = (a if mistake.get("no_first_relu") else np.maximum(a, 0)).astype(np.float16)
        kept["d0"] = d0.reshape(s.batch, s.height, s.width, s.c_mid)
        acc = d0.astype(np.float32) @ w1.astype(np.float32)
        if mistake.get("round_first"):
            acc = acc.astype(np.float16).astype(np.float32)
        y = acc + (0 if mistake.get("no_bias") else bias1.astype(np.float32))
        y = y if mistake.get("no_second_relu") else np.maximum(y, 0)
        return y.astype(np.float16).reshape(s.batch, s.height, s.width, s.c_out)

    return run, lambda: dict(kept)


def test_checker_passes_the_semantics_with_and_without_d0():
    run, stages = emulated()
    assert check.check_conv_b2b(run, stages=stages, shape=SHAPE, seed=1).status == "passed"
    assert check.check_conv_b2b(run, shape=SHAPE, seed=1).status == "passed"


def skeleton_run(x, w0, w1, bias1):
    # TODO: a kernel whose epilogues are not written yet
    return np.zeros((*x.shape[:3], w1.shape[1]), np.float16)  # placeholder: your code replaces this line


def test_checker_says_not_yet_for_the_skeleton():
    assert check.check_conv_b2b(skeleton_run, shape=SHAPE, seed=1).status == "not implemented"


@pytest.mark.parametrize(
    "mistake, stage, hint",
    [
        ({"no_first_relu"}, "d0", "ReLU missing in the first epilogue"),
        ({"round_first"}, "d1", "rounded to FP16 before the bias"),
        ({"no_bias"}, "d1", "bias1 missing"),
        ({"no_second_relu"}, "d1", "ReLU missing in the second epilogue"),
    ],
)
def test_checker_names_each_stage_mistake_on_every_seed(mistake, stage, hint):
    for seed in range(4):
        run, stages = emulated(**dict.fromkeys(mistake, True))
        with pytest.raises(CheckFailure, match=f"(?s)stage '{stage}'.*{hint}"):
            check.check_conv_b2b(run, stages=stages, shape=SHAPE, seed=seed)


def test_without_d0_a_missing_first_relu_is_named_in_d1():
    run, _ = emulated(no_first_relu=True)
    with pytest.raises(CheckFailure, match="D0 without its ReLU"):
        check.check_conv_b2b(run, shape=SHAPE, seed=5)


def test_b2b_bytes_and_gain_bound():
    s = ref.B2BShape(8, 512, 512, 64, 64, 64)
    fused, unfused = model.b2b_traffic("fused", s), model.b2b_traffic("unfused", s)
    image = 8 * 512 * 512 * 64 * 2
    assert unfused.bytes - fused.bytes == 2 * image and fused.kernels == 1 and unfused.kernels == 2
    assert fused.bytes == 2 * image + 2 * (9 * 64 * 64 + 64 * 64 + 64)
    assert 1.99 < model.b2b_gain_bound(s) < 2.0
    assert fused.flops == 2 * s.m * 64 * 576 + 2 * s.m * 64 * 64
    with pytest.raises(ValueError, match="path must be one of"):
        model.b2b_traffic("im2col", s)


def test_b2b_shapes_check_their_operands():
    with pytest.raises(ValueError, match="c_out must be a positive integer"):
        ref.B2BShape(1, 4, 4, 8, 8, 0)
    with pytest.raises(ValueError, match=r"w1 must be \(C_mid=8, C_out\)"):
        ref.b2b_shape_of(np.zeros((1, 4, 4, 8)), np.zeros((3, 3, 8, 8)), np.zeros((4, 8)))

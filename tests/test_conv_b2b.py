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
    assert_chain_reference_and_bounds(SHAPE, case, 11)


def assert_chain_reference_and_bounds(shape, case: str, seed: int) -> None:
    """The chain's reference is two direct convolutions, and its FP16 semantics stay within the reference's bounds."""
    x = ref.b2b_inputs(shape, case, seed)
    r = ref.conv_b2b_ref(*x.args())
    np.testing.assert_allclose(r.d1, direct_chain(*x.args()).reshape(shape.m, -1), rtol=0, atol=1e-9)
    d0, d1 = ref.conv_b2b_fp16(*x.args())
    assert np.all(np.abs(d0.reshape(shape.m, -1).astype(np.float64) - r.d0) <= r.bound_d0)
    assert np.all(np.abs(d1.reshape(shape.m, -1).astype(np.float64) - r.d1) <= r.bound_d1)


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


# --- what keeping D0 in the block can save (issue 44) ----------------------------------------------------------

TARGET = ref.B2BShape(8, 512, 512, 64, 64, 64)
WIDE = ref.B2BShape(8, 512, 512, 64, 256, 64)


@pytest.mark.parametrize("s", [TARGET, WIDE, SHAPE])
def test_the_unfused_kernels_add_up_to_the_unfused_path_and_d0_is_the_difference(s):
    kernels = model.b2b_kernel_traffic(s)
    unfused, fused = model.b2b_traffic("unfused", s), model.b2b_traffic("fused", s)
    assert sum(t.bytes for t in kernels.values()) == unfused.bytes
    assert sum(t.flops for t in kernels.values()) == unfused.flops == fused.flops
    assert unfused.bytes - fused.bytes == model.d0_round_trip_bytes(s) == 2 * 2 * s.m * s.c_mid
    assert kernels["3x3"].bytes_written == kernels["1x1"].bytes_read - 2 * (s.c_mid * s.c_out + s.c_out)


def test_d0_round_trip_at_the_target_and_four_times_wider():
    assert model.d0_round_trip_bytes(TARGET) == 536_870_912  # 8 x 512 x 512 pixels x 64 channels x 2 bytes, twice
    assert model.d0_round_trip_bytes(WIDE) == 4 * model.d0_round_trip_bytes(TARGET)
    limit = model.fusion_limit(TARGET, copy_tbs=4.0, unfused_ms=0.991)
    assert limit.d0_ms == pytest.approx(0.134217728, rel=1e-12)


def test_fusion_limit_arithmetic():
    limit = model.fusion_limit(TARGET, copy_tbs=4.8, unfused_ms=0.991)
    assert limit.limit_ms == pytest.approx(0.991 - limit.d0_ms, rel=1e-12)
    assert limit.best_gain == pytest.approx(0.991 / limit.limit_ms, rel=1e-12)
    assert limit.saved(limit.limit_ms) == pytest.approx(1.0) and limit.saved(0.991) == 0.0
    assert limit.saved(1.030) < 0  # slower than the unfused path: it lost time
    assert model.share_needed(1.12) == pytest.approx(0.12 / 1.12, rel=1e-12)
    # at the fastest copy rate that still allows 1.12x, D0's share is exactly what 1.12x needs
    edge = model.fusion_limit(TARGET, copy_tbs=limit.fastest_copy_for(1.12), unfused_ms=0.991)
    assert edge.share == pytest.approx(model.share_needed(1.12), rel=1e-12)
    assert edge.best_gain == pytest.approx(1.12, rel=1e-12)
    assert limit.reachable(1.12) and limit.fastest_copy_for(1.12) > 4.8
    assert not model.fusion_limit(TARGET, copy_tbs=5.2, unfused_ms=0.991).reachable(1.12)
    slow = model.fusion_limit(TARGET, copy_tbs=4.8, unfused_ms=2.0)  # D0's round trip 5.6% of it
    assert not slow.reachable(1.12) and "NOT reachable" in model.format_fusion_limit(slow)
    with pytest.raises(ValueError, match="a gain is over 1"):
        model.share_needed(1.0)
    with pytest.raises(ValueError, match="must be positive"):
        model.fusion_limit(TARGET, copy_tbs=0.0, unfused_ms=1.0)


def test_b2b_floors_are_each_kernels_longer_part():
    copy, rate = 4.0, 400.0
    f = model.b2b_floors(TARGET, copy_tbs=copy, mma_tflops=rate)
    m = TARGET.m
    conv3_flops, conv1_flops = 2 * m * 64 * 576, 2 * m * 64 * 64
    image = 2 * m * 64  # bytes of x, D0 or D1
    assert f["3x3"] == pytest.approx(conv3_flops / (rate * 1e9), rel=1e-12)  # compute-bound
    assert f["1x1"] == pytest.approx((2 * image + 2 * (64 * 64 + 64)) / (copy * 1e9), rel=1e-12)  # memory-bound
    assert f["unfused"] == f["3x3"] + f["1x1"]
    assert f["fused"] == pytest.approx((conv3_flops + conv1_flops) / (rate * 1e9), rel=1e-12)
    assert f["d0"] == pytest.approx(model.fusion_limit(TARGET, copy_tbs=copy, unfused_ms=1.0).d0_ms, rel=1e-12)
    wide = model.b2b_floors(WIDE, copy_tbs=copy, mma_tflops=rate)
    assert wide["d0"] == pytest.approx(4 * f["d0"]) and wide["unfused"] - wide["fused"] > f["unfused"] - f["fused"]


def _records(prefix, shape, times, copy_tbs):
    from utilities import bench

    dims = {"batch": shape.batch, "height": shape.height, "width": shape.width}
    dims |= {"c_in": shape.c_in, "c_mid": shape.c_mid, "c_out": shape.c_out, "copy_tbs": copy_tbs}
    return [
        bench.make_record(f"{prefix}.{path}", [ms], m=shape.m, n=shape.c_out, k=576, params=dims)
        for path, ms in times.items()
    ]


def test_the_run_prints_the_model_beside_its_measured_times():
    from utilities import bench

    times = {"fused": 0.86, "unfused": 0.991, "unfused.3x3": 0.796, "unfused.1x1": 0.195}
    records = _records("conv_b2b", TARGET, times, 4.0)
    wide = {"fused": 3.0, "unfused": 3.6, "unfused.3x3": 3.2, "unfused.1x1": 0.4}
    records += _records("conv_b2b.wide", WIDE, wide, 4.0)
    flops = 2 * TARGET.m * 64 * 576
    records.append(bench.make_record("conv.mma_only@x", [0.410], m=TARGET.m, n=64, k=576, flops=flops))
    lines = model.b2b_model_lines(records)
    assert len(lines) == 3
    limit = model.fusion_limit(TARGET, copy_tbs=4.0, unfused_ms=0.991)
    assert f"{limit.d0_ms:.4f} ms at 4.00 TB/s" in lines[0] and "1.12x needs 10.7%: reachable" in lines[0]
    assert f"saved {limit.saved(0.86):.0%} of D0's round trip" in lines[0]
    assert f"roofline at {flops / 0.410e9:.0f} TFLOP/s" in lines[0] and "3x3 0.4100 (compute)" in lines[0]
    assert "measured alone: 3x3 0.7960 + 1x1 0.1950 ms" in lines[0]
    assert "64->256->64" in lines[1] and "4x as wide" in lines[2] and lines[2].endswith("grew")
    only = model.b2b_model_lines(records[:4])  # one shape, no MMA rate (a --quick run): no roofline, no comparison
    assert len(only) == 1 and "roofline" not in only[0] and "saved 98%" in only[0]
    no_copy = [records[0], bench.make_record("conv_b2b.unfused", [1.0], m=1, n=1, k=1)]
    assert model.b2b_model_lines(no_copy) == []  # a record without the run's copy rate: no model


# --- the wide chain of the speed run (64 -> 256 -> 64), checked on a CPU before a GPU times it ------------------


@pytest.mark.parametrize("case", ref.B2B_CASES)
def test_the_wide_chain_reference_and_its_fp16_semantics_within_bounds(case):
    s = check.B2B_WIDE_SHAPE
    assert (s.c_in, s.c_mid, s.c_out) == (WIDE.c_in, WIDE.c_mid, WIDE.c_out)
    assert_chain_reference_and_bounds(s, case, 12)


def test_the_checker_passes_the_wide_semantics_and_names_each_mistake():
    s = check.B2B_WIDE_SHAPE
    run, stages = emulated()
    assert check.check_conv_b2b(run, stages=stages, shape=s, seed=40).status == "passed"
    assert check.check_conv_b2b(run, shape=s, seed=41).status == "passed"
    for mistake, stage, hint in (
        ("no_first_relu", "d0", "ReLU missing in the first epilogue"),
        ("round_first", "d1", "rounded to FP16 before the bias"),
        ("no_bias", "d1", "bias1 missing"),
        ("no_second_relu", "d1", "ReLU missing in the second epilogue"),
    ):
        wrong, kept = emulated(**{mistake: True})
        with pytest.raises(CheckFailure, match=f"(?s)stage '{stage}'.*{hint}"):
            check.check_conv_b2b(wrong, stages=kept, shape=s, seed=40)

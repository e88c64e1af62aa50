"""The block-resident fusion track on the CPU: FP64 references, the derived error bound (sound on emulated
FP32 accumulation, tight enough to reject FP16 accumulation), traffic counts, and the checkers against
deliberately broken NumPy "kernels"."""

from __future__ import annotations

import numpy as np
import pytest

from utilities.checker import PLACEHOLDER, CheckFailure
from utilities.fusion import check as fcheck
from utilities.fusion import model as traffic
from utilities.fusion import reference as ref

SHAPES = [(128, 576, 64, 128), (128, 64, 256, 64)]  # the two targets, on few rows
SMALL = (64, 96, 32, 48)


def excess(got: np.ndarray, want: np.ndarray, bound: np.ndarray) -> float:
    """max |got - want| / bound: at most 1 when got is within the bound."""
    return float(np.max(np.abs(got.astype(np.float64) - want) / bound))


# --- references ---------------------------------------------------------------------------------------------


def test_b2b_reference_by_hand():
    h = np.float16
    a0, b0 = np.array([[1.0, 2.0]], h), np.array([[1.0, -1.0], [1.0, -1.0]], h)  # A0 @ B0 = [3, -3]
    b1, c1 = np.array([[2.0], [5.0]], h), np.array([[1.0]], h)
    r = ref.b2b_ref(a0, b0, b1, c1, 0.5, 2.0, -4.0)
    np.testing.assert_array_equal(r.d0, [[1.5, 0.0]])  # relu(0.5 * [3, -3])
    np.testing.assert_array_equal(r.d1, [[2.0]])  # relu(2 * 1.5 * 2 - 4 * 1)
    r = ref.b2b_ref(a0, b0, b1, c1, 0.5, 2.0, -8.0)
    np.testing.assert_array_equal(r.p1, [[-2.0]])
    np.testing.assert_array_equal(r.d1, [[0.0]])


def test_batched_reference_is_the_stack_of_single_ones():
    x = ref.b2b_inputs(*SMALL, seed=3, batch=3)
    r = ref.b2b_ref(*x.args())
    for b in range(3):
        one = ref.b2b_ref(x.a0[b], x.b0[b], x.b1[b], x.c1[b], x.alpha0, x.alpha1, x.beta1)
        np.testing.assert_array_equal(r.d1[b], one.d1)
        np.testing.assert_array_equal(r.bound_d1[b], one.bound_d1)


def test_gemm_bias_relu_reference_adds_bias_per_column():
    a, b = np.eye(2, dtype=np.float16), np.array([[1.0, -3.0], [-2.0, 4.0]], np.float16)
    y, _ = ref.gemm_bias_relu_ref(a, b, np.array([0.5, 1.0], np.float16))
    np.testing.assert_array_equal(y, [[1.5, 0.0], [0.0, 5.0]])


# --- inputs -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ref.B2B_CASES)
def test_b2b_inputs_are_fp16_contiguous_reproducible_and_in_range(case):
    x = ref.b2b_inputs(*SHAPES[0], case=case, seed=7)
    for t in x.args()[:4]:
        assert t.dtype == np.float16 and t.flags.c_contiguous and np.isfinite(t).all()
    np.testing.assert_array_equal(x.a0, ref.b2b_inputs(*SHAPES[0], case=case, seed=7).a0)
    r = ref.b2b_ref(*x.args())
    assert (r.d1 + r.bound_d1).max() < ref.FP16_MAX and (r.d0 + r.bound_d0).max() < ref.FP16_MAX
    if case == "relu zeroes everything":
        assert not r.d0.any() and not r.d1.any() and (r.p0 < 0).all() and (r.p1 < 0).all()
    elif case == "large magnitudes":
        assert r.d0.max() > 2.0**12 and r.d1.max() > 2.0**12
    elif case == "mixed signs near zero":
        assert 0 < np.mean((r.d1 > 0) & (r.d1 < 2.0**-14)) and (r.p1 < 0).any()
    elif case == "beta1 = 0":
        assert x.beta1 == 0.0 and np.abs(x.c1).max() > 1000
    else:
        assert 0.2 < np.mean(r.d0 > 0) < 0.8 and 0.2 < np.mean(r.d1 > 0) < 0.8


def test_b2b_inputs_refuse_an_unknown_case():
    with pytest.raises(ValueError, match="case must be one of"):
        ref.b2b_inputs(*SMALL, case="nope")


# --- the bound: sound and not vacuous -----------------------------------------------------------------------


@pytest.mark.parametrize("accumulate", ["fp32", "fp32-truncate"])
@pytest.mark.parametrize("shape", SHAPES)
def test_bound_holds_for_fp32_accumulation_in_any_rounding(shape, accumulate):
    for x in ref.b2b_cases(*shape, seed=11):
        r = ref.b2b_ref(*x.args())
        d0, d1 = ref.b2b_fp16(*x.args(), accumulate=accumulate)
        assert excess(d0, r.d0, r.bound_d0) <= 1, x.name
        assert excess(d1, r.d1, r.bound_d1) <= 1, x.name


def test_bound_is_within_a_small_factor_of_the_rounding_error():
    x = ref.b2b_inputs(*SHAPES[0], seed=2)
    r = ref.b2b_ref(*x.args())
    d0, d1 = ref.b2b_fp16(*x.args())
    assert excess(d0, r.d0, r.bound_d0) > 0.25  # D0's error is its FP16 rounding: the bound is 2x to 4x that
    positive = r.d1 > 0.5
    # D1's bound is D0's rounding carried through |B1| with no cancellation: about 1% here, not a vacuous bound
    assert np.median(r.bound_d1[positive] / r.d1[positive]) < 2.0**-5


@pytest.mark.parametrize("shape", SHAPES)
def test_fp16_accumulation_breaks_the_bound(shape):
    x = ref.b2b_inputs(*shape, seed=5)
    r = ref.b2b_ref(*x.args())
    d0, d1 = ref.b2b_fp16(*x.args(), accumulate="fp16")
    assert excess(d0, r.d0, r.bound_d0) > 2 and excess(d1, r.d1, r.bound_d1) > 1


def test_d0_rounded_to_bfloat16_breaks_the_bound():
    x = ref.b2b_inputs(*SHAPES[0], seed=6)
    r = ref.b2b_ref(*x.args())
    d0, _ = ref.b2b_fp16(*x.args())
    bits = d0.astype(np.float32).view(np.uint32)
    bf16 = ((bits + 0x8000) & 0xFFFF0000).view(np.float32)  # 8 significant bits instead of 11
    assert excess(bf16, r.d0, r.bound_d0) > 1


def test_gemm_bias_relu_bound_sound_and_not_vacuous():
    for x in ref.gemm_cases(128, 64, 512, seed=3):
        want, bound = ref.gemm_bias_relu_ref(*x.args())
        assert excess(ref.gemm_bias_relu_fp16(*x.args()), want, bound) <= 1, x.name
    x = ref.gemm_inputs(128, 64, 512, seed=4)
    want, bound = ref.gemm_bias_relu_ref(*x.args())
    s = ref.matmul_acc(x.a, x.b, "fp16")
    assert excess(ref.relu(s + x.bias.astype(np.float32)).astype(np.float16), want, bound) > 1


def test_gamma_refuses_huge_n():
    assert ref.gamma(10, 2.0**-24) == pytest.approx(10 * 2.0**-24)
    with pytest.raises(ValueError):
        ref.gamma(2**24, 2.0**-24)


# --- traffic ------------------------------------------------------------------------------------------------


def test_b2b_traffic_counts_by_hand():
    m, k0, n0, n1 = 2**17, 576, 64, 128
    fused = traffic.b2b_traffic("fused", m, k0, n0, n1)
    epi = traffic.b2b_traffic("epilogue", m, k0, n0, n1)
    lib = traffic.b2b_traffic("library", m, k0, n0, n1)
    assert fused.bytes == 2 * (m * k0 + k0 * n0 + n0 * n1 + 2 * m * n1)
    assert epi.bytes - fused.bytes == 2 * 2 * m * n0  # D0 written once and read once
    assert lib.bytes - fused.bytes == 2 * (4 * m * n0 + 2 * m * n1)  # P0, D0 twice each; P1 twice
    assert (fused.kernels, epi.kernels, lib.kernels) == (1, 2, 4)
    assert fused.flops == epi.flops == 2 * m * (k0 * n0 + n0 * n1)
    assert lib.bytes / fused.bytes > 1.6 and 1.1 < epi.bytes / fused.bytes < 1.2
    wide = [traffic.b2b_traffic(p, m, 64, 256, 64).bytes for p in ("fused", "epilogue")]
    assert wide[1] / wide[0] > 3.5  # where the intermediate dominates


def test_b2b_traffic_batch_and_beta_zero():
    one = traffic.b2b_traffic("fused", 256, 64, 32, 16)
    assert traffic.b2b_traffic("fused", 256, 64, 32, 16, batch=4).bytes == 4 * one.bytes
    assert one.bytes - traffic.b2b_traffic("fused", 256, 64, 32, 16, reads_c1=False).bytes == 2 * 256 * 16
    with pytest.raises(ValueError, match="path"):
        traffic.b2b_traffic("cutlass", 256, 64, 32, 16)
    with pytest.raises(ValueError, match="m must be"):
        traffic.b2b_traffic("fused", 0, 64, 32, 16)


def test_gemm_traffic_and_roofline():
    f, s = (traffic.gemm_bias_relu_traffic(p, 1024, 256, 128) for p in ("fused", "separate"))
    assert s.bytes - f.bytes == 2 * 2 * 1024 * 256 and f.flops == 2 * 1024 * 256 * 128
    assert traffic.time_floor(1e12, 1e9, 1.0, 100.0) == pytest.approx(0.01)  # compute: 1e12 / 1e14
    assert traffic.bound_by(1e9, 1e12, 1.0, 100.0) == "memory"
    ridge = traffic.ridge_point(3.35, 989.5)  # an H100 SXM's data sheet: about 295 FLOP/B
    assert ridge == pytest.approx(295.4, abs=0.1)
    assert traffic.bound_by(ridge * 1.01, 1.0, 3.35e-12, 989.5e-12) == "compute"
    assert traffic.bound_by(ridge * 0.99, 1.0, 3.35e-12, 989.5e-12) == "memory"
    rows = traffic.b2b_prediction(2**17, 576, 64, 128, bandwidth_tbs=3.35, tflops=989.5)
    assert [r["path"] for r in rows] == ["fused", "epilogue", "library"] and rows[0]["bound"] == "memory"
    assert "floor us" in traffic.format_prediction(rows)


# --- the checkers against NumPy "kernels" -------------------------------------------------------------------


def b2b_kernel(mistake: str | None = None):
    """A NumPy run/stages pair computing the back-to-back GEMM as the GPU does, with one ``mistake``."""
    kept: dict[str, np.ndarray] = {}

    def run(a0, b0, b1, c1, alpha0, alpha1, beta1):
        f32 = np.float32
        t0 = f32(alpha0) * ref.matmul_acc(a0, b0)
        if mistake == "alpha0 twice":
            t0 = f32(alpha0) * t0
        d0 = (t0 if mistake == "no relu0" else ref.relu(t0)).astype(np.float16)
        if mistake == "row tile":
            d0[..., 32:, :] = d0[..., :32, :]
        kept["d0"] = d0
        s1 = ref.matmul_acc(d0, b1)
        c = 0 if mistake == "no beta" or beta1 == 0 else f32(beta1) * c1.astype(f32)  # C1 unread when beta1 = 0
        t1 = f32(alpha1) * (f32(alpha1) if mistake == "alpha1 twice" else 1) * s1 + c
        d1 = (t1 if mistake == "no relu1" else ref.relu(t1)).astype(np.float16)
        if mistake == "batch 0 only":
            d1 = np.broadcast_to(d1[:1], d1.shape).copy()
        return d1

    return run, lambda: dict(kept)


@pytest.mark.parametrize("batched", [False, True])
def test_a_correct_kernel_passes(batched, capsys):
    run, stages = b2b_kernel()
    result = fcheck.check_back_to_back(run, stages=stages, batched=batched, shape=SMALL, seed=1)
    # the cases, a negative alpha0, a C1 that cancels alpha1 D0 B1, an Inf and a -Inf in C1
    assert result.status == "passed" and result.cases == len(ref.B2B_CASES) + 8
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("mistake", "stage", "hint", "with_stages"),
    [
        ("no relu0", "d0", "ReLU missing in the first epilogue", True),
        ("no relu0", "d0 (inferred from D1: this plan does not keep D0)", "ReLU missing in the first epilogue", False),
        ("alpha0 twice", "d0", "alpha0 applied twice", True),
        ("no relu1", "d1", "ReLU missing in the second epilogue", True),
        ("no beta", "d1", "beta1*C1 missing", True),
        ("alpha1 twice", "d1", "alpha1 applied twice", True),
        ("row tile", "d0", "rows 32..63 (32 of 64) are wrong, the others right", True),
        ("row tile", "d1", "rows 32..63 (32 of 64) are wrong, the others right", False),
    ],
)
def test_a_broken_kernel_is_named(mistake, stage, hint, with_stages):
    run, stages = b2b_kernel(mistake)
    with pytest.raises(CheckFailure) as failure:
        fcheck.check_back_to_back(run, stages=stages if with_stages else None, shape=SMALL, seed=2)
    assert failure.value.stage == stage
    text = str(failure.value)
    assert hint in text and "at (row " in text and "got " in text and "expected " in text


def test_a_batch_mixup_names_the_batch():
    run, stages = b2b_kernel("batch 0 only")
    with pytest.raises(CheckFailure, match=r"batch 1 holds the result of batch 0") as failure:
        fcheck.check_back_to_back(run, stages=stages, batched=True, shape=SMALL, seed=3)
    assert failure.value.stage == "d1 (batch 1)"


def test_beta1_zero_must_not_add_c1():
    def run(a0, b0, b1, c1, alpha0, alpha1, beta1):
        d0 = ref.relu(np.float32(alpha0) * ref.matmul_acc(a0, b0)).astype(np.float16)
        beta = beta1 if beta1 != 0 else 1.0  # the mistake: beta1 = 0 treated as "no beta"
        return ref.relu(np.float32(alpha1) * ref.matmul_acc(d0, b1) + np.float32(beta) * c1).astype(np.float16)

    with pytest.raises(CheckFailure, match="C1 was read although beta1 = 0") as failure:
        fcheck.check_back_to_back(run, shape=SMALL, seed=4)
    assert failure.value.stage == "d1" and "at (row " in str(failure.value)


def test_an_untouched_skeleton_is_not_implemented(capsys, define):
    skeleton = define(f"def make_b2b_kernel():\n    pass  {PLACEHOLDER}\n", "make_b2b_kernel")

    def run(a0, *_):
        return np.full((a0.shape[0], SMALL[3]), np.nan, np.float16)  # the poisoned output, never written

    assert fcheck.check_back_to_back(run, shape=SMALL, exercise=skeleton).status == "not implemented"
    run_ok, _ = b2b_kernel()
    blank = {"d0": np.zeros((SMALL[0], SMALL[2]), np.float16)}
    result = fcheck.check_back_to_back(run_ok, stages=lambda: blank, shape=SMALL, exercise=skeleton)
    assert result.status == "not implemented"
    assert "not implemented yet" in capsys.readouterr().out


def test_a_wrong_result_from_an_exercise_with_a_placeholder_is_unfinished(define):
    exercise = define(f"def make_b2b_kernel():\n    pass  {PLACEHOLDER}\n", "make_b2b_kernel")
    run, stages = b2b_kernel("no beta")
    result = fcheck.check_back_to_back(run, stages=stages, shape=SMALL, exercise=exercise)
    assert result.status == "not implemented"
    with pytest.raises(CheckFailure):
        fcheck.check_back_to_back(run, stages=stages, shape=SMALL)


def test_wrong_dtype_and_shape_are_reported():
    run, _ = b2b_kernel()
    with pytest.raises(CheckFailure, match="dtype float32, expected float16"):
        fcheck.check_back_to_back(lambda *a: run(*a).astype(np.float32), shape=SMALL, seed=1)
    with pytest.raises(CheckFailure, match="shape"):
        fcheck.check_back_to_back(lambda *a: run(*a)[:-1], shape=SMALL, seed=1)


def gemm_kernel(mistake: str | None = None):
    def run(a, b, bias):
        s = ref.matmul_acc(a, b)
        bias32 = bias.astype(np.float32)
        if mistake == "fp16 before the bias":
            return ref.relu(s.astype(np.float16).astype(np.float32) + bias32).astype(np.float16)
        if mistake == "relu of nan is 0":  # not a mistake: x if x > 0 else 0, as the kernel writes it
            x = s + bias32
            return np.where(x > 0, x, 0).astype(np.float16)
        if mistake == "no bias":
            return ref.relu(s).astype(np.float16)
        if mistake == "relu first":
            return (ref.relu(s) + bias32).astype(np.float16)
        if mistake == "no relu":
            return (s + bias32).astype(np.float16)
        return ref.relu(s + bias32).astype(np.float16)

    return run


@pytest.mark.parametrize(
    ("mistake", "hint"),
    [("no bias", "bias missing"), ("relu first", "ReLU applied before the bias"), ("no relu", "ReLU missing")],
)
def test_gemm_checker_names_the_mistake(mistake, hint):
    fcheck.check_gemm_bias_relu(gemm_kernel(), shape=(64, 32, 96), seed=1)
    with pytest.raises(CheckFailure, match=hint):
        fcheck.check_gemm_bias_relu(gemm_kernel(mistake), shape=(64, 32, 96), seed=1)


def test_gemm_checker_untouched_is_not_implemented(define):
    skeleton = define(f"def make_gemm_bias_relu_kernel():\n    pass  {PLACEHOLDER}\n", "make_gemm_bias_relu_kernel")
    result = fcheck.check_gemm_bias_relu(
        lambda a, b, bias: np.zeros((64, 32), np.float16), shape=(64, 32, 96), exercise=skeleton
    )
    assert result.status == "not implemented"
    with pytest.raises(CheckFailure, match="no placeholder line left"):  # the same output from finished code
        fcheck.check_gemm_bias_relu(lambda a, b, bias: np.zeros((64, 32), np.float16), shape=(64, 32, 96))


def test_gemm_checker_passes_either_relu_of_nan_and_feeds_its_corners(capsys):
    for kernel in (gemm_kernel(), gemm_kernel("relu of nan is 0")):
        assert fcheck.check_gemm_bias_relu(kernel, shape=(384, 256, 192), seed=6).status == "passed"
    out = capsys.readouterr().out
    assert fcheck.CANCELLING in out and fcheck.NONFINITE in out


def test_gemm_checker_sees_the_rounding_order():
    """Rounding the FP32 accumulator to FP16 before adding a bias that nearly cancels it leaves the bound."""
    with pytest.raises(CheckFailure, match="rounded to FP16 before the bias") as failure:
        kernel = gemm_kernel("fp16 before the bias")
        fcheck.check_gemm_bias_relu(kernel, shape=(384, 256, 192), seed=7, cases=())  # the corners alone
    assert fcheck.CANCELLING in str(failure.value)


def test_gemm_checker_rejects_a_swapped_grid():
    def swapped(a, b, bias):  # blockIdx.x taken for the column tile: a 2 x 3 region of the 3 x 2 output
        out = gemm_kernel()(a, b, bias)
        out[256:, :] = np.nan
        return out

    with pytest.raises(CheckFailure, match="the poison it was handed in, never overwritten"):
        fcheck.check_gemm_bias_relu(swapped, shape=(384, 256, 192), seed=8)

"""2a's and 2b's checkers against wrong versions written for issue 35 (not the course's mutants in ``tools/mistakes``),
as NumPy stand-ins for the kernels with the GPU's FP32 sums and FP16 stores: each is rejected on every seed, by the
stage it breaks, with a message that names it; the correct ones (FP32 sums in any rounding) pass.

Kinds: ReLU applied before alpha0 (only a negative alpha0 shows it), alpha1 acc1 rounded to FP16 before beta1 C1 is
added (D1 against the kernel's own D0, within the second stage's rounding alone, shows it), the accumulator rounded to
FP16 before the bias (a bias that cancels the sum shows it), a store outside the output (the guard band), and ReLU
applied before the bias with the final ReLU kept, from a sum in a tensor core's order (named only where it is).
"""

from __future__ import annotations

import numpy as np
import pytest

from utilities.fusion import check
from utilities.fusion import reference as ref
from utilities.guard import Canvas

SEEDS = (1, 2, 3, 4, 5)
SHAPE = (128, 96, 32, 48)  # m, k0, n0, n1: small, every case of the check
F16, F32 = np.float16, np.float32


def b2b(relu_first: bool = False, early: bool = False, accumulate: str = "fp32"):
    """``run`` and ``stages`` of a back-to-back kernel, with the chosen mistakes."""
    kept = {}

    def run(a0, b0, b1, c1, alpha0, alpha1, beta1):
        s0 = ref.matmul_acc(a0, b0, accumulate)
        d0 = (F32(alpha0) * ref.relu(s0) if relu_first else ref.relu(F32(alpha0) * s0)).astype(F16)
        s1 = F32(alpha1) * ref.matmul_acc(d0, b1, accumulate)
        if early:
            s1 = s1.astype(F16).astype(F32)
        if beta1 != 0:
            s1 = s1 + F32(beta1) * c1.astype(F32)
        kept["d0"] = d0
        return ref.relu(s1).astype(F16)

    return run, lambda: dict(kept)


@pytest.mark.parametrize(
    ("mistake", "stage", "says"),
    [
        ({"relu_first": True}, "d0", "ReLU applied before alpha0"),
        ({"early": True}, "d1", "rounded to FP16 before beta1 * C1 was added"),
    ],
    ids=["relu before alpha0", "early FP16 rounding"],
)
@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize("seed", SEEDS)
def test_each_wrong_back_to_back_is_rejected_on_every_seed_with_its_name(mistake, stage, says, batched, seed):
    run, stages = b2b(**mistake)
    with pytest.raises(check.CheckFailure) as info:
        check.check_back_to_back(run, stages=stages, shape=SHAPE, batched=batched, seed=seed)
    assert info.value.stage.split(" (")[0] == stage and says in str(info.value), str(info.value)


@pytest.mark.parametrize("accumulate", ["fp32", "fp32-truncate"])
def test_right_back_to_back_kernels_pass_on_every_seed(accumulate):
    run, stages = b2b(accumulate=accumulate)
    for seed in SEEDS:
        assert check.check_back_to_back(run, stages=stages, shape=SHAPE, seed=seed).status == "passed"


def gemm(early: bool = False, stray: bool = False):
    """``run(a, b, bias)``: relu(acc + bias) in FP16, or with the accumulator rounded to FP16 first (``early``), or
    with one store past the output (``stray``)."""

    def run(a, b, bias):
        acc = a.astype(F32) @ b.astype(F32)
        if early:
            acc = acc.astype(F16).astype(F32)
        out = ref.relu(acc + bias.astype(F32)).astype(F16)
        if not stray:
            return out
        canvas = Canvas(out.shape, F16, fill=np.nan)
        canvas.out[...] = out
        canvas.buffer[canvas.guard + canvas.size] = 1.0  # column n of the last row: past the end
        return canvas.written()

    return run


@pytest.mark.parametrize(
    ("run", "says"),
    [
        (gemm(early=True), "rounded to FP16 before the bias"),
        (gemm(stray=True), "i.e. (255, 256): past the last column of the last row"),
    ],
    ids=["early rounding", "stray store"],
)
@pytest.mark.parametrize("seed", SEEDS)
def test_each_wrong_epilogue_is_rejected_on_every_seed_with_its_name(run, says, seed):
    with pytest.raises(check.CheckFailure) as info:
        check.check_gemm_bias_relu(run, seed=seed)
    assert info.value.stage == "out" and says in str(info.value), str(info.value)


def test_the_right_epilogue_passes_on_every_seed():
    for seed in SEEDS:
        assert check.check_gemm_bias_relu(gemm(), seed=seed).status == "passed"


def tensor_core_acc(a: np.ndarray, b: np.ndarray, toward_zero: bool, chunk: int = 16) -> np.ndarray:
    """``a @ b`` in FP32 in another order than NumPy's: each chunk of K products summed first, then added to the
    accumulator with one rounding (an FMA-like step), to nearest or toward zero (a tensor core's truncation)."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    acc = np.zeros((a.shape[0], b.shape[1]), F32)
    for k in range(0, a.shape[1], chunk):
        with np.errstate(invalid="ignore", over="ignore"):
            exact = acc.astype(np.float64) + a64[:, k : k + chunk] @ b64[k : k + chunk]
            acc = exact.astype(F32)
            away = np.abs(acc.astype(np.float64)) > np.abs(exact)
        if toward_zero:
            acc = np.where(away, np.nextafter(acc, F32(0)), acc)
    return acc


def epilogue(relu_first: bool = False, relu: bool = True, toward_zero: bool = False):
    """``run(a, b, bias)`` of 2a's kernel on :func:`tensor_core_acc`'s sum: ``relu(acc + bias)`` in FP32, stored as
    FP16; ``relu_first``: ``max(acc, 0) + bias`` before the final ReLU (the GPU mutant of tools/mistakes/fusion.py);
    ``relu=False``: no final ReLU."""

    def run(a, b, bias):
        acc = tensor_core_acc(a, b, toward_zero)
        x = (ref.relu(acc) if relu_first else acc) + bias.astype(F32)
        return (ref.relu(x) if relu else x).astype(F16)

    return run


@pytest.mark.parametrize("toward_zero", [False, True], ids=["nearest", "toward zero"])
@pytest.mark.parametrize("seed", SEEDS[:3])
def test_relu_before_the_bias_is_named_from_a_tensor_cores_sum(toward_zero, seed):
    """The mutant that the H200 run found misnamed: its output, recomputed, matches within the check's bound."""
    assert check.check_gemm_bias_relu(epilogue(toward_zero=toward_zero), seed=seed).status == "passed"
    with pytest.raises(check.CheckFailure) as info:
        check.check_gemm_bias_relu(epilogue(relu_first=True, toward_zero=toward_zero), seed=seed)
    assert info.value.stage == "out" and "ReLU applied before the bias" in str(info.value), str(info.value)


def test_relu_before_the_bias_is_not_said_of_other_wrong_outputs():
    with pytest.raises(check.CheckFailure) as info:
        check.check_gemm_bias_relu(epilogue(relu=False), seed=1)
    assert "ReLU missing" in str(info.value) and "ReLU applied before" not in str(info.value), str(info.value)

    def few_wrong(a, b, bias):  # the right result, a few entries changed
        out = epilogue()(a, b, bias)
        out[::37, ::41] += F16(0.5)
        return out

    with pytest.raises(check.CheckFailure) as info:
        check.check_gemm_bias_relu(few_wrong, seed=1)
    assert "ReLU applied before" not in str(info.value), str(info.value)

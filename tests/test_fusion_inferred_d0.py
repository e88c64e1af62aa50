"""2b's checker on the contract's other plan (``check.B2B_CONFIGS[0]``: D0 not kept, so no ``stages``): a mistake in
the first epilogue is inferred from D1 and reported as stage 'd0', with the words the D0 stage uses, as the GPU
mutants of ``tools/mistakes/fusion.py`` expect; the right kernel passes, and other wrong D1s are not so named.

The "kernels" are NumPy stand-ins with the GPU's stage semantics: FP32 sums (``reference.matmul_acc``), D0 stored as
FP16 between the GEMMs, D1 stored as FP16.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from utilities import mutants
from utilities.fusion import check
from utilities.fusion import reference as ref

ROOT = Path(__file__).resolve().parents[1]
OTHER = check.B2B_CONFIGS[0]  # the plan the notebook checks first, without D0
SEEDS = (1, 2, 3)
TRIES = {"fp32": SEEDS, "fp32-truncate": SEEDS[:1]}  # a tensor core's truncating sums: slow in NumPy, one seed
F16, F32 = np.float16, np.float32
INFERRED = "d0 (inferred from D1: this plan does not keep D0)"

# the first epilogue, right and wrong: acc0 (FP32), alpha0, alpha1 -> D0 before its FP16 store
FIRST: dict[str, Callable[[np.ndarray, float, float], np.ndarray]] = {
    "right": lambda s, a0, a1: ref.relu(F32(a0) * s),
    "forgets alpha0": lambda s, a0, a1: ref.relu(s),
    "scales D0 by alpha1": lambda s, a0, a1: ref.relu(F32(a1) * s),
    "applies ReLU before alpha0 (seen with a negative alpha0)": lambda s, a0, a1: F32(a0) * ref.relu(s),
    "forgets the first ReLU": lambda s, a0, a1: F32(a0) * s,
    "applies alpha0 twice": lambda s, a0, a1: ref.relu(F32(a0) * (F32(a0) * s)),
}
# what the failure must say: the D0 stage's words
SAYS = {
    "forgets alpha0": "alpha0 missing",
    "scales D0 by alpha1": "alpha1 used instead of alpha0",
    "applies ReLU before alpha0 (seen with a negative alpha0)": "ReLU applied before alpha0",
    "forgets the first ReLU": "ReLU missing in the first epilogue",
}
FIRST_EPILOGUE_WORDS = ("alpha0 missing", "alpha1 used instead of alpha0", "ReLU applied before alpha0",
                        "ReLU missing in the first epilogue", "inferred from D1")  # fmt: skip


def b2b(first: str = "right", after: Callable[[np.ndarray], np.ndarray] | None = None, accumulate: str = "fp32"):
    """``run`` of a back-to-back kernel whose first epilogue is ``FIRST[first]``; ``after`` changes its D1."""

    def run(a0, b0, b1, c1, alpha0, alpha1, beta1):
        d0 = FIRST[first](ref.matmul_acc(a0, b0, accumulate), alpha0, alpha1).astype(F16)  # D0 is FP16 in between
        s1 = F32(alpha1) * ref.matmul_acc(d0, b1, accumulate)
        if beta1 != 0:  # C1 unread when beta1 = 0
            s1 = s1 + F32(beta1) * c1.astype(F32)
        d1 = ref.relu(s1).astype(F16)
        return d1 if after is None else after(d1)

    return run


def check_other(run: Callable[..., np.ndarray], seed: int, batched: bool = False):
    shape = OTHER["shape"] if not batched else (64, *OTHER["shape"][1:])
    return check.check_back_to_back(run, shape=shape, block=OTHER["block"], batched=batched, batch=2, seed=seed)


def fusion_mistakes() -> dict[str, mutants.Mistake]:
    spec = importlib.util.spec_from_file_location("fusion_mistakes", ROOT / "tools" / "mistakes" / "fusion.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {m.what: m for m in module.MISTAKES if m.exercise == "2b b2b"}


@pytest.mark.parametrize("accumulate", ["fp32", "fp32-truncate"])
def test_the_right_kernel_passes_without_d0(accumulate):
    for seed in TRIES[accumulate]:
        assert check_other(b2b(accumulate=accumulate), seed).status == "passed"


@pytest.mark.parametrize("mistake", list(SAYS))
@pytest.mark.parametrize("accumulate", ["fp32", "fp32-truncate"])
def test_a_wrong_first_epilogue_is_inferred_from_d1_and_named(mistake, accumulate):
    """Every seed rejects it as stage 'd0' with the D0 stage's words, and the course's mutant scores "rejected"."""
    failures = []
    for seed in TRIES[accumulate]:
        with pytest.raises(check.CheckFailure) as info:
            check_other(b2b(mistake, accumulate=accumulate), seed)
        text = str(info.value)
        assert info.value.stage == INFERRED and SAYS[mistake] in text, text
        assert "stage 'd1'" in text and "got " in text and "expected " in text, text  # D1's evidence, shown
        failures.append(info.value)
    known = fusion_mistakes()
    if mistake in known:
        assert mutants.sort_rejection(known[mistake], failures) == "rejected"


def test_the_inference_names_the_batch():
    with pytest.raises(check.CheckFailure) as info:
        check_other(b2b("forgets alpha0"), 1, batched=True)
    assert info.value.stage == "d0 (batch 0, inferred from D1: this plan does not keep D0)", info.value.stage
    assert "alpha0 missing" in str(info.value)


def test_relu_before_alpha0_shows_only_with_a_negative_alpha0():
    with pytest.raises(check.CheckFailure) as info:
        check_other(b2b("applies ReLU before alpha0 (seen with a negative alpha0)"), 1)
    assert "on input 'a negative alpha0" in str(info.value), str(info.value)


def noise(d1: np.ndarray) -> np.ndarray:
    """D1 plus nonnegative noise: wrong, and no ReLU missing to say so."""
    rng = np.random.default_rng(0)
    return (d1.astype(F32) + F32(0.25) * np.abs(rng.standard_normal(d1.shape)).astype(F32)).astype(F16)


def few_wrong(d1: np.ndarray) -> np.ndarray:
    out = d1.copy()
    out[..., ::37, ::11] += F16(0.5)
    return out


@pytest.mark.parametrize("after", [noise, few_wrong], ids=["noise", "a few entries"])
def test_an_unrelated_wrong_d1_is_not_named_as_a_first_epilogue_mistake(after):
    for seed in SEEDS:
        with pytest.raises(check.CheckFailure) as info:
            check_other(b2b(after=after), seed)
        text = str(info.value)
        assert info.value.stage == "d1" and not any(w in text for w in FIRST_EPILOGUE_WORDS), text


def test_a_second_epilogue_mistake_stays_at_d1():
    def run(a0, b0, b1, c1, alpha0, alpha1, beta1):  # C1 added without beta1
        d0 = ref.relu(F32(alpha0) * ref.matmul_acc(a0, b0)).astype(F16)
        return ref.relu(F32(alpha1) * ref.matmul_acc(d0, b1) + c1.astype(F32)).astype(F16)

    with pytest.raises(check.CheckFailure) as info:
        check_other(run, 1)
    text = str(info.value)
    assert info.value.stage == "d1" and "C1 added without beta1" in text, text
    assert not any(w in text for w in FIRST_EPILOGUE_WORDS), text


def test_a_d1_that_either_epilogue_explains_names_both_at_d1():
    """alpha0 twice in the first epilogue, or again in the second: with alpha0 > 0 the two D1s agree."""
    with pytest.raises(check.CheckFailure) as info:
        check_other(b2b("applies alpha0 twice"), 1)
    text = str(info.value)
    assert info.value.stage == "d1" and "alpha0 applied again in the second GEMM" in text, text
    assert "in the first epilogue (D0 is not kept to tell): alpha0 applied twice" in text, text

"""The block-fusion checkers' corner inputs on the GPU, through the course's own kernels (skipped with the reason
without a GPU).

Each check as its notebook runs it (a bias that nearly cancels the sum, NaN and Inf in the operands, C1 unread when
beta1 = 0, batched and not): the course's kernels must pass every corner they feed, and each check runs twice and prints
how long the second run took (the run-through measures a check after an edit: issue 27)."""

from __future__ import annotations

import numpy as np
import pytest

from utilities.fusion import check as fcheck

pytestmark = pytest.mark.gpu


def test_gemm_bias_relu_cancelling_bias_and_non_finite_values(gpu, check_twice):
    from utilities.fusion.tensorcore import GemmBiasRelu

    cp = gpu
    m, n, k = 384, 256, 192
    plan = GemmBiasRelu(m, n, k)

    def run(a, b, bias):
        out = cp.full((m, n), np.nan, dtype=cp.float16)
        return cp.asnumpy(plan(cp.asarray(a), cp.asarray(b), cp.asarray(bias), out=out))

    check_twice(fcheck.check_gemm_bias_relu, run, shape=(m, n, k), seed=5)


@pytest.mark.parametrize("batch", [None, 3])
def test_back_to_back_c1_unread_when_beta1_is_zero_and_infinite_c1(gpu, batch, check_twice):
    from utilities.fusion.tensorcore import BackToBack

    cp = gpu
    shape = (256, 576, 64, 128)
    plan = BackToBack(*shape, batch=batch, keep_d0=True)

    def run(a0, b0, b1, c1, alpha0, alpha1, beta1):
        out = cp.full(c1.shape, np.nan, dtype=cp.float16)
        return cp.asnumpy(plan(*(cp.asarray(x) for x in (a0, b0, b1, c1)), alpha0, alpha1, beta1, out=out))

    def stages():
        return {"d0": cp.asnumpy(plan.d0 if plan.batch else plan.d0[0])}

    check_twice(
        fcheck.check_back_to_back, run, stages=stages, shape=shape, batched=batch is not None, batch=batch or 3, seed=6
    )

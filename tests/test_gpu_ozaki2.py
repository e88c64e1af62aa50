"""Ozaki-II on the GPU against the NumPy reference, stage by stage (skipped with the reason without a GPU).

The plan's kernels are plain numba kernels and cuBLAS: no cuBLASDx build, so these run in seconds.
"""

from __future__ import annotations

import numpy as np
import pytest

from utilities import inputs
from utilities.ozaki2 import check
from utilities.ozaki2 import reference as ref

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def gpu():
    import cupy as cp

    from utilities.ozaki2 import tensorcore

    return cp, tensorcore


def _runner(cp, plan):
    def run(a, b, c, alpha, beta):
        out = cp.full(c.shape, np.nan)
        return cp.asnumpy(plan(cp.asarray(a), cp.asarray(b), cp.asarray(c), alpha, beta, out=out))

    def stages():
        n = plan.count
        kept = {"mu": plan.mu, "nu": plan.nu, "a_res": plan.a_res[:n], "b_res": plan.b_res[:n],
                "products": plan.products_buffer[:n]}  # fmt: skip
        return {key: cp.asnumpy(v) for key, v in kept.items()}

    return run, stages


@pytest.mark.parametrize("count", [14, 20])
@pytest.mark.parametrize("shape", [(256, 192, 320), (120, 136, 200)])
def test_plan_matches_reference_stage_by_stage(gpu, shape, count):
    cp, T = gpu
    plan = T.Ozaki2Gemm(*shape, moduli=count)
    run, stages = _runner(cp, plan)
    assert check.check_ozaki2_gemm(run, count, shapes=[shape], stages=stages, seed=1234).status == "passed"


def test_stage_runners_pass_their_checkers(gpu):
    _, T = gpu
    assert check.check_scaling(lambda x, n: T.residues_on_gpu(x, n), seed=3).status == "passed"
    assert check.check_reconstruction(lambda *args: T.reconstruct_on_gpu(*args), seed=4).status == "passed"


def test_automatic_count_matches_the_cpu_choice_and_is_fp64_class(gpu):
    cp, T = gpu
    from utilities import errors, exact
    from utilities.ozaki2.precision import moduli_needed

    n = 512
    for phi in (0.5, 4.0):
        a, b = inputs.exponent_spread(n, n, phi, 1), inputs.exponent_spread(n, n, phi, 2)
        plan = T.Ozaki2Gemm(n, n, n, "auto")
        c = cp.asnumpy(plan(cp.asarray(a), cp.asarray(b)))
        assert plan.count == moduli_needed(a, b).count
        hi, lo = exact.matmul_dd(a, b)
        emulated = errors.normwise_relative_error(c, hi, lo)
        native = errors.normwise_relative_error(cp.asnumpy(cp.asarray(a) @ cp.asarray(b)), hi, lo)
        assert emulated <= native, f"phi = {phi}: {plan.count} moduli gave {emulated:.2e}, DGEMM {native:.2e}"


def test_line_norms_on_the_gpu_match_numpy(gpu):
    cp, T = gpu
    from utilities.precision import LineNorms

    a, b = inputs.exponent_spread(70, 90, 2.0, 5) * 2.0**700, inputs.exponent_spread(90, 40, 2.0, 6)
    a[3, 4], b[5, 6] = np.nan, -np.inf
    want, got = LineNorms.of(a, b), T.line_norms(cp.asarray(a), cp.asarray(b))
    assert (got.ea, got.eb) == (want.ea, want.eb)
    for name in ("a_rows", "b_cols", "c_rows", "c_cols"):
        np.testing.assert_allclose(getattr(got, name), getattr(want, name), rtol=1e-12, err_msg=name)


def test_batched_int8_gemm_is_exact(gpu):
    cp, _ = gpu
    from utilities import cublas

    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (3, 70, 64), dtype=np.int8)
    bt = rng.integers(-128, 128, (3, 50, 64), dtype=np.int8)
    got = cp.asnumpy(cublas.igemm_batched(cp.asarray(a), cp.asarray(bt)))
    want = np.stack([a[i].astype(np.int64) @ bt[i].astype(np.int64).T for i in range(3)])
    np.testing.assert_array_equal(got, want)


def test_bad_inputs_are_refused_with_the_fix(gpu):
    cp, T = gpu
    plan = T.Ozaki2Gemm(64, 64, 64, 14)
    with pytest.raises(TypeError, match="float64"):
        plan(cp.zeros((64, 64), cp.float32), cp.zeros((64, 64)))
    with pytest.raises(ValueError, match="build a new plan"):
        plan(cp.zeros((64, 32)), cp.zeros((32, 64)))
    with pytest.raises(ref.ModuliError, match="from 2 to 20"):
        T.Ozaki2Gemm(64, 64, 64, 40)
    with pytest.raises(ValueError, match="int32"):
        T.Ozaki2Gemm(64, 64, 2**17, 14)

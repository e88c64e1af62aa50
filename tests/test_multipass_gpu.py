"""The multi-pass tile GEMM on the GPU against the NumPy reference (skipped with the reason without a GPU).

One shape, 256 x 256 x 1024, for every F: each (dtype, F) kernel builds once and serves every shape.
"""

from __future__ import annotations

import numpy as np
import pytest

from utilities import multipass as mp
from utilities.multipass import check

pytestmark = pytest.mark.gpu

SHAPE = (256, 256, 1024)
FS = (1, 2, 4, 8)


@pytest.fixture(scope="module")
def gpu():
    import cupy as cp

    from utilities.machinery import buildcache

    buildcache.install(quiet=True)
    from utilities.multipass import tensorcore as gpu_multipass

    return cp, gpu_multipass


def _runner(cp, plan):
    def run(a, bt):
        out = cp.zeros((a.shape[0], bt.shape[0]), dtype=np.int32 if a.dtype == np.int8 else np.float32)
        return cp.asnumpy(plan(cp.asarray(a), cp.asarray(bt), out=out))

    return run


@pytest.mark.parametrize("dtype", mp.DTYPES)
@pytest.mark.parametrize("fused", FS)
def test_every_f_matches_the_reference_on_random_and_extreme_inputs(gpu, dtype, fused):
    cp, G = gpu
    cfg = mp.PassConfig(dtype, fused=fused)
    plan = G.PassGemm(*SHAPE, cfg)
    result = check.check_pass_gemm(_runner(cp, plan), dtype, phase_k=cfg.phase_k, shapes=[SHAPE], seed=1234)
    assert result.status == "passed" and result.cases == len(mp.CASES) + (dtype == "float16")  # FP16: NaN, Inf


@pytest.mark.parametrize("dtype", mp.DTYPES)
def test_library_pipeline_matches_the_reference(gpu, dtype):
    cp, G = gpu
    for case in mp.CASES:
        a, bt = mp.operands(case, *SHAPE, dtype, 7)
        got = cp.asnumpy(G.PipelineGemm(cp.asarray(a), cp.asarray(bt), dtype)())
        want = mp.reference(a, bt)
        if dtype == "int8":
            np.testing.assert_array_equal(got, want, err_msg=case)
        else:
            assert (np.abs(got.astype(np.float64) - want) <= mp.fp32_bound(a, bt)).all(), case


def test_b_may_be_passed_as_a_column_major_view(gpu):
    cp, G = gpu
    a, bt = mp.operands("random", *SHAPE, "int8", 3)
    plan = G.PassGemm(*SHAPE, mp.PassConfig("int8", fused=8))
    b_colmajor = cp.asarray(bt).T  # (k, n), Fortran order: B column-major
    np.testing.assert_array_equal(cp.asnumpy(plan(cp.asarray(a), b_colmajor)), mp.reference(a, bt))


def test_resources_are_read_from_the_compiled_kernel(gpu):
    _, G = gpu
    for fused in (1, 8):
        cfg = mp.PassConfig("int8", fused=fused)
        res = G.PassGemm(*SHAPE, cfg).resources()
        assert 32 <= res["registers"] <= 255 and res["spills"] >= 0
        assert res["smem"] >= cfg.smem_bytes and res["blocks_per_sm"] >= 1 and 0 < res["occupancy"] <= 1


def test_bad_inputs_are_rejected_with_the_fix(gpu):
    cp, G = gpu
    plan = G.PassGemm(*SHAPE, mp.PassConfig("int8", fused=8))
    m, n, k = SHAPE
    a, bt = cp.zeros((m, k), cp.int8), cp.zeros((n, k), cp.int8)
    with pytest.raises(TypeError, match="int8"):
        plan(a.astype(cp.float16), bt)
    with pytest.raises(TypeError, match="cupy"):
        plan(cp.asnumpy(a), bt)
    with pytest.raises(ValueError, match="built for"):
        plan(a[:, :512], bt)
    with pytest.raises(ValueError, match="C-contiguous"):
        plan(cp.zeros((k, m), cp.int8).T, bt)
    with pytest.raises(ValueError, match="16-byte boundary"):
        plan(cp.zeros(m * k + 8, cp.int8)[8:].reshape(m, k), bt)  # C-contiguous, 8 bytes off a 16-byte line
    with pytest.raises(ValueError, match="pad"):
        G.PassGemm(200, 256, 1024, mp.PassConfig("int8", fused=8))
    with pytest.raises(ValueError, match="single phase"):
        G.PassGemm(256, 256, 256, mp.PassConfig("int8", fused=8))

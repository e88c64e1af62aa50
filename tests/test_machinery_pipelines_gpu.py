"""Shape-generic device pipelines on the GPU: one kernel build serves every problem shape, and computes exactly
what the reference computes at each (skipped with the reason without a GPU).

Each test runs one kernel at several shapes and asserts both: the results (integer GEMMs exact, Ozaki-I bit for
bit), and that the kernel's dispatcher holds one build (with the verified stack; another stack builds per shape).
"""

from __future__ import annotations

import numpy as np
import pytest

from utilities import inputs, ozaki
from utilities import multipass as mp

pytestmark = pytest.mark.gpu

# (m, n, k): 128-multiples of rows and columns, k a multiple of the pipeline's tile_k with >= 3 stages
GEMM_SHAPES = [(256, 256, 1024), (384, 128, 512), (128, 640, 1536), (1024, 1024, 384)]
OZAKI_SHAPES = [(256, 256, 384), (200, 136, 512), (384, 512, 768)]


@pytest.fixture(scope="module")
def gpu():
    import cupy as cp

    from utilities.machinery import buildcache, pipelines

    buildcache.install(quiet=True)
    return cp, pipelines


def _builds(dispatcher) -> int:
    return len(dispatcher.overloads)


@pytest.mark.parametrize("dtype", mp.DTYPES)
def test_one_pipeline_gemm_build_serves_every_shape(gpu, dtype):
    cp, pipelines = gpu
    from utilities.multipass import tensorcore as G

    for i, (m, n, k) in enumerate(GEMM_SHAPES):
        a, bt = mp.operands("random", m, n, k, dtype, 100 + i)
        plan = G.PipelineGemm(cp.asarray(a), cp.asarray(bt), dtype)
        got, want = cp.asnumpy(plan()), mp.reference(a, bt)
        if dtype == "int8":
            np.testing.assert_array_equal(got, want, err_msg=f"{m}x{n}x{k}")
        else:
            assert (np.abs(got.astype(np.float64) - want) <= mp.fp32_bound(a, bt)).all(), f"{m}x{n}x{k}"
    if pipelines.supported():
        assert _builds(plan.kernel) == 1, "a new shape built the kernel again"


def test_pipeline_reports_run_time_marks_to_nvmath_and_keeps_the_real_shape(gpu):
    cp, pipelines = gpu
    if not pipelines.supported():
        pytest.skip("shape-generic pipelines are off on this stack (see utilities.machinery.versions)")
    from utilities.multipass import tensorcore as G

    a, bt = (cp.zeros(s, cp.int8) for s in ((384, 512), (128, 512)))
    p = G.PipelineGemm(a, bt, "int8").pipeline
    assert p.shapes == ((384, 512), (512, 128))
    assert p._a_view.shape == (pipelines.RUNTIME,) * 2 and p.a_strides == (pipelines.RUNTIME, 1)
    assert p.b_strides == (1, pipelines.RUNTIME)


@pytest.mark.parametrize("variant", ["unfused", "fused"])
def test_one_ozaki_build_serves_every_shape_bit_for_bit(gpu, variant):
    cp, pipelines = gpu
    from utilities.ozaki import tensorcore as Z

    for i, (m, n, k) in enumerate(OZAKI_SHAPES):
        a, b = inputs.exponent_spread(m, k, 1.0, 20 + i), inputs.exponent_spread(k, n, 1.0, 40 + i)
        plan = Z.OzakiGemm(m, n, k, 7, variant)
        got = cp.asnumpy(plan(cp.asarray(a), cp.asarray(b)))
        np.testing.assert_array_equal(got, ozaki.ozaki_gemm_ref(a, b, 7), err_msg=f"{variant} {m}x{n}x{k}")
    if pipelines.supported():
        kernel = Z.make_fused_kernel(plan.MM) if variant == "fused" else Z.make_products_kernel(plan.MM)
        assert _builds(kernel) == 1, "a new shape built the kernel again"


def test_one_pipelined_back_to_back_build_serves_every_batch_and_m(gpu):
    cp, pipelines = gpu
    from utilities.fusion import check as fcheck
    from utilities.fusion.tensorcore_persistent import PipelineConfig, PipelinedBackToBack

    kernels = set()
    for batch, m in ((1, 64 * 37), (2, 64 * 12)):

        def run(a0, b0, b1, c1, alpha0, alpha1, beta1):
            cfg = PipelineConfig(tile_m=64, threads=128, tile_k=32, depth=2)
            plan = PipelinedBackToBack(cp.asarray(a0), cp.asarray(b0), b1.shape[2], cfg)
            kernels.add(plan.kernel)
            return cp.asnumpy(plan(cp.asarray(b1), cp.asarray(c1), alpha0, alpha1, beta1))

        result = fcheck.check_back_to_back(run, batched=True, batch=batch, shape=(m, 64, 256, 64), seed=batch)
        assert result.status == "passed", result
    if pipelines.supported():
        (kernel,) = kernels
        assert _builds(kernel) == 1, "a new batch or M built the kernel again"


def test_a_pipeline_init_writes_nothing_past_its_storage(gpu):
    """The guard band after each shape-generic pipeline's storage stays as it was filled (a write past the storage
    warns): at the shapes of 3b's checks, whose second plan once computed wrong products."""
    import warnings

    _, pipelines = gpu
    from utilities.ozaki import tensorcore as Z

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        for shape in ((256, 384, 384), (300, 136, 392)):
            plan = Z.OzakiGemm(*shape, 7, "unfused")
            assert pipelines.guard_overwritten(bytes(plan.pipeline.guard_band().get())) == 0

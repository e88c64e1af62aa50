"""Block-resident fusion on the GPU against the FP64 reference within the derived bound (skipped without a GPU).

The fused kernels (``utilities.fusion.tensorcore`` and ``tensorcore_persistent``), stage by stage through the
checkers, batched, with their constraint errors; and the library baselines, whose epilogue path must meet the
same bound.
"""

from __future__ import annotations

import numpy as np
import pytest

from utilities.fusion import check as fcheck
from utilities.fusion import reference as ref

pytestmark = pytest.mark.gpu

SHAPES = [(256, 576, 64, 128), (256, 64, 256, 64)]  # the (K0, N0, N1) on a few row tiles


@pytest.fixture(scope="module")
def gpu():
    import cupy as cp

    from utilities.machinery import buildcache

    buildcache.install(quiet=True)
    from types import SimpleNamespace

    from utilities.fusion import baselines, tensorcore, tensorcore_persistent

    return cp, SimpleNamespace(**{**vars(tensorcore), **vars(tensorcore_persistent)}), baselines


def runner(cp, plan):
    """run/stages around a plan, as the notebooks build them: a NaN-poisoned output, NumPy in and out."""

    def run(a0, b0, b1, c1, alpha0, alpha1, beta1):
        out = cp.full(c1.shape, np.nan, cp.float16)
        ops = [cp.asarray(x) for x in (a0, b0, b1, c1)]
        return cp.asnumpy(plan(*ops, alpha0, alpha1, beta1, out=out))

    def stages():
        return {"d0": cp.asnumpy(plan.d0 if plan.batch else plan.d0[0])}  # the plan keeps a batch axis

    return run, stages


@pytest.mark.parametrize("shape", SHAPES)
def test_fused_b2b_matches_reference_stage_by_stage(gpu, shape):
    cp, bf, _ = gpu
    run, stages = runner(cp, bf.BackToBack(*shape, keep_d0=True))
    assert fcheck.check_back_to_back(run, stages=stages, shape=shape, seed=1234).status == "passed"


def test_fused_b2b_without_d0_matches_reference(gpu):
    cp, bf, _ = gpu
    run, _ = runner(cp, bf.BackToBack(*SHAPES[0]))
    assert fcheck.check_back_to_back(run, shape=SHAPES[0], seed=99).status == "passed"


def test_fused_b2b_batched(gpu):
    cp, bf, _ = gpu
    run, stages = runner(cp, bf.BackToBack(*SHAPES[0], batch=3, keep_d0=True))
    result = fcheck.check_back_to_back(run, stages=stages, batched=True, batch=3, shape=SHAPES[0], seed=7)
    assert result.status == "passed"


# persistent kernels on enough row tiles that each block loops over several, the last ones unevenly
PERSISTENT = [((64 * 300, 64, 256, 64), (32, 128, 3)), ((128 * 150, 576, 64, 128), (128, 256, 3))]


def _persistent(bf, shape, block, batch=None):
    cfg = bf.BlockConfig(tile_m=block[0], threads=block[1], depth=block[2])
    return bf.PersistentBackToBack(*shape, batch=batch, cfg=cfg)


@pytest.mark.parametrize(("shape", "block"), PERSISTENT)
def test_persistent_b2b_matches_reference_and_the_streaming_kernel_bit_for_bit(gpu, shape, block):
    cp, bf, _ = gpu
    plan = _persistent(bf, shape, block)
    run, _ = runner(cp, plan)
    assert fcheck.check_back_to_back(run, shape=shape, seed=21).status == "passed"
    assert plan.grid[0] * block[0] < shape[0], "each block must walk several row tiles for this test to mean much"
    x = ref.b2b_inputs(*shape, seed=5)
    ops = [cp.asarray(t) for t in x.args()[:4]]
    alphas = (x.alpha0, x.alpha1, x.beta1)
    # same products in the same order: the same FP16 results
    assert cp.array_equal(plan(*ops, *alphas), bf.BackToBack(*shape)(*ops, *alphas))


def test_persistent_b2b_batched(gpu):
    cp, bf, _ = gpu
    shape, block = (64 * 40, 64, 256, 64), PERSISTENT[0][1]
    run, _ = runner(cp, _persistent(bf, shape, block, batch=3))
    assert fcheck.check_back_to_back(run, batched=True, batch=3, shape=shape, seed=8).status == "passed"


@pytest.mark.parametrize("persistent", [False, True])
def test_b2b_does_not_read_c1_when_beta1_is_zero(gpu, persistent):
    cp, bf, _ = gpu
    shape, block = PERSISTENT[0]
    plan = _persistent(bf, shape, block) if persistent else bf.BackToBack(*shape)
    x = ref.b2b_inputs(*shape, seed=4)
    a0, b0, b1, c1 = (cp.asarray(t) for t in x.args()[:4])
    poisoned = plan(a0, b0, b1, cp.full_like(c1, cp.nan), 0.5, 1.5, 0.0)
    assert cp.array_equal(poisoned, plan(a0, b0, b1, cp.zeros_like(c1), 0.5, 1.5, 0.0))


def test_persistent_b2b_refuses_what_it_cannot_hold(gpu):
    _, bf, _ = gpu
    with pytest.raises(ValueError, match="shared memory"):  # B0 is 4096 x 256: 2 MiB cannot stay in the block
        bf.PersistentBackToBack(64 * 4, 4096, 256, 64)


# the pipelined kernel (GEMM 0 on cuBLASDx's device pipeline): 301 row tiles of 64 over one wave of blocks, so
# blocks walk one or two tiles; its plan is built for its A0 and B0, so each call builds one (same shapes: same
# kernel)
PIPELINED_SHAPE = (64 * 301, 64, 256, 64)


def _pipelined_runner(cp, batched=False):
    from utilities.fusion.tensorcore_persistent import PipelineConfig, PipelinedBackToBack

    def run(a0, b0, b1, c1, alpha0, alpha1, beta1):
        as3 = (lambda x: x) if batched else (lambda x: x[None])
        a0, b0, b1, c1 = (as3(cp.asarray(x)) for x in (a0, b0, b1, c1))
        plan = PipelinedBackToBack(a0, b0, b1.shape[2], PipelineConfig(tile_m=64, threads=128, tile_k=32, depth=2))
        out = cp.full(c1.shape, np.nan, cp.float16)
        d1 = cp.asnumpy(plan(b1, c1, alpha0, alpha1, beta1, out=out))
        return d1 if batched else d1[0]

    return run


def test_pipelined_b2b_matches_reference(gpu):
    cp, _, _ = gpu
    run = _pipelined_runner(cp)
    assert fcheck.check_back_to_back(run, shape=PIPELINED_SHAPE, seed=31).status == "passed"
    x = ref.b2b_inputs(*PIPELINED_SHAPE, seed=6)  # and C1 unread when beta1 == 0: a NaN C1 changes nothing
    a0, b0, b1, c1 = x.args()[:4]
    poisoned = run(a0, b0, b1, np.full_like(c1, np.nan), 0.5, 1.5, 0.0)
    assert np.array_equal(poisoned, run(a0, b0, b1, np.zeros_like(c1), 0.5, 1.5, 0.0))


def test_pipelined_b2b_batched(gpu):
    cp, _, _ = gpu
    shape = (64 * 40, 64, 256, 64)
    result = fcheck.check_back_to_back(_pipelined_runner(cp, batched=True), batched=True, batch=3, shape=shape, seed=9)
    assert result.status == "passed"


def test_pipelined_b2b_refuses_bad_input(gpu):
    cp, _, _ = gpu
    from utilities.fusion.tensorcore_persistent import PipelineConfig, PipelinedBackToBack

    z = cp.zeros
    with pytest.raises(ValueError, match="3-D"):
        PipelinedBackToBack(z((256, 64), cp.float16), z((64, 256), cp.float16), 64)
    with pytest.raises(ValueError, match="too small for a 2-stage pipeline"):
        PipelinedBackToBack(z((1, 256, 32), cp.float16), z((1, 32, 256), cp.float16), 64, PipelineConfig())
    with pytest.raises(ValueError, match="multiple of the row tile"):
        PipelinedBackToBack(z((1, 100, 64), cp.float16), z((1, 64, 256), cp.float16), 64)
    with pytest.raises(TypeError, match="float16"):
        PipelinedBackToBack(z((1, 256, 64), cp.float32), z((1, 64, 256), cp.float16), 64)


def test_fused_gemm_bias_relu(gpu):
    cp, bf, _ = gpu
    m, n, k = 256, 256, 256  # two block columns: a bias read without the block's column offset fails
    plan = bf.GemmBiasRelu(m, n, k)

    def run(a, b, bias):
        out = cp.full((m, n), np.nan, cp.float16)
        return cp.asnumpy(plan(cp.asarray(a), cp.asarray(b), cp.asarray(bias), out=out))

    assert fcheck.check_gemm_bias_relu(run, shape=(m, n, k), seed=5).status == "passed"


@pytest.mark.parametrize(
    ("shape", "words"),
    [
        ((256, 576, 4096, 128), "N0"),  # the row tile of D0 cannot fit the block
        ((256, 576, 64, 8192), "N1"),
        ((250, 576, 64, 128), "M"),  # not a multiple of the row tile
        ((256, 570, 64, 128), "K0"),  # not a multiple of the K tile
    ],
)
def test_constraints_are_refused_with_the_fix(gpu, shape, words):
    _, bf, _ = gpu
    with pytest.raises(ValueError, match=words):
        bf.BackToBack(*shape)


def test_wrong_dtype_and_layout_are_refused(gpu):
    cp, bf, _ = gpu
    m, k0, n0, n1 = SHAPES[0]
    plan = bf.BackToBack(m, k0, n0, n1)
    ops = [cp.zeros(s, cp.float16) for s in ((m, k0), (k0, n0), (n0, n1), (m, n1))]
    with pytest.raises((TypeError, ValueError), match="float16"):
        plan(ops[0].astype(cp.float32), *ops[1:], 1.0, 1.0, 0.0)
    with pytest.raises((TypeError, ValueError), match="contiguous"):
        plan(cp.asfortranarray(ops[0]), *ops[1:], 1.0, 1.0, 0.0)
    shifted = cp.zeros(m * k0 + 1, cp.float16)[1:].reshape(m, k0)  # C-contiguous, but 2 bytes off a 16-byte line
    with pytest.raises(ValueError, match="16-byte boundary"):
        plan(shifted, *ops[1:], 1.0, 1.0, 0.0)


@pytest.mark.parametrize("batch", [None, 3])
def test_library_paths_agree_with_reference(gpu, batch):
    cp, _, lib = gpu
    shape = SHAPES[0]
    x = ref.b2b_inputs(*shape, seed=3, batch=batch)
    r = ref.b2b_ref(*x.args())
    ops = [cp.asarray(t) for t in x.args()[:4]]
    with lib.EpilogueB2B(*ops, x.alpha0, x.alpha1, x.beta1) as epilogue:
        got = cp.asnumpy(epilogue())
    assert got.shape == r.d1.shape and np.all(np.abs(got - r.d1) <= r.bound_d1)  # same semantics: same bound
    plain = cp.asnumpy(lib.LibraryB2B(*shape, batch=batch)(*ops, x.alpha0, x.alpha1, x.beta1))
    # the plain path also rounds P0 and P1 to FP16: a few more ulps, checked normwise
    assert np.linalg.norm(plain - r.d1) <= 2.0**-9 * np.linalg.norm(r.d1)


def test_library_gemm_bias_relu_agrees_with_reference(gpu):
    cp, _, lib = gpu
    x = ref.gemm_inputs(512, 128, 256, seed=2)
    want, bound = ref.gemm_bias_relu_ref(*x.args())
    a, b, bias = (cp.asarray(t) for t in x.args())
    epilogue = lib.EpilogueGemmBiasRelu(a, b, bias)
    got = cp.asnumpy(epilogue())
    epilogue.free()
    assert np.all(np.abs(got - want) <= bound)
    separate = cp.asnumpy(lib.SeparateGemmBiasRelu(512, 128, 256)(a, b, bias))
    assert np.linalg.norm(separate - want) <= 2.0**-9 * np.linalg.norm(want)

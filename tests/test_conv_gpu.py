"""The implicit-GEMM convolution on the GPU against the FP64 reference within the derived bound (skipped without a
GPU): fused and unfused, 64- and 32-wide tiles, images whose rows do not line up with the row tiles, several
column tiles; the library baselines against the same reference; the plan's errors for shapes it cannot take."""

from __future__ import annotations

import numpy as np
import pytest

from utilities.conv import check as ccheck
from utilities.conv import reference as ref
from utilities.guard import Canvas

pytestmark = pytest.mark.gpu

SHAPES = [
    ref.ConvShape(2, 24, 24, 64, 64),
    ref.ConvShape(3, 8, 16, 32, 32),
    ref.ConvShape(1, 16, 40, 64, 128),
    ref.ConvShape(2, 32, 12, 32, 64),
]


@pytest.fixture(scope="module")
def gpu():
    import cupy as cp

    from utilities.machinery import buildcache

    buildcache.install(quiet=True)
    from utilities.conv import baselines, tensorcore

    return cp, tensorcore, baselines


def runner(cp, plan):
    """NumPy in and out around a plan, into a NaN-poisoned output inside a guard band."""

    def run(x, w, bias):
        s = ref.shape_of(x, w)
        out = Canvas((s.batch, s.height, s.width, s.c_out), cp.float16, xp=cp, fill=np.nan)
        plan(*(cp.asarray(v) for v in (x, w, bias)), out=out.out)
        return out.written()

    return run


def test_the_check_shape_passes_at_both_block_widths(gpu):
    """The notebook's check: the course's kernel with blocks 64 and 32 output channels wide, from a guard band."""
    cp, tc, _ = gpu
    shape = ccheck.CONV_SHAPE
    for cfg in (tc.ConvConfig.for_shape(shape), tc.ConvConfig(tile_n=32, tile_k=64)):
        run = runner(cp, tc.Conv3x3(shape, cfg=cfg))
        assert ccheck.check_conv(run, shape=shape, tile_n=cfg.tile_n, seed=12).status == "passed"


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.label)
def test_fused_conv_matches_reference(gpu, shape):
    cp, tc, _ = gpu
    assert ccheck.check_conv(runner(cp, tc.Conv3x3(shape)), shape=shape, seed=7).status == "passed"


@pytest.mark.parametrize("shape", SHAPES[:2], ids=lambda s: s.label)
def test_unfused_path_matches_reference(gpu, shape):
    cp, _, lib = gpu
    plan = lib.UnfusedConv(shape)
    assert ccheck.check_conv(runner(cp, plan), shape=shape, fused=False, seed=8).status == "passed"


def test_unfused_kernel_stores_the_convolution_alone(gpu):
    cp, tc, _ = gpu
    shape = SHAPES[0]
    x = ref.conv_inputs(shape, "random", 3)
    got = cp.asnumpy(tc.Conv3x3(shape, fused=False)(*(cp.asarray(v) for v in x.args()))).reshape(shape.m, -1)
    r = ref.conv_ref(*x.args())
    assert np.all(np.abs(got.astype(np.float64) - r.conv) <= r.bound_conv)
    assert (got < 0).any(), "no ReLU: the convolution alone has negative entries"


def test_im2col_path_matches_reference(gpu):
    cp, _, lib = gpu
    shape = SHAPES[0]
    plan = lib.Im2colConv(shape)
    assert ccheck.check_conv(runner(cp, plan), shape=shape, fused=False, seed=9).status == "passed"


def test_cudnn_path_matches_reference_where_it_loads(gpu):
    cp, _, lib = gpu
    why = lib.CudnnConv.available()
    if why is not None:
        pytest.skip(why)
    shape = SHAPES[0]

    def run(x, w, bias):
        plan = lib.CudnnConv(shape, cp.asarray(w), cp.asarray(bias))
        return cp.asnumpy(cp.ascontiguousarray(plan(cp.asarray(x))))

    assert ccheck.check_conv(run, shape=shape, fused=False, seed=10).status == "passed"


def test_a_broken_epilogue_is_rejected_with_its_stage(gpu):
    """The checker sees a kernel without the bias: the exercise's skeleton, built for real."""
    cp, tc, _ = gpu
    shape = SHAPES[1]
    plan = tc.Conv3x3(shape, fused=False)  # stores acc: what the skeleton's epilogue does
    with pytest.raises(ccheck.CheckFailure, match="bias and ReLU missing"):
        ccheck.check_conv(runner(cp, plan), shape=shape, seed=11)


@pytest.mark.parametrize("case", [0, 1, 2], ids=["two column tiles", "two halos a tile", "64-pixel tiles"])
def test_the_halo_kernel_matches_the_reference(gpu, case):
    """The halo kernel (``tensorcore_halo``) at the speed run's check shapes, one block a row tile and two blocks
    walking them all (the halo ring across tiles), from a guard band."""
    from utilities.conv.halo import HALO_CHECKS, HaloConfig
    from utilities.conv.tensorcore_halo import HaloConv

    cp = gpu[0]
    shape, fields = HALO_CHECKS[case]
    cfg = HaloConfig(**(fields or {}))
    for blocks, seed in ((None, 80 + case), (2, 90 + case)):
        run = runner(cp, HaloConv(shape, cfg=cfg, blocks=blocks))
        assert ccheck.check_conv(run, shape=shape, seed=seed).status == "passed", (case, blocks)


def test_the_halo_kernel_stores_the_convolution_alone_when_unfused(gpu):
    from utilities.conv.halo import HALO_CHECKS
    from utilities.conv.tensorcore_halo import HaloConv

    cp = gpu[0]
    shape = HALO_CHECKS[0][0]
    x = ref.conv_inputs(shape, "random", 4)
    got = cp.asnumpy(HaloConv(shape, fused=False)(*(cp.asarray(v) for v in x.args()))).reshape(shape.m, -1)
    r = ref.conv_ref(*x.args())
    assert np.all(np.abs(got.astype(np.float64) - r.conv) <= r.bound_conv)
    assert (got < 0).any(), "no ReLU: the convolution alone has negative entries"


@pytest.mark.parametrize("case", [0, 1], ids=["target channels", "64-pixel tiles, D1 twice as wide"])
def test_the_halo_back_to_back_kernel_matches_the_reference(gpu, case):
    """D0 kept and checked first (two blocks walking the row tiles), then the kernel that keeps nothing; the halo
    kernel's unfused chain at the first shape."""
    from utilities.conv.halo import HALO_B2B_CHECKS, HaloConfig
    from utilities.conv.tensorcore_halo import HaloConv, HaloConvB2B
    from utilities.conv.tensorcore_persistent import UnfusedConvB2B

    cp = gpu[0]
    shape, fields = HALO_B2B_CHECKS[case]
    cfg = HaloConfig(tile_n=shape.c_mid, **(fields or {}))

    def run_of(plan):
        def run(*args):
            s = plan.shape
            out = cp.full((s.batch, s.height, s.width, s.c_out), np.nan, cp.float16)
            return cp.asnumpy(plan(*(cp.asarray(v) for v in args), out=out))

        return run

    kept = HaloConvB2B(shape, cfg=cfg, keep_d0=True, blocks=2)
    assert ccheck.check_conv_b2b(run_of(kept), stages=kept.stages, shape=shape, seed=20 + case).status == "passed"
    plain = HaloConvB2B(shape, cfg=cfg)
    assert ccheck.check_conv_b2b(run_of(plain), shape=shape, seed=22 + case).status == "passed"
    if case == 0:
        unfused = UnfusedConvB2B(shape, conv3=HaloConv(shape.first, cfg=cfg))
        assert ccheck.check_conv_b2b(run_of(unfused), shape=shape, seed=24).status == "passed"


def test_plan_rejects_shapes_it_cannot_take(gpu):
    _, tc, _ = gpu
    with pytest.raises(ValueError, match="multiple of 32"):
        tc.Conv3x3(ref.ConvShape(1, 16, 16, 48, 64))
    with pytest.raises(ValueError, match="multiple of the row tile"):
        tc.Conv3x3(ref.ConvShape(1, 5, 5, 64, 64))

"""The Ozaki-I checkers' corner inputs on the GPU, through the course's own kernels (skipped with the reason without a
GPU).

Each check as its notebook runs it (shapes of 3 x 2 and 2 x 3 tiles, every slice count, both epilogue layouts, both ends
of the FP64 range, NaN and Inf in each operand, a C full of NaN when beta = 0): the course's kernels must pass every
corner they feed; each runs twice, and the second run prints how long a check takes once its kernels are built (the run-
through measures it: issue 27)."""

from __future__ import annotations

import numpy as np
import pytest

from utilities.guard import Canvas
from utilities.ozaki import check as ocheck

pytestmark = pytest.mark.gpu


def test_slicing_every_count_and_the_ends_of_the_range(gpu, check_twice):
    from utilities.ozaki.tensorcore import slice_rows_on_gpu

    check_twice(ocheck.check_slicing, slice_rows_on_gpu, seed=1)


def test_epilogue_both_layouts_every_count(gpu, check_twice):
    from utilities.ozaki.tensorcore import epilogue_on_gpu

    check_twice(ocheck.check_epilogue, epilogue_on_gpu, seed=2)


@pytest.mark.parametrize("variant", ["unfused", "partial", "fused"])
@pytest.mark.parametrize(("shape", "slices"), [((256, 384, 384), 7), ((300, 136, 392), 7), ((300, 136, 392), 12)])
def test_ozaki_gemm_corners(gpu, variant, shape, slices, check_twice):
    from utilities.ozaki.tensorcore import OzakiGemm

    cp = gpu
    plan = OzakiGemm(*shape, slices=slices, variant=variant)

    def run(a, b, c, alpha, beta):
        out = Canvas(c.shape, cp.float64, xp=cp, fill=np.nan)  # in a guard band: a stray write fails the check
        plan(cp.asarray(a), cp.asarray(b), cp.asarray(c), alpha, beta, out=out.out)
        return out.written()

    check_twice(ocheck.check_ozaki_gemm, run, slices, shapes=[shape], seed=3)

"""The multi-pass checkers' corner inputs on the GPU, through the course's own kernels (skipped with the reason without
a GPU).

Each check as its notebook runs it (3 x 2 and 2 x 3 tiles, 2, 3 and 17 phases, both dtypes): the course's kernels must
pass every corner they feed; each runs twice, and the second run prints how long a check takes once its kernels are
built (the run-through measures it: issue 27)."""

from __future__ import annotations

import pytest

from utilities.multipass import check as mcheck

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", ["int8", "float16"])
def test_multipass_tile_counts_and_phase_counts(gpu, dtype, check_twice):
    from utilities import multipass as mp
    from utilities.multipass.tensorcore import PassGemm

    cp = gpu
    cfg = mp.PassConfig(dtype, fused=2)

    def run(a, bt):
        return cp.asnumpy(PassGemm(a.shape[0], bt.shape[0], a.shape[1], cfg)(cp.asarray(a), cp.asarray(bt)))

    check_twice(mcheck.check_pass_gemm, run, dtype, phase_k=cfg.phase_k, seed=4)

"""Ozaki-II's automatic count as the plan takes it on the device (``utilities.precision_gpu.GemmStatistics``:
``compute``'s four passes, then ``choose``'s estimate kernels and one copy to the host) against NumPy's
(``utilities.ozaki2.precision.moduli_needed``, ``utilities.precision.choose``): the same count, every count tried
with its estimate, on the inputs where a choice can go wrong. Numba's simulator runs the launches of the plan's own
code on NumPy buffers (blocks of 32 threads: the simulator runs one Python thread per CUDA thread); a GPU runs them
on CuPy's, with the plan's fast launches and its one copy to pinned memory."""

from __future__ import annotations

import numpy as np
import pytest
from numba import config

from utilities import inputs
from utilities import precision_gpu as pg
from utilities.ozaki2 import precision as p2
from utilities.ozaki2 import simt

pytestmark = pytest.mark.device

M, K, N = 6, 12, 4  # B's row statistics are K blocks, A's M: keep both small
THREADS = 32


def _case(name: str) -> tuple[np.ndarray, np.ndarray]:
    if name.startswith("phi="):
        phi = float(name[4:])
        return inputs.exponent_spread(M, K, phi, 11), inputs.exponent_spread(K, N, phi, 12)
    a, b = inputs.normal(M, K, 13), inputs.normal(K, N, 14)
    if name == "zero lines":  # a zero row of A, a zero column of B, a zero row of B (a zero weight)
        a[1], b[:, 2], b[5] = 0.0, 0.0, 0.0
    elif name == "near DBL_MAX":  # one entry near DBL_MAX beside entries 2^-60 below it in one row of A
        a[2, 4:] *= 2.0**-60
        a[2, 3] = 1.7e308
        b = np.ldexp(b, -1000)
    return a, b


# tests/test_core_precision_kernels.py holds the choice kernels to NumPy's on normal, spread (phi = 3), badly scaled,
# subnormal-times-huge and nonfinite inputs: here the plan's whole choice, on the inputs those leave out (10 s a case)
CASES = ["phi=4", "zero lines", "near DBL_MAX"]


@pytest.mark.parametrize("case", CASES)
def test_the_plans_choice_is_numpys(case):
    a, b = _case(case)
    want = p2.moduli_needed(a, b)
    if config.ENABLE_CUDASIM:
        xp = np
    else:
        import cupy as xp
    stats = pg.GemmStatistics(M, N, K, threads=THREADS, choice_threads=THREADS, xp=xp)
    stats.compute(xp.asarray(a), xp.asarray(b))
    got = stats.choose(pg.scheme_tables(p2.SCHEME, K, simt.line_offset, xp=xp))
    assert got.count == want.count, (case, got.describe(), want.describe())
    assert got.tried.keys() == want.tried.keys()
    for count, estimate in want.tried.items():
        assert got.tried[count] == pytest.approx(estimate, rel=1e-9), (case, count)

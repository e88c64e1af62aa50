"""B's residues by way of its transpose and the rows kernel (``tools/columns_by_rows.py``, issue 43) are the
course's column kernel's, word for word: in numba's simulator, at a shape whose tiles are partial on both axes, with
a column that holds a NaN and one that holds an Inf."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from numba import config

from utilities import inputs
from utilities.ozaki2 import simt

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import columns_by_rows  # noqa: E402

pytestmark = [
    pytest.mark.device,
    pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="run in numba's simulator (the probe runs it on a GPU)"),
]


def test_columns_by_rows_equal_the_column_kernels_words():
    count = 5
    m, n, k = 4, 40, 70  # n: two column tiles, the second partial; k: three 32-row tiles, K padded from 70 to 80
    a, b = inputs.exponent_spread(m, k, 1.0, 1), inputs.exponent_spread(k, n, 2.0, 2)
    b[5, 2], b[66, 37] = np.nan, -np.inf
    plan = simt.SimtPlan(m, n, k, moduli="auto", xp=np)
    plan.stats.compute(a, b)
    cols = simt.residue_cols_launch(k, n, plan.kp, count)
    want, want_nu = np.zeros((count, n, plan.kp // 4), np.int32), np.full(n, -99, np.int32)
    cols.kernel[cols.grid, cols.block](b, plan.stats.cols_i, want, want_nu)
    transpose, rows = columns_by_rows.columns_by_rows_launches(k, n, plan.kp, count, threads=32)  # a warp a row
    bt = np.full((n, k), np.nan)
    transpose.kernel[transpose.grid, transpose.block](b, bt)
    assert np.array_equal(bt, b.T, equal_nan=True)
    got, got_nu = np.full_like(want, 7), np.full_like(want_nu, -99)
    rows.kernel[rows.grid, rows.block](bt, plan.stats.cols_i, got, got_nu)
    assert np.array_equal(got, want) and np.array_equal(got_nu, want_nu)
    assert np.any(want != 0) and not np.any(want[:, 2]) and not np.any(want[:, 37])  # the non-finite columns: zeros

"""The probes' variants of the course's kernels (``tools/unrolled_variants.py``, issue 43) compute what the
course's do.

The probes time Ozaki-II's kernels with their loops over the moduli kept or written out beside the course's, and
say which to take into the course: a variant that computed something else would be timed for nothing, or taken in
wrong. Here each runs in numba's simulator beside the course's kernel on the same inputs, at a shape whose tiles
are partial, with a row and a column that hold a non-finite value; words, shifts and C must be equal bit for bit.
"""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from numba import config

from utilities import inputs
from utilities.ozaki2 import simt

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import unrolled_variants  # noqa: E402

pytestmark = [
    pytest.mark.device,
    pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="run in numba's simulator (the probes run them on a GPU)"),
]

COUNT = 5


def _plan(m: int, n: int, k: int) -> tuple[simt.SimtPlan, np.ndarray, np.ndarray]:
    """A plan whose residues the course's kernels wrote, from the choice's statistics (as ``moduli="auto"`` does)."""
    a, b = inputs.exponent_spread(m, k, 1.0, 1), inputs.exponent_spread(k, n, 1.0, 2)
    a[1, 3], b[5, 2] = np.inf, np.nan
    plan = simt.SimtPlan(m, n, k, moduli="auto", xp=np)
    plan.stats.compute(a, b)
    plan.count = COUNT
    plan.scale(a, b, columns_known=True, rows_known=True)
    return plan, a, b


def test_each_variant_edits_the_courses_loops():
    from utilities.ozaki2 import simt as course

    looped = unrolled_variants.looped_source(inspect.getsource(course.make_reconstruct_kernel))
    assert "@written_out" not in looped and "for t in range(N):" in looped
    columns = unrolled_variants.written_out_factory_source(inspect.getsource(course.make_residue_cols_kernel))
    assert re.search(r"\n    @written_out\(N\).*\n    def residue_cols_kernel\(", columns)
    assert "@written_out" not in unrolled_variants.looped_source(inspect.getsource(course.make_residue_cols_kernel))
    unrolled = unrolled_variants.unrolled_source(inspect.getsource(course.make_store_word_group))
    assert "literal_unroll(TS)" in unrolled and "range(N)" not in unrolled and "@written_out" not in unrolled
    with pytest.raises(ValueError, match="no 'N = count' binding"):
        unrolled_variants.unrolled_source("def f(count):\n    return count\n")


@pytest.mark.parametrize("variant", ["looped_simt", "written_out_simt"])
def test_the_variants_kernels_equal_the_courses(variant: str):
    m, n, k = 6, 40, 70  # two column tiles of the residue kernel (the second partial), K padded from 70 to 80
    plan, a, b = _plan(m, n, k)
    names = getattr(unrolled_variants, variant)()
    rows = simt.residue_known_launch(m, k, plan.kp, COUNT)
    words, mu = np.zeros_like(plan.a_res[:COUNT]).view(np.int32), np.zeros_like(plan.mu)
    kernel = names["make_residue_known_rows_kernel"](k, plan.kp, COUNT, rows.block)
    kernel[rows.grid, rows.block](a, plan.stats.rows_i, words, mu)
    assert np.array_equal(words, plan.a_res[:COUNT].view(np.int32)) and np.array_equal(mu, plan.mu)
    cols = simt.residue_cols_launch(k, n, plan.kp, COUNT)
    words, nu = np.zeros_like(plan.b_res[:COUNT]).view(np.int32), np.zeros_like(plan.nu)
    names["make_residue_cols_kernel"](COUNT)[cols.grid, cols.block](b, plan.stats.cols_i, words, nu)
    assert np.array_equal(words, plan.b_res[:COUNT].view(np.int32)) and np.array_equal(nu, plan.nu)
    rng = np.random.default_rng(3)
    planes = rng.integers(-(2**30), 2**30, (COUNT, m, n)).astype(np.int32)
    c = rng.standard_normal((m, n))
    step = simt.reconstruct_launch(m, n, COUNT, from_products=True)
    want, got = np.full((m, n), np.nan), np.full((m, n), np.nan)
    step.kernel[step.grid, step.block](planes, plan.mu, plan.nu, a, b, -0.75, 1.25, c, want)
    names["make_reconstruct_kernel"](COUNT, True)[step.grid, step.block](
        planes, plan.mu, plan.nu, a, b, -0.75, 1.25, c, got
    )
    assert np.array_equal(got, want, equal_nan=True) and not np.isnan(want).all()

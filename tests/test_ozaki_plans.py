"""Ozaki-I's plan on its own buffers: every plain numba launch of ``OzakiGemm`` (slicing, epilogue, the automatic
count's statistics and choice) runs in numba's simulator on NumPy buffers of exactly the plan's shapes and dtypes,
allocated by the plan's own code (``utilities.ozaki.simt.SimtPlan``, which ``OzakiGemm`` is on CuPy), so that an
index past the end of one raises.

On an H200 (2026-11-28) 3b's products came out wrong at 300 x 136 x 392: ``shifts_from_max_kernel``, launched over
the padded columns, wrote 120 entries past B's column maxima into the next block of CuPy's memory pool, where the
products' table of A-slice indices lay. The slicing test of the kernels file ran these launches on buffers of its
own, one entry a column, and could not see it; these tests use the plan's.

At a small padded shape every block runs and the values are checked against the NumPy reference. At the notebooks'
and checkers' shapes the simulator would take minutes a launch, so only the corner blocks of each grid run
(``utilities.machinery.simulator.corner_blocks``): bounds, not values. The tensor-core stages cannot run in the
simulator; ``tests/test_ozaki_gpu.py`` runs them with CuPy's memory pool off (and under compute-sanitizer's memcheck
where it is installed).
"""

from __future__ import annotations

import numpy as np
import pytest
from test_ozaki_gpu import NOTEBOOK_CHECKS

from utilities import inputs, ozaki
from utilities.machinery import simulator
from utilities.ozaki import check
from utilities.ozaki import simt as plain

pytestmark = pytest.mark.device

HOPPER = plain.tile_config("unfused", (9, 0))  # the H100's and H200's tile: 128 x 128 x 128, depth 3
ADA = plain.tile_config("unfused", (8, 9))  # the 100 KiB GPUs' tile: K 64 deep (another padded K)
# (m, n, k), slices of the end-to-end checks of 3b, 3c and 3d (tests/test_ozaki_notebook_checks.py holds them equal to
# the notebooks' cells): the checkers' shapes too, and the sanitizer driver's
NOTEBOOK_CASES = [((256, 384, 384), 7), ((300, 136, 392), 7), ((300, 136, 392), 12)]


def _plan(shape: tuple[int, int, int], slices: int | str, variant: str, cfg: plain.OzakiConfig = HOPPER):
    return plain.SimtPlan(*shape, slices, variant, cfg, xp=np)


def _slicing_layout(plan: plain.SimtPlan, a: np.ndarray, b: np.ndarray) -> list[tuple]:
    """Each slicing launch's grid and block, and its arguments' shapes and dtypes."""
    return [
        (step.name, step.grid, step.block, [(np.shape(x), np.asarray(x).dtype) for x in args])
        for step, args in plan.slicing_steps(a, b)
    ]


def test_the_cases_are_the_notebooks_and_the_checkers():
    assert NOTEBOOK_CASES == NOTEBOOK_CHECKS
    assert {shape for shape, _ in NOTEBOOK_CASES} == set(check.GEMM_SHAPES)


def test_a_small_padded_plan_slices_and_reconstructs_as_the_reference():
    """3 x 5 x 300 with 12 slices: A's rows, B's columns and K all padded (to 128, 128 and 384), B's columns far
    fewer than a shifts launch's 256 threads, more slices than the buffers' default capacity; every block runs.
    Slices and shifts as the reference's, 0 on padded lines, zero digits in the padding, B's maxima zeroed for the
    next call; then C from the reference's int32 terms through each variant's epilogue."""
    m, n, k, slices = 3, 5, 300, 12
    a, b = inputs.exponent_spread(m, k, 2.0, 1), inputs.exponent_spread(k, n, 2.0, 2)
    a[1, 7], b[11, 3] = np.inf, np.nan
    plan = _plan((m, n, k), slices, "unfused")
    assert (plan.mp, plan.np_, plan.kp) == (128, 128, 384) and plan.a_slices.shape[0] == slices
    plan.slice(a, b)
    for got, shifts, (want, want_shifts), lines in (
        (plan.a_slices, plan.e, ozaki.slice_rows(a, slices), m),
        (plan.b_slices, plan.f, ozaki.slice_cols(b, slices), n),
    ):
        np.testing.assert_array_equal(shifts[:lines], want_shifts)
        assert not shifts[lines:].any(), "a padded line of zeros has shift 0"
        np.testing.assert_array_equal(got[:slices, :lines, :k], want)
        assert not got[:, lines:].any() and not got[:, :, k:].any(), "the padding holds zero digits"
    assert not plan.col_max.any() and not plan.col_bad.any(), "shifts_from_max zeroes the maxima for the next call"

    a, b = inputs.exponent_spread(m, k, 2.0, 3), inputs.exponent_spread(k, n, 2.0, 4)
    st = ozaki.ozaki_stages(a, b, slices)
    want = ozaki.reconstruct(st.diagonals, st.e, st.f, -1.5, 0.0, np.zeros((m, n)))
    for variant in ("unfused", "partial"):
        plan = _plan((m, n, k), slices, variant)
        plan.e[:m], plan.f[:n] = st.e, st.f  # what the slicing writes (above)
        terms = st.diagonals if variant == "partial" else ozaki.slice_products(st.a_slices, st.b_slices)
        plan.terms[:, :m, :n] = terms  # what the tensor-core stage writes
        out = np.full((m, n), np.nan)
        plan.epilogue(out, np.full((m, n), np.nan), -1.5, 0.0)  # beta = 0: C is not read
        np.testing.assert_array_equal(out, want, err_msg=variant)


@pytest.mark.parametrize(("shape", "slices"), NOTEBOOK_CASES, ids=[f"{s}-{c}" for s, c in NOTEBOOK_CASES])
def test_every_launch_stays_in_the_plans_buffers_at_the_notebooks_shapes(shape, slices):
    """Every variant's plain numba launches on the plan's buffers, corner blocks only: the slicing (the same launches
    on the same buffers in every variant: compared, then run once) and the epilogue of the unfused and partial
    variants."""
    m, n, k = shape
    a, b = inputs.normal(m, k, 1), inputs.normal(k, n, 2)
    plans = {variant: _plan(shape, slices, variant) for variant in plain.VARIANTS}
    layout = _slicing_layout(plans["unfused"], a, b)
    for variant in ("partial", "fused"):
        assert _slicing_layout(plans[variant], a, b) == layout, variant
    with simulator.corner_blocks() as blocks:
        plans["unfused"].slice(a, b)
        for variant in ("unfused", "partial"):
            plans[variant].epilogue(np.zeros((m, n)), np.zeros((m, n)), 1.0, 0.0)
    assert blocks["ran"] > 0


def test_the_automatic_count_with_the_64_deep_tile_stays_in_the_plans_buffers():
    """``slices="auto"`` (the statistics and the choice on the plan's buffers, then the slicing and the epilogue at the
    count it chose) with the 64-deep K tile of sm_86/89, at a small padded shape (K padded to 320, not a multiple of
    a slicing block's 128 rows, as 392 is to 448); corner blocks only (B's row statistics are K blocks)."""
    m, n, k = shape = (3, 5, 300)
    a, b = inputs.normal(m, k, 3), inputs.normal(k, n, 4)
    plan = _plan(shape, "auto", "partial", ADA)
    assert plan.kp == 320 and _plan((300, 136, 392), 7, "partial", ADA).kp == 448
    with simulator.corner_blocks() as blocks:
        choice = plan.choose(a, b)
        assert plan.slices == choice.count <= plan.max_slices and plan.terms.shape[0] == choice.count
        plan.slice(a, b)
        plan.epilogue(np.zeros((m, n)), np.zeros((m, n)), 1.0, 0.0)
    assert blocks["ran"] > 0


def test_bad_plans_are_refused_before_anything_is_allocated():
    """The plan's checks are its host side's: they run on a CPU."""
    with pytest.raises(ValueError, match="too small for a 3-stage pipeline"):
        _plan((256, 256, 128), 7, "fused")
    with pytest.raises(ozaki.Int32OverflowError, match="(?i)split K"):
        _plan((256, 256, 20480), 7, "fused")
    with pytest.raises(ValueError, match="variant must be one of"):
        _plan((256, 256, 384), 7, "fast")
    with pytest.raises(ValueError, match="at most 7 slices"):
        _plan((256, 256, 384), 7, "unfused").use_slices(8)
    with pytest.raises(RuntimeError, match="no separate epilogue"):
        _plan((256, 256, 384), 7, "fused").epilogue(np.zeros((256, 256)), None, 1.0, 0.0)

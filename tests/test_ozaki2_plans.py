"""Ozaki-II's plan on its own buffers: every plain numba launch of ``Ozaki2Gemm`` (the choice's statistics and
choice, the residues of A and B, the CRT digits, the reconstruction) runs in numba's simulator on NumPy buffers of
exactly the plan's shapes and dtypes, allocated by the plan's own code (``utilities.ozaki2.simt.SimtPlan``, which
``Ozaki2Gemm`` is on CuPy), so that an index past the end of one raises. The int8 GEMMs, cuBLAS's on the GPU, are
NumPy's matmul here (``SimtPlan.int8_gemm``).

At a small shape every block runs and C is checked against the NumPy reference, for each way the plan keeps its
products (two planes in turn with early digits, every plane with late digits or a batched call). At the notebooks'
and checkers' shapes only the corner blocks of each grid run (``utilities.machinery.simulator.corner_blocks``):
bounds, not values. Why these tests exist: ``tests/test_ozaki_plans.py``.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from numba import config

from utilities import inputs
from utilities.machinery import simulator
from utilities.ozaki2 import check, simt
from utilities.ozaki2 import reference as ref

pytestmark = pytest.mark.device
# Corner blocks check indices in numba's simulator, where an index past a buffer raises; a GPU runs every block and
# raises nothing: there, test_*_gpu.py's memcheck test with CuPy's pool off covers the same launches.
in_simulator = pytest.mark.skipif(
    not config.ENABLE_CUDASIM, reason="bounds are checked in numba's simulator (on a GPU: the memcheck test)"
)


def test_the_shapes_are_the_checkers():
    """4b's end-to-end checks run 256 x 192 x 320 and 120 x 136 x 200 (both also the sanitizer driver's)."""
    shapes = inspect.signature(check.check_ozaki2_gemm).parameters["shapes"].default
    assert set(shapes) == {(256, 192, 320), (120, 136, 200)}


def _stage_one(plan: simt.SimtPlan) -> list[tuple]:
    """The shapes and dtypes of what the choice and the residues write (the same in every way of keeping products)."""
    arrays = [plan.a_res, plan.b_res, plan.mu, plan.nu, *vars(plan.stats).values()]
    return [(x.shape, x.dtype) for x in arrays if isinstance(x, np.ndarray)]


def test_small_plans_give_the_references_c():
    """Every block runs. 3 x 37 x 70 with 5 moduli: B's columns span two tiles of the residue kernel (the second
    partial), K two row tiles (the second partial, then padding to 80); a NaN row of A. Its residues are taken once,
    by the plan with early digits (two product planes in turn); the plans with late digits and with a batched call
    (every plane kept) take the same buffers' shapes, get the same residues, and run their own products, digits and
    reconstruction. Then 2 x 32 x 64, whose launches' tiles fit exactly. C bit for bit, DGEMM's result on the NaN
    row."""
    m, n, k, count = 3, 37, 70, 5
    a, b = inputs.exponent_spread(m, k, 1.0, 1), inputs.exponent_spread(k, n, 1.0, 2)
    a[1, 4] = np.nan
    c = np.random.default_rng(0).standard_normal((m, n))
    want = ref.ozaki2_gemm_ref(a, b, count, alpha=-0.75, beta=1.25, c=c, nonfinite="propagate")
    assert np.isnan(want[1]).all()
    first = simt.SimtPlan(m, n, k, count, xp=np)
    assert first.kp == 80 and first.products_buffer.shape[0] == 2
    out = np.full((m, n), -1.0)
    first.run(a, b, out, c, -0.75, 1.25)
    np.testing.assert_array_equal(out, want)
    for modes in ({"digits": "late"}, {"products": "batched"}):
        plan = simt.SimtPlan(m, n, k, count, xp=np, **modes)
        assert _stage_one(plan) == _stage_one(first) and plan.products_buffer.shape[0] == count, modes
        for name in ("a_res", "b_res", "mu", "nu"):
            getattr(plan, name)[...] = getattr(first, name)
        out = np.full((m, n), -1.0)
        plan.products()
        plan.reconstruct(a, b, out, c, -0.75, 1.25)
        np.testing.assert_array_equal(out, want, err_msg=str(modes))

    m, n, k = 2, 32, 64
    a, b = inputs.normal(m, k, 3), inputs.normal(k, n, 4)
    plan = simt.SimtPlan(m, n, k, count, xp=np)
    out = np.full((m, n), np.nan)
    plan.run(a, b, out, np.full((m, n), np.nan), 2.0, 0.0)  # beta = 0: C is not read
    np.testing.assert_array_equal(out, ref.ozaki2_gemm_ref(a, b, count, alpha=2.0))


def test_row_panels_give_the_same_c():
    """Late digits in three row panels of 37 rows (8, 16 and 13: the reconstruction's blocks end mid-panel), a NaN
    in a row of the second: each panel's products then its reconstruction, on views of the planes, C, A and mu.
    Every block runs; C is the reference's bit for bit, as the whole plan's is."""
    m, n, k, count = 37, 33, 70, 5
    a, b = inputs.exponent_spread(m, k, 1.0, 5), inputs.exponent_spread(k, n, 1.0, 6)
    a[10, 3] = np.nan
    c = np.random.default_rng(7).standard_normal((m, n))
    want = ref.ozaki2_gemm_ref(a, b, count, alpha=-0.75, beta=1.25, c=c, nonfinite="propagate")
    plan = simt.SimtPlan(m, n, k, count, digits="late", panels=3, xp=np)
    assert [(p.start, p.stop) for p in plan.row_panels] == [(0, 8), (8, 24), (24, 37)]
    # each panel's planes a block of its own: on a GPU one panel's GEMMs run while the last one's planes are read
    spans = sorted((x.__array_interface__["data"][0], x.nbytes) for x in plan.panel_planes)
    assert spans[0][0] == plan.products_buffer.__array_interface__["data"][0]
    assert all(s0 + n0 == s1 for (s0, n0), (s1, _) in zip(spans, spans[1:], strict=False))
    assert sum(nbytes for _, nbytes in spans) == plan.products_buffer.nbytes
    out = np.full((m, n), -1.0)
    plan.run(a, b, out, c, -0.75, 1.25)
    np.testing.assert_array_equal(out, want)
    assert np.isnan(out[10]).all() and not np.isnan(out[:10]).any()


def test_the_automatic_panels():
    """Several panels only above 8192 rows, with late digits and per-modulus GEMMs: at most 4096 rows each."""
    assert simt.panels_for(8192, "late", "per-modulus") == 1
    assert simt.panels_for(16384, "late", "per-modulus") == 4
    assert simt.panels_for(12289, "late", "per-modulus") == 4
    assert simt.panels_for(16384, "early", "per-modulus") == simt.panels_for(16384, "late", "batched") == 1
    assert len(simt.SimtPlan(64, 64, 64, 14, xp=np).row_panels) == 1  # "auto", the default


@pytest.mark.parametrize(
    ("m", "panels", "edges"),
    [
        (8192, 4, [0, 2048, 4096, 6144, 8192]),
        (100, 7, [0, 8, 24, 40, 56, 72, 88, 100]),
        (3, 4, [0, 3]),
        (64, 1, [0, 64]),
    ],
)
def test_row_panels_cover_every_row_once(m, panels, edges):
    """Panels start on multiples of 8 rows, as even as that allows, none empty; fewer where m is small."""
    got = simt.row_panels(m, panels)
    assert [p.start for p in got] + [got[-1].stop] == edges


def _written_b_t(plan: simt.SimtPlan) -> None:
    """B^T at zeros before a corner-block run (``columns="by-rows"``). The transpose's corner blocks write part of
    it, and the rows kernel's corner blocks read other parts, which hold whatever the allocation held: a NaN there
    stops the simulator at its int conversion (a full run writes all of B^T before reading it)."""
    if plan.b_t is not None:
        plan.b_t.fill(0.0)


@in_simulator
@pytest.mark.parametrize("columns", simt.COLUMNS)
def test_every_launch_stays_in_the_plans_buffers_at_the_notebooks_padded_shape(columns):
    """120 x 136 x 200 with 14 moduli, digits early and late, as 4b checks it (B's columns in 4 tiles of 32 and 8
    more, K padded to 208 over 4 row tiles of 64); corner blocks only, B's residues in one pass and by B^T's rows.
    The residues are taken once (early), the late plan's buffers compared with them. 4b's other shape, 256 x 192 x
    320, divides every launch's tile, as the small test's second shape does."""
    m, n, k = 120, 136, 200
    a, b = inputs.normal(m, k, 1), inputs.normal(k, n, 2)
    early, late = (simt.SimtPlan(m, n, k, 14, digits=digits, columns=columns, xp=np) for digits in ("early", "late"))
    assert _stage_one(late) == _stage_one(early)
    _written_b_t(early)
    with simulator.corner_blocks() as blocks:
        early.run(a, b, np.zeros((m, n)), np.zeros((m, n)), 1.0, 0.0)
        late.products()
        late.reconstruct(a, b, np.zeros((m, n)), np.zeros((m, n)), 1.0, 0.0)
    assert blocks["ran"] > 0 and blocks["skipped"] > 0


@in_simulator
@pytest.mark.parametrize("columns", simt.COLUMNS)
def test_the_automatic_count_stays_in_the_plans_buffers(columns):
    """``moduli="auto"``: buffers for the largest count, the statistics of both operands and the choice, then every
    stage at the chosen count, at a padded shape (as 4b's 512^3 runs it, which pads nothing); corner blocks only
    (B's row statistics are K blocks), B's residues in one pass and by B^T's rows."""
    m, n, k = 3, 37, 70
    plan = simt.SimtPlan(m, n, k, "auto", columns=columns, xp=np)
    assert plan.a_res.shape[0] == ref.MAX_MODULI
    _written_b_t(plan)
    with simulator.corner_blocks() as blocks:
        plan.run(inputs.normal(m, k, 1), inputs.normal(k, n, 2), np.zeros((m, n)), np.zeros((m, n)), 1.0, 0.0)
    assert plan.count == plan.choice.count and blocks["ran"] > 0


def test_bad_plans_are_refused_before_anything_is_allocated():
    """The plan's checks are its host side's: they run on a CPU."""
    with pytest.raises(ref.ModuliError, match="from 2 to 20"):
        simt.SimtPlan(64, 64, 64, 40, xp=np)
    with pytest.raises(ValueError, match="int32"):
        simt.SimtPlan(64, 64, 2**17, 14, xp=np)
    with pytest.raises(ValueError, match="products must be one of"):
        simt.SimtPlan(64, 64, 64, 14, products="fused", xp=np)
    with pytest.raises(ValueError, match="panels = 4 needs digits='late'"):
        simt.SimtPlan(64, 64, 64, 14, panels=4, xp=np)
    with pytest.raises(ValueError, match="panels must be a positive int or 'auto'"):
        simt.SimtPlan(64, 64, 64, 14, digits="late", panels=0, xp=np)
    with pytest.raises(RuntimeError, match="chooses nothing"):
        simt.SimtPlan(64, 64, 64, 14, xp=np).choose(np.zeros((64, 64)), np.zeros((64, 64)))


def test_the_default_design_reads_digits_late_where_every_product_fits_in_a_quarter_of_the_memory():
    """``Ozaki2Gemm(digits="auto")``: the automatic count keeps 20 int32 planes; 8192^2 of them is 5.4 GB."""
    gb = 10**9
    assert simt.digits_for(ref.MAX_MODULI, 8192, 8192, 141 * gb) == "late"  # an H200
    assert simt.digits_for(ref.MAX_MODULI, 16384, 16384, 141 * gb) == "late"  # 21.5 GB of products
    assert simt.digits_for(ref.MAX_MODULI, 16384, 16384, 80 * gb) == "early"  # past a quarter of an 80 GB GPU
    assert simt.digits_for(ref.MAX_MODULI, 8192, 8192, 24 * gb) == "late"  # 21.5 GB: exactly within, on 24 GB
    assert simt.digits_for(15, 8192, 8192, 16 * gb) == "early"
    planes, m, n = 14, 300, 200
    edge = planes * m * n * 4 * simt.LATE_SHARE
    assert simt.digits_for(planes, m, n, edge) == "late" and simt.digits_for(planes, m, n, edge - 1) == "early"


def _c_with_row_statistics(a: np.ndarray, b: np.ndarray, count: int, reuse: bool, c: np.ndarray) -> np.ndarray:
    """C from a plan whose A's residues take the statistics of A's rows found by the choice's own kernel (``reuse``)
    or find them again in their pass (the design before): every block runs; the choice's estimate kernels, which
    differ in nothing between the two, are left out (the count is given)."""
    m, k = a.shape
    n = b.shape[1]
    plan = simt.SimtPlan(m, n, k, "auto", xp=np, statistics="reuse" if reuse else "recompute")
    plan.count = count
    if reuse:  # the choice's pass over A's rows (weighted by B's row norms: zeros here, S and E do not depend on them)
        st = plan.stats
        st.tops.fill(-(2**31))
        st._rows(a, st.r, st.rows_f, st.rows_i, st.tops[0:1], True)
    plan.scale(a, b, columns_known=False, rows_known=reuse)
    plan.products()
    out = np.full((m, n), -1.0)
    plan.reconstruct(a, b, out, c, -0.75, 1.25)
    return out


@pytest.mark.parametrize(
    ("m", "n", "k", "count"),
    [(3, 37, 70, 5), (4, 33, 200, 15), (3, 32, 320, 14)],
    ids=["ragged 3x37x70", "notebook k=200 (padded to 208)", "notebook k=320"],
)
def test_the_choices_row_statistics_give_the_same_residues_and_c(m, n, k, count):
    """``statistics="reuse"`` (A's residues from the choice's statistics of A's rows, ``residue_known_rows_kernel``)
    against "recompute" (``residue_rows_kernel`` finds them again): the same mu and residue planes, and C bit for
    bit, equal to the reference's, with a NaN row, an Inf row, a zero row and a row spanning many binades. The
    notebooks' and checkers' k (200, padded to 208; 320), on few rows: a row's block depends on k alone."""
    a, b = inputs.exponent_spread(m, k, 3.0, 5), inputs.exponent_spread(k, n, 1.0, 6)
    a[0, 3] = np.nan
    if m > 3:
        a[3, k - 1] = -np.inf
    a[2] = 0.0
    a[1, 1:] *= 2.0**-40  # one dominant entry: the largest exponent far above the rest
    c = np.random.default_rng(1).standard_normal((m, n))
    want = ref.ozaki2_gemm_ref(a, b, count, alpha=-0.75, beta=1.25, c=c, nonfinite="propagate")
    got = {reuse: _c_with_row_statistics(a, b, count, reuse, c) for reuse in (True, False)}
    np.testing.assert_array_equal(got[True], got[False])
    np.testing.assert_array_equal(got[True], want)
    assert np.isnan(want[0]).all() and np.isfinite(want[2]).all()


def test_the_statistics_switch_is_checked():
    with pytest.raises(ValueError, match="statistics must be one of"):
        simt.SimtPlan(64, 64, 64, "auto", statistics="fused", xp=np)


@pytest.mark.parametrize(
    ("m", "k", "digits"),
    [(3, 70, "early"), (8, 20, "late")],
    ids=["B^T in its own buffer", "B^T in the products' memory"],
)
def test_b_by_the_rows_of_its_transpose_gives_the_one_pass_words(m, k, digits):
    """``columns="by-rows"`` (B transposed, then the rows kernel with B's column statistics) against "direct"
    (``residue_cols_kernel``, one pass): the same words and nu bit for bit, at n = 37 and k = 70 or 20 (tiles
    partial on both axes of the transpose and of the column kernel, K padded to 80 or 32), with a NaN column and an
    Inf column (zero residues). With late digits and m = 8 the five int32 planes hold B^T (8 n k bytes), which the
    products then overwrite: both plans' C is then the reference's."""
    n, count = 37, 5
    a, b = inputs.exponent_spread(m, k, 1.0, 3), inputs.exponent_spread(k, n, 2.0, 4)
    b[5, 2], b[k - 4, 36] = np.nan, -np.inf
    plans = {columns: simt.SimtPlan(m, n, k, count, xp=np, digits=digits, columns=columns) for columns in simt.COLUMNS}
    by_rows, direct = plans["by-rows"], plans["direct"]
    assert direct.b_t is None
    assert np.shares_memory(by_rows.b_t, by_rows.products_buffer) == (digits == "late")
    for plan in plans.values():
        plan.nu.fill(-99)
        plan.scale(a, b)
    np.testing.assert_array_equal(by_rows.b_t, b.T)
    np.testing.assert_array_equal(by_rows.nu, direct.nu)
    np.testing.assert_array_equal(by_rows.b_res, direct.b_res)
    assert by_rows.b_res.any() and not by_rows.b_res[:, 2].any() and not by_rows.b_res[:, 36].any()
    want = ref.ozaki2_gemm_ref(a, b, count, nonfinite="propagate")
    for columns, plan in plans.items():
        out = np.full((m, n), -1.0)
        plan.products()
        plan.reconstruct(a, b, out, np.zeros((m, n)), 1.0, 0.0)
        np.testing.assert_array_equal(out, want, err_msg=columns)


def test_the_columns_switch_is_checked():
    with pytest.raises(ValueError, match="columns must be one of"):
        simt.SimtPlan(64, 64, 64, "auto", columns="transposed", xp=np)

"""Ozaki-I on the GPU against the NumPy reference, stage by stage (skipped with the reason without a GPU).

Every variant at every shape and slice count the notebooks' end-to-end checks use (``NOTEBOOK_CHECKS``; a CPU test,
``tests/test_ozaki_notebook_checks.py``, holds them equal to the notebooks' cells), with the course's kernels: a
notebook whose own solution fails its check is caught here first. One build per variant serves every shape.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from utilities import inputs, ozaki
from utilities.ozaki import check

pytestmark = pytest.mark.gpu

SLICES = 7
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def gpu():
    import cupy as cp

    from utilities.machinery import buildcache

    buildcache.install(quiet=True)
    from utilities.ozaki import tensorcore as gpu_ozaki

    return cp, gpu_ozaki


def _runner(cp, plan):
    def run(a, b, c, alpha, beta):
        out = cp.full(c.shape, np.nan)
        return cp.asnumpy(plan(cp.asarray(a), cp.asarray(b), cp.asarray(c), alpha, beta, out=out))

    def stages():
        kept = {"e": plan.e, "f": plan.f, "a_slices": plan.a_slices, "b_slices": plan.b_slices}
        if plan.variant == "partial":
            kept["diagonals"] = plan.terms
        if plan.variant == "unfused":
            kept["products"] = plan.terms
        return {k: cp.asnumpy(v) for k, v in kept.items()}

    return run, stages


# (shape, slices) of the end-to-end checks of 3b, 3c and 3d; the second shape is padded (B's 136 columns to 256: where
# the slicing wrote past B's column maxima on an H200, 2026-11-28) and has four K tiles, one more than the pipeline's
# depth
NOTEBOOK_CHECKS = [((256, 384, 384), 7), ((300, 136, 392), 7), ((300, 136, 392), 12)]


@pytest.mark.parametrize("variant", ["unfused", "partial", "fused"])
@pytest.mark.parametrize(("shape", "slices"), [*NOTEBOOK_CHECKS, ((256, 256, 384), 7), ((200, 136, 384), 7)])
def test_variant_matches_reference_stage_by_stage(gpu, variant, shape, slices):
    cp, Z = gpu
    m, n, k = shape
    plan = Z.OzakiGemm(m, n, k, slices, variant)
    run, stages = _runner(cp, plan)
    result = check.check_ozaki_gemm(run, slices, shapes=[shape], stages=stages, seed=1234)
    assert result.status == "passed"


def test_fused_is_bit_identical_to_reference_when_beta_is_zero(gpu):
    cp, Z = gpu
    a, b = inputs.exponent_spread(256, 384, 1.0, 5), inputs.exponent_spread(384, 256, 1.0, 6)
    got = cp.asnumpy(Z.OzakiGemm(256, 256, 384, SLICES, "fused")(cp.asarray(a), cp.asarray(b)))
    np.testing.assert_array_equal(got, ozaki.ozaki_gemm_ref(a, b, SLICES))


def test_nonfinite_rows_and_columns_give_nan(gpu):
    cp, Z = gpu
    a, b = inputs.normal(256, 384, 1), inputs.normal(384, 256, 2)
    a[3, 7], b[11, 5] = np.inf, np.nan
    got = cp.asnumpy(Z.OzakiGemm(256, 256, 384, SLICES, "fused")(cp.asarray(a), cp.asarray(b)))
    assert np.isnan(got[3]).all() and np.isnan(got[:, 5]).all()
    mask = np.ones_like(got, bool)
    mask[3], mask[:, 5] = False, False
    assert np.isfinite(got[mask]).all()


def test_bad_inputs_are_refused_with_the_fix(gpu):
    cp, Z = gpu
    plan = Z.OzakiGemm(256, 256, 384, SLICES, "fused")
    with pytest.raises(TypeError, match="float64"):
        plan(cp.zeros((256, 384), cp.float32), cp.zeros((384, 256)))
    with pytest.raises(ValueError, match="build a new plan"):
        plan(cp.zeros((128, 384)), cp.zeros((384, 256)))
    with pytest.raises(ValueError, match="C-contiguous"):
        plan(cp.zeros((384, 256)).T, cp.zeros((384, 256)))
    with pytest.raises(ValueError, match="too small for a 3-stage pipeline"):
        Z.OzakiGemm(256, 256, 128, SLICES, "fused")
    with pytest.raises(ozaki.Int32OverflowError, match="(?i)split K"):
        Z.OzakiGemm(256, 256, 20480, SLICES, "fused")


@pytest.mark.slow
def test_3b_check_passes_with_its_solution_kernels_built_in_the_notebooks_order(gpu):
    """3b's end-to-end check with the notebook's own kernels (its code cells run as a notebook runs them, the slicing
    check left out): on an H200 (2026-11-27) the second shape's products were wrong for every slice of A but the
    first, in 5 of 5 processes, with slices and paddings right and a fresh plan right. The cause, found in numba's
    simulator: ``shifts_from_max_kernel`` wrote past B's column maxima into ``term_s`` (instructor-notes/ozaki.md)."""
    import ast
    import json

    cp, Z = gpu
    nb = json.loads((ROOT / "solutions" / "3b_ozaki_unfused.ipynb").read_text())
    cells = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    names: dict = {"__name__": "__main__", "display": lambda *a, **k: None}
    for source in cells:  # every cell up to the end-to-end check's, the slicing check left out
        if "def run_and_keep" in source:  # that cell's functions only: its own check loop is this test's
            tree = ast.parse(source)
            tree.body = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
            exec(compile(tree, "3b", "exec"), names)  # noqa: S102 - the course's own notebook
            break
        if "check.check_slicing" not in source:
            exec(compile(source, "3b", "exec"), names)  # noqa: S102 - the course's own notebook
    assert "run_and_keep" in names, "3b has no cell that defines run_and_keep: the test follows the notebook"
    mine = Z.Kernels(
        split_digits=names["make_split_digits"],
        products=names["make_products_kernel"],
        epilogue=names["make_epilogue_kernel"],
    )
    for shape, slices in NOTEBOOK_CHECKS:
        run, stages = names["run_and_keep"](Z.OzakiGemm(*shape, slices=slices, variant="unfused", kernels=mine))
        assert check.check_ozaki_gemm(run, slices, shapes=[shape], stages=stages, seed=1234).status == "passed"


@pytest.mark.parametrize("pool", ["on", "off"])
def test_3b_padded_case_passes_with_the_pool_on_and_off(gpu, pool):
    """3b's failing case (300 x 136 x 392, 7 slices, unfused, the course's kernels): on an H200 (2026-11-28) every
    product with s >= 1 was A_0 @ B_t, because the slicing's ``shifts_from_max_kernel`` wrote zeros past B's column
    maxima into the next block of CuPy's memory pool, where the products' table ``term_s`` then lay
    (``tests/test_ozaki_plans.py`` finds that write in numba's simulator; the products kernel now derives its slices
    from p and has no table). With the pool on (where it happened) and off (every buffer its own allocation, which
    compute-sanitizer's memcheck needs to see such a write): the check passes, and B's maxima are zeroed."""
    cp, Z = gpu
    if pool == "off":
        cp.cuda.set_allocator(None)
    try:
        plan = Z.OzakiGemm(300, 136, 392, SLICES, "unfused")
        run, stages = _runner(cp, plan)
        result = check.check_ozaki_gemm(run, SLICES, shapes=[(300, 136, 392)], stages=stages, seed=1234)
        maxima = cp.asnumpy(plan.col_max), cp.asnumpy(plan.col_bad)
    finally:
        cp.cuda.set_allocator(cp.get_default_memory_pool().malloc)
    assert not maxima[0].any() and not maxima[1].any(), "B's maxima are zeroed for the next call"
    assert result.status == "passed", result


MEMCHECK_OZAKI = """
import cupy as cp

cp.cuda.set_allocator(None)  # every buffer its own allocation: memcheck sees a write past one (CuPy's pool hides it)
from utilities import inputs
from utilities.machinery import buildcache

buildcache.install(quiet=True)
from utilities.ozaki.tensorcore import OzakiGemm

for (m, n, k), slices in [((256, 384, 384), 7), ((300, 136, 392), 7), ((300, 136, 392), 12), ((300, 136, 392), "auto")]:
    a, b = cp.asarray(inputs.normal(m, k, 1)), cp.asarray(inputs.normal(k, n, 2))
    for variant in ("unfused", "partial", "fused"):
        OzakiGemm(m, n, k, slices, variant)(a, b, cp.ones((m, n)), -1.5, 0.75)
cp.cuda.runtime.deviceSynchronize()
print("ran every plan")
"""


@pytest.mark.slow
def test_every_plan_at_the_notebooks_shapes_is_clean_under_memcheck_with_the_pool_off(gpu):
    """Every variant at 3b-3d's shapes and slice counts, and the automatic count, under compute-sanitizer's memcheck
    with CuPy's memory pool off (skipped where compute-sanitizer is not installed: ``pip install
    nvidia-cuda-sanitizer-api``). The tensor-core kernels' accesses are checked here only: the simulator cannot run
    them."""
    from utilities import sanitizer

    if sanitizer.find_binary() is None:
        pytest.skip(sanitizer.MISSING)
    (report,) = sanitizer.run(MEMCHECK_OZAKI, ("memcheck",), timeout=1800.0)
    assert report.clean, sanitizer.describe([report])

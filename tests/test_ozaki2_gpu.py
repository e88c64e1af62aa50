"""Ozaki-II on the GPU against the NumPy reference, stage by stage (skipped with the reason without a GPU).

The plan's kernels are plain numba kernels and cuBLAS: no cuBLASDx build, so these run in seconds (the Ozaki-I
test at the end builds the fused kernel, or loads it from the build cache).
"""

from __future__ import annotations

import numpy as np
import pytest

from utilities import inputs, precision
from utilities.guard import Canvas
from utilities.ozaki2 import check
from utilities.ozaki2 import reference as ref

pytestmark = pytest.mark.gpu

MODES = [
    {},  # digits="auto": late where the products fit
    {"digits": "early"},
    {"products": "batched", "digits": "early"},
    {"digits": "late"},
    {"digits": "early", "overlap": False},
    {"products": "batched", "digits": "late"},
    {"columns": "by-rows"},  # B transposed, then the rows kernel; the default's are in one pass (residue_cols_kernel)
]


@pytest.fixture(scope="module")
def gpu():
    import cupy as cp

    from utilities.ozaki2 import tensorcore

    return cp, tensorcore


def runner(cp, plan):
    """``run`` and ``stages`` for ``check.check_ozaki2_gemm``: C into a poisoned buffer inside a guard band, and every
    stage the plan keeps (the int32 products only where it keeps all of them)."""

    def run(a, b, c, alpha, beta):
        out = Canvas(c.shape, cp.float64, xp=cp, fill=np.nan)  # poisoned, inside a guard band
        plan(cp.asarray(a), cp.asarray(b), cp.asarray(c), alpha, beta, out=out.out)
        return out.written()

    def stages():
        n = plan.count
        kept = {"mu": plan.mu, "nu": plan.nu, "a_res": plan.a_res[:n], "b_res": plan.b_res[:n]}
        if plan.products_buffer.shape[0] >= n:
            kept["products"] = plan.products_buffer[:n]
        if plan.digits is not None:
            kept["digits"] = plan.digits[:n]
        return {key: cp.asnumpy(v) for key, v in kept.items()}

    return run, stages


@pytest.mark.parametrize("count", [2, 7, 15, 20])
@pytest.mark.parametrize("shape", [(256, 192, 320), (120, 136, 200), (70, 33, 150)])
def test_plan_matches_reference_stage_by_stage(gpu, shape, count):
    cp, T = gpu
    run, stages = runner(cp, T.Ozaki2Gemm(*shape, moduli=count))
    assert check.check_ozaki2_gemm(run, count, shapes=[shape], stages=stages, seed=1234).status == "passed"


@pytest.mark.parametrize("options", MODES, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "default")
def test_every_design_gives_the_same_stages(gpu, options):
    cp, T = gpu
    shape = (130, 200, 260)
    run, stages = runner(cp, T.Ozaki2Gemm(*shape, moduli=14, **options))
    assert check.check_ozaki2_gemm(run, 14, shapes=[shape], stages=stages, seed=99).status == "passed"


@pytest.mark.parametrize("moduli", [14, "auto"])
def test_one_stream_and_two_give_the_same_plan_bit_for_bit(gpu, moduli):
    """The choice's passes over B and B's scaling on a second stream (the default) or all on one: the same count,
    exponents, residues and C, bit for bit; a fixed count's B column statistics run on the second stream too."""
    cp, T = gpu
    a, b = inputs.exponent_spread(130, 260, 2.0, 7), inputs.exponent_spread(260, 200, 2.0, 8)
    a[5, 9] = np.nan
    runs = []
    for concurrent in (False, True):
        plan = T.Ozaki2Gemm(130, 200, 260, moduli=moduli)
        assert plan.concurrent  # the default, with the pinned numba-cuda
        plan.concurrent = plan.stats.concurrent = concurrent
        c = cp.asnumpy(plan(cp.asarray(a), cp.asarray(b)))
        n = plan.count
        runs.append([c, *(cp.asnumpy(x) for x in (plan.a_res[:n], plan.b_res[:n], plan.mu, plan.nu))])
    assert runs[0][0].shape == runs[1][0].shape and runs[0][1].shape == runs[1][1].shape  # the same count
    for one, two in zip(*runs, strict=True):
        np.testing.assert_array_equal(one, two)


def test_stage_runners_pass_their_checkers(gpu):
    """Every launch path the checkers use: the residue function's own values and the row kernel, the digits, the
    reconstruction from digits (early) and from the int32 products (late), each output inside a guard band."""
    _, T = gpu
    values = T.residue_values_on_gpu
    assert check.check_scaling(lambda x, n: T.residues_on_gpu(x, n), values=values, seed=3).status == "passed"
    assert check.check_digits(lambda p: T.digits_on_gpu(p), seed=4).status == "passed"
    assert check.check_reconstruction(lambda *args: T.reconstruct_on_gpu(*args), seed=5).status == "passed"


@pytest.mark.parametrize(
    ("concurrent", "sms"),
    [(False, None), (True, None), (True, 1)],
    ids=["one stream", "two streams", "two streams, eight row blocks"],
)
def test_statistics_on_the_gpu_match_numpy(gpu, concurrent, sms):
    """``GemmStatistics.compute`` (four passes, CuPy): exact integers bit for bit, norms to their rounding; its
    passes over B on a second stream or not; the weighted row pass's blocks one a row, or eight blocks over the 300
    rows (as on a GPU of one SM), each staging the weights once."""
    cp, _ = gpu
    from utilities import precision_gpu as pg

    a, b = inputs.exponent_spread(300, 500, 2.0, 5) * 2.0**700, inputs.exponent_spread(500, 260, 2.0, 6)
    a[3, 4], b[5, 6], a[7] = np.nan, -np.inf, np.ldexp(a[7], -1700)
    stats = pg.GemmStatistics(300, 260, 500)
    assert stats.concurrent  # the pinned numba-cuda: the fast launch path, so two streams by default
    stats.concurrent = concurrent
    stats.sms = sms or stats.sms
    stats.compute(cp.asarray(a), cp.asarray(b))
    want = precision.gemm_stats(a, b)
    assert cp.asnumpy(stats.tops).tolist() == [want.ea, want.eb]
    for f, i, lines in ((stats.rows_f, stats.rows_i, want.rows), (stats.cols_f, stats.cols_i, want.cols)):
        f, i = cp.asnumpy(f), cp.asnumpy(i)
        np.testing.assert_array_equal(i[pg.EXP], lines.e)
        np.testing.assert_array_equal(i[pg.TERMS], lines.s)
        np.testing.assert_array_equal(i[pg.BAD].astype(bool), lines.bad)
        np.testing.assert_array_equal(f[pg.AMAX], lines.amax)
        np.testing.assert_allclose(f[pg.NORM2], lines.norm2, rtol=1e-12)
        np.testing.assert_allclose(f[pg.CROSS2], lines.cross2, rtol=1e-12)


@pytest.mark.parametrize("phi", [0.0, 0.5, 4.0])
def test_automatic_count_matches_the_cpu_choice_and_is_fp64_class(gpu, phi):
    cp, T = gpu
    from utilities import errors, exact
    from utilities.ozaki2.precision import moduli_needed

    n = 512
    if phi:
        a, b = inputs.exponent_spread(n, n, phi, 1), inputs.exponent_spread(n, n, phi, 2)
    else:
        a, b = inputs.normal(n, n, 1), inputs.normal(n, n, 2)
    plan = T.Ozaki2Gemm(n, n, n, "auto")
    c = cp.asnumpy(plan(cp.asarray(a), cp.asarray(b)))
    want = moduli_needed(a, b)
    assert plan.count == want.count, (plan.choice.describe(), want.describe())
    assert plan.choice.estimate == pytest.approx(want.estimate, rel=1e-9)
    hi, lo = exact.matmul_dd(a, b)
    emulated = errors.normwise_relative_error(c, hi, lo)
    native = errors.normwise_relative_error(cp.asnumpy(cp.asarray(a) @ cp.asarray(b)), hi, lo)
    assert emulated <= native, f"phi = {phi}: {plan.count} moduli gave {emulated:.2e}, DGEMM {native:.2e}"


HARD = [
    "zeros",
    "subnormal A (1e-310) times B of 1e10",
    "huge A times tiny B",
    "one dominant column of A",
    "an entry near DBL_MAX",
    "smallest subnormals among normal entries",
    "a NaN and an Inf",
]


def _hard(name: str, m: int = 96, k: int = 160, n: int = 80):
    a, b = inputs.normal(m, k, 1), inputs.normal(k, n, 2)
    if name == "zeros":
        return np.zeros((m, k)), np.zeros((k, n))
    if name == "subnormal A (1e-310) times B of 1e10":
        return a * 1e-310, b * 1e10
    if name == "huge A times tiny B":
        return a * 1e300, b * 1e-300
    if name == "one dominant column of A":
        a[:, 3] *= 1e200
        return a, b
    if name == "an entry near DBL_MAX":
        a *= 1e-10
        a[2, 5] = 1.7e308
        return a, b * 1e-300
    if name == "smallest subnormals among normal entries":
        a[np.random.default_rng(3).random((m, k)) < 0.3] = np.ldexp(1.0, -1074)
        return a, b
    return inputs.nonfinite_lines(m, k, n, 4)


@pytest.mark.parametrize("name", HARD)
def test_every_input_works_as_dgemms_does(gpu, name):
    """The automatic count on inputs at the ends of the FP64 range: no error, the CPU's count, C within the
    reference's last rounding; NaN and Inf where cuBLAS DGEMM has them."""
    cp, T = gpu
    from utilities.ozaki2.precision import moduli_needed

    a, b = _hard(name)
    m, k = a.shape
    n = b.shape[1]
    plan = T.Ozaki2Gemm(m, n, k, "auto")
    got = cp.asnumpy(plan(cp.asarray(a), cp.asarray(b)))
    assert plan.count == moduli_needed(a, b).count
    st = ref.ozaki2_stages(a, b, plan.count)
    want = ref.reconstruct(st.digits, st.mu, st.nu, plan.count, 1.0, 0.0, None, a, b)
    dgemm = cp.asnumpy(cp.asarray(a) @ cp.asarray(b))
    finite = np.isfinite(want)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(dgemm))
    np.testing.assert_array_equal(got[np.isinf(dgemm)], dgemm[np.isinf(dgemm)])
    bound = check.c_bound(st, 1.0, 0.0, None, want)
    assert np.all(np.abs(got[finite] - want[finite]) <= bound[finite])


BIT_SHAPES = [(256, 256, 384), (300, 136, 392)]  # tiles that divide; ragged m, n and k (K padded to 400)
BIT_PLANS = [
    pytest.param(14, {}, id="14"),
    pytest.param(15, {"digits": "late"}, id="15-late"),
    pytest.param(20, {"products": "batched"}, id="20-batched"),
    pytest.param("auto", {}, id="auto"),
    pytest.param("auto", {"digits": "late", "panels": 3}, id="auto-late-3-panels"),  # reconstructions on a 2nd stream
]


def _bit_inputs(m: int, n: int, k: int) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """Normal entries with rows of A that cancel (pairs v, -v) against constant columns of B, where only the
    reconstruction's low-order sums carry C's last bits; and spread exponents (``inputs.exponent_spread``, phi = 2)."""
    a, b = inputs.normal(m, k, 11), inputs.normal(k, n, 12)
    check._cancelling_lines(a, b, np.random.default_rng(13))
    spread = inputs.exponent_spread(m, k, 2.0, 14), inputs.exponent_spread(k, n, 2.0, 15)
    return [("normal, cancelling lines", a, b), ("spread phi=2", *spread)]


@pytest.mark.parametrize(("moduli", "options"), BIT_PLANS)
@pytest.mark.parametrize("shape", BIT_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_c_is_the_references_bit_for_bit(gpu, shape, moduli, options):
    """Issue 43, item 3: the GPU's C equals ``ozaki2_gemm_ref``'s (its stages, then ``reconstruct``) in every bit,
    the reconstruction's multiply-adds fused on both sides (tests/test_ozaki2_rounding.py), for alpha and beta as
    the checkers cycle them; with the automatic count, at the count the device chose."""
    cp, T = gpu
    m, n, k = shape
    c = np.random.default_rng(16).standard_normal((m, n))
    plan = T.Ozaki2Gemm(m, n, k, moduli=moduli, **options)
    for name, a, b in _bit_inputs(m, n, k):
        st = None
        for alpha, beta in ((1.0, 0.0), (-0.75, 1.25), (3.0, -1.0)):
            got = cp.asnumpy(plan(cp.asarray(a), cp.asarray(b), cp.asarray(c), alpha, beta))
            if st is None or st.count != plan.count:  # ozaki2_gemm_ref's stages, once per input and count
                st = ref.ozaki2_stages(a, b, plan.count)
            want = ref.reconstruct(st.digits, st.mu, st.nu, plan.count, alpha, beta, c, a, b)
            differ = got != want
            if differ.any():
                ulps = np.abs(got - want)[differ] / np.spacing(np.abs(want[differ]))
                i, j = np.argwhere(differ)[0]
                pytest.fail(
                    f"{name}, {plan.count} moduli, alpha {alpha}, beta {beta}: {differ.sum()} of {differ.size} entries "
                    f"differ, by up to {ulps.max():.3g} units in the last place; first C[{i}, {j}] = {got[i, j]!r}, "
                    f"the reference's {want[i, j]!r}"
                )


def test_one_small_copy_per_call(gpu, monkeypatch):
    """The automatic choice brings its count to the host with one copy of 1 + NC doubles, and nothing else."""
    cp, T = gpu
    from utilities import precision_gpu as pg

    a, b = cp.asarray(inputs.normal(128, 96, 1)), cp.asarray(inputs.normal(96, 64, 2))
    plan = T.Ozaki2Gemm(128, 64, 96, "auto")
    plan(a, b)
    copies = []
    real = pg.GemmStatistics.to_host

    def counted(self, out, host):
        copies.append(out.nbytes)
        return real(self, out, host)

    def refused(*args, **kwargs):
        raise AssertionError("a copy to the host besides the choice's")

    monkeypatch.setattr(pg.GemmStatistics, "to_host", counted)
    monkeypatch.setattr(cp, "asnumpy", refused)
    plan(a, b)
    assert copies == [8 * (1 + len(plan.tables.counts))]


def test_the_reports_old_designs_run_beside_the_default_with_its_digits(gpu):
    """``ozaki2_records(old_new=True)`` (``tools/ozaki2_report.py --old-new``) at a small size: the default, the fixed
    count and the designs it replaced (A's row statistics found again, B by B^T's rows) end to end, each C the
    default's bit for bit, every plan with the default's digits, and the scaling alone beside the by-rows one with
    B's words the same."""
    from utilities.ozaki2.benchmarks import OLD_PATHS, ozaki2_records

    records = ozaki2_records(256, repeats=1, record=False, show=False, old_new=True, stages=False, variants=False)
    by = {r.name: r for r in records}
    assert set(OLD_PATHS) | {"ozaki2.auto", "ozaki2.fixed", "cublas.dgemm"} <= set(by)
    digits = by["ozaki2.auto"].params["digits"]
    assert by["ozaki2.auto"].params["columns"] == "direct"
    for name in [*OLD_PATHS, "ozaki2.fixed"]:
        assert by[name].params["digits"] == digits, name
    for name in OLD_PATHS:
        assert by[name].params["same_c_as_auto"] is True, name
    assert by["ozaki2.auto.by-rows"].params["columns"] == "by-rows"
    assert by["ozaki2.scaling.auto.by-rows"].params["same_b_words_as_auto"] is True


def test_the_long_k_accuracy_sweep_judges_each_input_against_dgemm(gpu):
    """``accuracy_over_k_records`` (``tools/ozaki2_report.py --accuracy-k``) at m = n = 256, k = 1024: DGEMM and the
    automatic count on each phi's inputs, their errors against the exact product, and the choice no less accurate
    than DGEMM on both."""
    from utilities.ozaki2.benchmarks import accuracy_over_k_records
    from utilities.ozaki2.precision import accuracy_claims

    records = accuracy_over_k_records((1024,), (0.0, 4.0), n=256, repeats=1, record=False)
    assert [(r.name, r.m, r.k, r.params["phi"]) for r in records] == [
        (name, 256, 1024, phi) for phi in (0.0, 4.0) for name in ("cublas.dgemm", "ozaki2.auto")
    ]
    assert all(r.error["normwise"] > 0.0 for r in records)
    claims = accuracy_claims(records)
    assert [statement for statement, _, _ in claims] == [
        f"ozaki2.auto no less accurate than DGEMM at phi = {phi}, k = 1024 (m = n = 256)" for phi in (0.0, 4.0)
    ]
    assert all(held for _, held, _ in claims), claims


def test_batched_int8_gemm_is_exact(gpu):
    cp, _ = gpu
    from utilities import cublas

    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (3, 70, 64), dtype=np.int8)
    bt = rng.integers(-128, 128, (3, 50, 64), dtype=np.int8)
    got = cp.asnumpy(cublas.igemm_batched(cp.asarray(a), cp.asarray(bt)))
    want = np.stack([a[i].astype(np.int64) @ bt[i].astype(np.int64).T for i in range(3)])
    np.testing.assert_array_equal(got, want)


def test_bad_inputs_are_refused_with_the_fix(gpu):
    cp, T = gpu
    plan = T.Ozaki2Gemm(64, 64, 64, 14)
    with pytest.raises(TypeError, match="float64"):
        plan(cp.zeros((64, 64), cp.float32), cp.zeros((64, 64)))
    with pytest.raises(ValueError, match="build a new plan"):
        plan(cp.zeros((64, 32)), cp.zeros((32, 64)))
    with pytest.raises(ref.ModuliError, match="from 2 to 20"):
        T.Ozaki2Gemm(64, 64, 64, 40)
    with pytest.raises(ValueError, match="int32"):
        T.Ozaki2Gemm(64, 64, 2**17, 14)
    with pytest.raises(ValueError, match="products must be one of"):
        T.Ozaki2Gemm(64, 64, 64, 14, products="fused")


@pytest.mark.parametrize("phi", [0.0, 4.0])
def test_ozaki1_chooses_its_slices_from_the_same_statistics(gpu, phi):
    """``OzakiGemm(slices="auto")``: the CPU's count, and C bit for bit that of the plan given that count."""
    cp, _ = gpu
    from utilities.ozaki.precision import slices_needed
    from utilities.ozaki.tensorcore import OzakiGemm

    n = 512
    a, b = (
        (inputs.exponent_spread(n, n, phi, 7), inputs.exponent_spread(n, n, phi, 8))
        if phi
        else (inputs.normal(n, n, 7), inputs.normal(n, n, 8))
    )
    auto = OzakiGemm(n, n, n, "auto")
    got = cp.asnumpy(auto(cp.asarray(a), cp.asarray(b)))
    want = slices_needed(a, b)
    assert auto.choice.count == want.count == auto.slices, (auto.choice.describe(), want.describe())
    fixed = OzakiGemm(n, n, n, want.count)
    np.testing.assert_array_equal(got, cp.asnumpy(fixed(cp.asarray(a), cp.asarray(b))))


MEMCHECK_OZAKI2 = """
import cupy as cp

cp.cuda.set_allocator(None)  # every buffer its own allocation: memcheck sees a write past one (CuPy's pool hides it)
from utilities import inputs
from utilities.ozaki2.tensorcore import Ozaki2Gemm

modes = [{}, {"digits": "early"}, {"digits": "late"}, {"products": "batched"}, {"digits": "early", "overlap": False}]
for (m, n, k), moduli in [((256, 192, 320), 14), ((120, 136, 200), 14), ((120, 136, 200), "auto")]:
    a, b = cp.asarray(inputs.normal(m, k, 1)), cp.asarray(inputs.normal(k, n, 2))
    for options in modes:
        Ozaki2Gemm(m, n, k, moduli, **options)(a, b, cp.ones((m, n)), -1.5, 0.75)
cp.cuda.runtime.deviceSynchronize()
print("ran every plan")
"""


@pytest.mark.slow
def test_every_plan_at_the_notebooks_shapes_is_clean_under_memcheck_with_the_pool_off(gpu):
    """4b's shapes, every way of keeping the products, and the automatic count, under compute-sanitizer's memcheck
    with CuPy's memory pool off, which hides a write past a buffer inside its blocks (skipped where compute-sanitizer
    is not installed: ``pip install nvidia-cuda-sanitizer-api``); ``tests/test_ozaki2_plans.py`` runs the same launches
    in numba's simulator."""
    from utilities import sanitizer

    if sanitizer.find_binary() is None:
        pytest.skip(sanitizer.MISSING)
    (report,) = sanitizer.run(MEMCHECK_OZAKI2, ("memcheck",), timeout=1800.0)
    assert report.clean, sanitizer.describe([report])

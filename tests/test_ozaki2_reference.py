"""The Ozaki-II NumPy reference: exact stages, the CRT identity, the scaling's guarantee, the error bound, and the
automatic choice of slices and moduli against FP64 GEMM."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from utilities import errors, exact, inputs
from utilities.checker import CheckFailure
from utilities.ozaki import ozaki_gemm_ref
from utilities.ozaki.precision import slices_needed
from utilities.ozaki2 import check, model
from utilities.ozaki2 import reference as ref
from utilities.ozaki2.precision import moduli_needed
from utilities.precision import LineNorms, gemm_stats


@given(st.lists(st.integers(-(2**78) + 1, 2**78 - 1), min_size=1, max_size=40), st.sampled_from(ref.MODULI))
@settings(max_examples=200, deadline=None)
def test_residues_are_exact_for_integers_below_2_78(values, p):
    x = np.array([float(v) for v in values])  # the doubles nearest: integers too (|v| > 2^53 rounds to one)
    x = x[np.abs(x) < 2.0**78]
    lo, hi = ref.residue_range(p)
    want = [(int(v) - lo) % p + lo for v in x]
    np.testing.assert_array_equal(ref.residue(x, p), want)


def test_residues_refuse_integers_past_2_78():
    with pytest.raises(ValueError, match="2\\^78"):
        ref.residue(np.array([2.0**80]), 251)


def test_scaled_integers_stay_below_2_77_with_every_count():
    a = inputs.huge_and_tiny(5, 300, 1)
    for count in (ref.MAX_MODULI,):
        assert np.abs(ref.to_integers(a, ref.scale_exponents(a, 1, count), 1)).max() < 2.0**77


def test_moduli_are_pairwise_coprime_and_their_residues_fit_int8():
    from math import gcd

    assert all(gcd(p, q) == 1 for i, p in enumerate(ref.MODULI) for q in ref.MODULI[i + 1 :])
    assert all(-128 <= ref.residue_range(p)[0] and ref.residue_range(p)[1] <= 127 for p in ref.MODULI)
    for count in range(ref.MIN_MODULI, ref.MAX_MODULI + 1):
        c = ref.crt(count)
        assert (1 << c.t) * 2 * (1 << 20) <= c.product * ((1 << 20) - 1)  # 2^t <= (P/2)(1 - 2^-20)
        for p, y, c1, c2, c3 in zip(c.moduli, c.inverses, c.c1, c.c2, c.c3, strict=True):
            assert (c.product // p) * y % p == 1
            assert abs(Fraction(c1) + Fraction(c2) + Fraction(c3) - Fraction(1, p)) < Fraction(1, 2**122)
            assert (Fraction(c1) * 2**35).denominator == 1 and (Fraction(c2) * 2**70).denominator == 1


def _exact_int_product(a_int: np.ndarray, b_int: np.ndarray) -> list[list[int]]:
    ai = [[int(v) for v in row] for row in a_int]
    bi = [[int(v) for v in row] for row in b_int.T]
    return [[sum(x * y for x, y in zip(r, c, strict=True)) for c in bi] for r in ai]


@pytest.mark.parametrize("count", [6, 14, 20])
@pytest.mark.parametrize("phi", [0.0, 3.0])
def test_scaling_keeps_the_integer_product_within_reach_and_crt_rebuilds_it(count, phi):
    a = inputs.normal(7, 40, 1) if phi == 0 else inputs.exponent_spread(7, 40, phi, 2)
    b = inputs.normal(40, 5, 3) if phi == 0 else inputs.exponent_spread(40, 5, phi, 4)
    st_ = ref.ozaki2_stages(a, b, count)
    a_int, b_int = ref.to_integers(a, st_.mu, 1), ref.to_integers(b, st_.nu, 0)
    exact_int = _exact_int_product(a_int, b_int)
    t = ref.crt(count).t
    assert max(abs(v) for row in exact_int for v in row) <= 2**t
    norms_a = [sum(int(v) ** 2 for v in row) for row in a_int]
    assert max(norms_a) <= 2**t  # each row's 2-norm below 2^(t/2): Cauchy-Schwarz
    got = ref.integer_product(st_.digits, count)
    want = np.array([[float(v) for v in row] for row in exact_int])
    assert np.all(np.abs(got - want) <= check.reconstruction_bound(want, count))
    assert np.array_equal(
        st_.products,
        np.stack([(st_.a_res[i].astype(np.int64) @ st_.b_res[i].astype(np.int64).T) for i in range(count)]).astype(
            np.int32
        ),
    )


@pytest.mark.parametrize(
    "name",
    [
        "random normal",
        "exponent spread phi=4",
        "huge and tiny rows",
        "subnormal rows",
        "large digits: diagonal sums above 2^24",
        "heavy cancellation",
    ],
)
def test_error_bound_holds(name):
    pairs = {"random normal": (inputs.normal(30, 60, 1), inputs.normal(60, 20, 2))}
    pairs |= {n: (a, b) for n, a, b in inputs.adversarial_pairs(30, 60, 20, 7)}
    pairs["exponent spread phi=4"] = (inputs.exponent_spread(30, 60, 4.0, 3), inputs.exponent_spread(60, 20, 4.0, 4))
    a, b = pairs[name]
    hi, lo = exact.matmul_dd(a, b)
    for count in (8, 14):
        err = np.abs((ref.ozaki2_gemm_ref(a, b, count) - hi) - lo)
        assert np.all(err <= ref.error_bound(a, b, count)), name


def test_nonfinite_lines_propagate_or_raise():
    """A NaN or an Inf reaches C as it does through DGEMM (the FP64 product on those lines: +-Inf where an Inf meets
    a nonzero entry, NaN where it meets a zero or a NaN); every other entry as if they were absent."""
    a, b = inputs.nonfinite_lines(6, 20, 5, 3)
    b[:, 1] = 0.0
    with pytest.raises(ValueError, match="nonfinite='propagate'"):
        ref.ozaki2_gemm_ref(a, b, 14)
    c = ref.ozaki2_gemm_ref(a, b, 14, nonfinite="propagate")
    bad_rows, bad_cols = ~np.isfinite(a).all(axis=1), ~np.isfinite(b).all(axis=0)
    with np.errstate(invalid="ignore"):
        native = a @ b
    bad = bad_rows[:, None] | bad_cols[None, :]
    np.testing.assert_array_equal(c[bad], native[bad])
    assert np.isinf(c[bad_rows]).any() and np.isnan(c[:, bad_cols]).all()
    assert np.isfinite(c[~bad_rows][:, ~bad_cols]).all()


def _hard_but_finite(m: int, k: int, n: int):
    rng = np.random.default_rng(11)
    a, b = inputs.normal(m, k, 1), inputs.normal(k, n, 2)
    yield "zeros", np.zeros((m, k)), np.zeros((k, n))
    yield "subnormal A (1e-310) times B of 1e10", a * 1e-310, b * 1e10
    yield "huge A times tiny B", a * 1e300, b * 1e-300
    dominant = a.copy()
    dominant[:, 3] *= 1e200
    yield "one dominant column of A", dominant, b
    near_max = a * 1e-10
    near_max[2, 5] = 1.7e308
    yield "an entry near DBL_MAX", near_max, b * 1e-300
    mixed = a.copy()
    mixed[rng.random((m, k)) < 0.3] = np.ldexp(1.0, -1074)  # the smallest subnormal beside normal entries
    yield "smallest subnormals among normal entries", mixed, b


@pytest.mark.parametrize("case", [c[0] for c in _hard_but_finite(6, 40, 5)])
def test_every_finite_input_works_and_the_choice_raises_nothing(case):
    """Inputs at the ends of the FP64 range: both choices return a count (the estimate neither overflows nor
    underflows), and the emulation stays within its rigorous bound, as DGEMM's result would."""
    a, b = next((x, y) for name, x, y in _hard_but_finite(6, 40, 5) if name == case)
    two, one = moduli_needed(a, b), slices_needed(a, b)
    assert ref.MIN_MODULI <= two.count <= ref.MAX_MODULI and 4 <= one.count <= 12
    assert np.isfinite(two.estimate) and np.isfinite(one.estimate)
    hi, lo = exact.matmul_dd(a, b)
    c = ref.ozaki2_gemm_ref(a, b, two.count)
    finite = np.isfinite(hi)
    assert np.all(np.abs((c[finite] - hi[finite]) - lo[finite]) <= ref.error_bound(a, b, two.count)[finite]), case
    assert np.array_equal(np.isinf(c), np.isinf(hi))  # overflow where the exact product overflows


def test_line_terms_are_chunked_and_bound_every_line():
    """S is the sum of the chunks' bounds, each brought to the line's exponent with a ceiling: exact integers,
    an upper bound of the squares, and no larger than one more unit per chunk than the whole line's bound."""
    x = inputs.exponent_spread(4, 700, 4.0, 5)
    x[1, :300] *= 2.0**-50  # whole chunks far below the line's largest
    x[2] = 0.0
    e_max, s = ref.line_terms(x, 1)
    for row, e, total in zip(x, e_max, s, strict=True):
        unit = Fraction(2) ** int(2 * (e - ref.SPAN) - 10)
        squares = sum(Fraction(float(v)) ** 2 for v in row)
        assert squares <= total * unit
        if total:  # tight: within 13% per entry (q / 32 against f) plus a unit per chunk
            assert total * unit <= squares * Fraction(289, 256) + (700 // ref.CHUNK + 1) * 256 * unit
    assert s[2] == 0 and e_max[2] == 0
    cols_e, cols_s = ref.line_terms(x.T.copy(), 0)
    np.testing.assert_array_equal(cols_e, e_max)
    np.testing.assert_array_equal(cols_s, s)


@pytest.mark.slow
@pytest.mark.parametrize("phi", [0.5, 1.0, 2.0, 4.0])
def test_automatic_counts_reach_fp64_gemm(phi):
    n = 192
    a, b = inputs.exponent_spread(n, n, phi, 3), inputs.exponent_spread(n, n, phi, 4)
    hi, lo = exact.matmul_dd(a, b)
    native = errors.normwise_relative_error(a @ b, hi, lo)
    one, two = slices_needed(a, b), moduli_needed(a, b)
    assert errors.normwise_relative_error(ozaki_gemm_ref(a, b, one.count), hi, lo) <= native, one.describe()
    assert errors.normwise_relative_error(ref.ozaki2_gemm_ref(a, b, two.count), hi, lo) <= native, two.describe()
    # and the count below misses the target: the choice is the fewest
    assert one.tried.get(one.count - 1, np.inf) > one.target
    assert two.tried.get(two.count - 1, np.inf) > two.target


def test_line_norms_are_the_sums_they_name():
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal((5, 7)), rng.standard_normal((7, 4))
    a[1, 2], b[3, 0] = np.nan, np.inf
    norms = LineNorms.of(a, b)
    a0, b0 = (
        np.nan_to_num(a, nan=0.0, posinf=0.0) * 2.0**-norms.ea,
        np.nan_to_num(b, nan=0.0, posinf=0.0) * 2.0**-norms.eb,
    )
    want_c_rows = [sum(a0[i, l] ** 2 * np.sum(b0[l] ** 2) for l in range(7)) for i in range(5)]
    want_c_cols = [sum(np.sum(a0[:, l] ** 2) * b0[l, j] ** 2 for l in range(7)) for j in range(4)]
    np.testing.assert_allclose(norms.a_rows, np.sum(a0**2, axis=1), rtol=1e-14)
    np.testing.assert_allclose(norms.b_cols, np.sum(b0**2, axis=0), rtol=1e-14)
    np.testing.assert_allclose(norms.c_rows, want_c_rows, rtol=1e-14)
    np.testing.assert_allclose(norms.c_cols, want_c_cols, rtol=1e-14)
    assert 0.5 <= np.max(np.abs(a0)) < 1 and 0.5 <= np.max(np.abs(b0)) < 1


def test_estimates_do_not_overflow_and_follow_powers_of_two():
    """Both schemes scale each row and column by a power of two: A times 2^900 or B times 2^-900 (squares that would
    overflow or underflow) leave every estimate as it was."""
    a, b = inputs.exponent_spread(40, 60, 1.0, 5), inputs.exponent_spread(60, 30, 1.0, 6)
    for x, y in ((a * 2.0**900, b), (a, b * 2.0**-900)):
        assert slices_needed(x, y).tried == pytest.approx(slices_needed(a, b).tried, rel=1e-9)
        assert moduli_needed(x, y).tried == pytest.approx(moduli_needed(a, b).tried, rel=1e-9)


def test_the_choice_reads_statistics_of_each_line_in_its_own_units():
    """A row of subnormals beside rows near 1e300: the statistics keep both (the global scaling of the norms that
    came before underflowed the small row to zero, and a host ldexp of its exponent raised OverflowError)."""
    a = inputs.normal(6, 50, 1)
    a[0] *= 1e-310
    a[1] *= 1e300
    stats = gemm_stats(a, inputs.normal(50, 4, 2))
    assert stats.rows.cross2[0] > 0 and stats.rows.norm2[0] > 0 and stats.rows.e[0] < -1000
    assert stats.ea == stats.rows.e[1]


def test_a_badly_scaled_row_raises_the_count():
    """The estimate is the worst row's: one row whose entries meet B's small rows needs more moduli, although the
    whole matrix's error would hardly notice it."""
    n = 64
    a, b = inputs.normal(n, n, 1), inputs.normal(n, n, 2)
    b[: n // 2] *= 2.0**-20  # half of B's rows are tiny
    bad = a.copy()
    bad[5, n // 2 :] *= 2.0**-30  # row 5 lives on those rows: its C row is tiny against its largest entry
    assert moduli_needed(bad, b).count > moduli_needed(a, b).count
    assert slices_needed(bad, b).count > slices_needed(a, b).count


def test_reference_passes_every_checker():
    assert check.check_residue(ref.residue, seed=1)
    assert check.check_crt(ref.integer_product, seed=2)

    def scaling(x, count):
        mu = ref.scale_exponents(x, 1, count)
        return mu, ref.residues(ref.to_integers(x, mu, 1), count)

    def values(w, count):
        return np.stack([ref.residue(w, p) for p in ref.crt(count).moduli])

    assert check.check_scaling(scaling, values=values, seed=3)
    assert check.check_digits(lambda products: ref.reduce_products(products, products.shape[0]), seed=4)

    def reconstruction(planes, mu, nu, a, b, al, be, c):  # both paths: digits, or the int32 products to reduce
        u = ref.reduce_products(planes, planes.shape[0]) if planes.dtype == np.int32 else planes
        return ref.reconstruct(u, mu, nu, u.shape[0], al, be, c, a, b)

    assert check.check_reconstruction(reconstruction, seed=5)


def _fp64_residue(x, p):
    lo = ref.residue_range(p)[0]
    return (x - lo) % p + lo  # the float64 array: x - lo rounds once |x| passes 2^53


@pytest.mark.parametrize(
    ("broken", "stage", "says"),
    [
        (lambda x, p: np.mod(x, p), "residues", "the residues lie in [0, "),  # not centred
        (lambda x, p: np.fmod(x, p), "residues", "representative"),  # keeps x's sign, not centred
        (lambda x, p: ref.residue(x, p) * (p != 256), "residues", ""),  # one modulus forgotten
        (_fp64_residue, "residues", "2^53"),  # the formula of the 4a text, on the float64 array
    ],
)
def test_residue_checker_rejects_broken_residues_by_cause(broken, stage, says):
    for seed in (5, 6, 7):  # on every seed: the corners are fixed
        with pytest.raises(CheckFailure) as info:
            check.check_residue(broken, seed=seed)
        assert info.value.stage == stage and says in str(info.value)


def test_crt_checker_rejects_a_missing_low_part():
    def two_parts(u, count):
        c = ref.crt(count)
        s1 = sum(u[t].astype(float) * c.c1[t] for t in range(count))
        s2 = sum(u[t].astype(float) * c.c2[t] for t in range(count))
        return ((s1 - np.floor(s1 + 0.5)) + s2) * c.product_float  # s3 dropped: off by P 2^-70 sum u

    with pytest.raises(CheckFailure, match="integers"):
        check.check_crt(two_parts, seed=6)


@pytest.mark.parametrize(
    ("broken", "says"),
    [
        (
            lambda v: np.mod(v.astype(np.int64), np.array(ref.crt(v.shape[0]).moduli)[:, None, None]).astype(np.uint8),
            "Y[t]",
        ),  # residues, not digits
        (
            lambda v: (
                ref.reduce_products(v, v.shape[0]).astype(np.int64)
                - np.array(ref.crt(v.shape[0]).moduli)[:, None, None] * (ref.reduce_products(v, v.shape[0]) > 100)
            ).astype(np.uint8),
            "[0, p)",
        ),  # wrapped
    ],
)
def test_digits_checker_names_the_mistake(broken, says):
    with pytest.raises(CheckFailure) as info:
        check.check_digits(broken, seed=3)
    assert info.value.stage == "digits" and says in str(info.value)


def test_reconstruction_checker_says_when_c_was_read_although_beta_is_zero():
    def reads_c(u, mu, nu, a, b, alpha, beta, c):
        return ref.reconstruct(u, mu, nu, u.shape[0], alpha, 0.0, c, a, b) + beta * c + (c if beta == 0 else 0.0)

    with pytest.raises(CheckFailure, match="C was read although beta = 0"):
        check.check_reconstruction(reads_c, seed=7)


def test_reconstruction_checker_wants_dgemms_nan_and_inf():
    def nan_lines(u, mu, nu, a, b, alpha, beta, c):
        return ref.reconstruct(u, mu, nu, u.shape[0], alpha, beta, c)  # NaN on every non-finite line

    with pytest.raises(CheckFailure, match="as DGEMM's"):
        check.check_reconstruction(nan_lines, seed=8)


def test_design_model_adds_kernels_and_early_digits_trade_bytes_for_overlap():
    early = model.design("early", 8192, 8192, 8192, 15, auto=True)
    late = model.design("late", 8192, 8192, 8192, 15)
    fused = model.design("fused", 8192, 8192, 8192, 15)
    assert [w.name for w in early] == ["choice", "scaling", "products", "digits", "reconstruct"]
    assert [w.name for w in late] == ["scaling", "products", "reconstruct"] and len(fused) == 2
    c = 8192**2
    fixed = model.design("early", 8192, 8192, 8192, 15)
    assert sum(w.bytes for w in fixed) - sum(w.bytes for w in late) == 2 * 15 * c  # one more pass, 1 B out
    assert sum(w.bytes for w in late) - sum(w.bytes for w in fused) == 2 * 4 * 15 * c  # int32 written and read
    assert early[0].bytes == 8 * 4 * c  # the choice: A and B twice each
    assert early[1].bytes == 8 * 2 * c + 2 * 15 * c and fixed[0].bytes == 8 * 3 * c + 2 * 15 * c  # B's columns known
    assert sum(w.bytes for w in early) - sum(w.bytes for w in fixed) == 8 * 3 * c  # the choice's own reads
    times = model.predicted_ms(early, 1295, 3.0)
    assert times["total"] == pytest.approx(sum(v for key, v in times.items() if key != "total"))
    with pytest.raises(ValueError, match="variant"):
        model.design("partial", 8, 8, 8, 3)

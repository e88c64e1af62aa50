"""Double-double products, error measures and seeded inputs (CPU only)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from utilities import inputs
from utilities.errors import (
    compare_with_native,
    error_report,
    max_elementwise_relative_error,
    normwise_relative_error,
)
from utilities.exact import exact_gemm, matmul_dd
from utilities.ozaki import row_shifts

SETTINGS = settings(max_examples=30, derandomize=True, deadline=None, database=None)
U = 2.0**-53


def fraction_matmul(a: np.ndarray, b: np.ndarray) -> list[list[Fraction]]:
    fa = [[Fraction(float(x)) for x in row] for row in a]
    fb_t = [[Fraction(float(x)) for x in col] for col in b.T]
    return [[sum((x * y for x, y in zip(row, col, strict=True)), Fraction(0)) for col in fb_t] for row in fa]


# ---- exact.py ----------------------------------------------------------------------------------------------------


@SETTINGS
@given(st.integers(0, 2**32 - 1), st.integers(1, 60), st.integers(0, 400))
def test_matmul_dd_is_exact_on_integer_valued_inputs(seed, k, scale):
    """Products up to 2**80 and sums up to 2**86 do not fit in one double, but fit hi + lo: the result is exact,
    also with rows and columns scaled by large powers of two (the scaling path)."""
    rng = np.random.default_rng(seed)
    a_int = rng.integers(-(2**40), 2**40, size=(4, k))
    b_int = rng.integers(-(2**40), 2**40, size=(k, 3))
    row_exp = rng.integers(-scale - 1, scale + 1, size=4)
    col_exp = rng.integers(-scale - 1, scale + 1, size=3)
    a = np.ldexp(a_int.astype(np.float64), row_exp[:, None])
    b = np.ldexp(b_int.astype(np.float64), col_exp[None, :])
    assert (np.ldexp(a, -row_exp[:, None]) == a_int).all()  # the inputs hold the integers exactly
    hi, lo = matmul_dd(a, b)
    for i, j in np.ndindex(hi.shape):
        exact = sum(int(x) * int(y) for x, y in zip(a_int[i], b_int[:, j], strict=True))
        exact = Fraction(exact) * Fraction(2) ** int(row_exp[i] + col_exp[j])
        assert Fraction(float(hi[i, j])) + Fraction(float(lo[i, j])) == exact
        assert hi[i, j] == hi[i, j] + lo[i, j]  # normalised: hi = fl(hi + lo)


@SETTINGS
@given(st.integers(0, 2**32 - 1), st.floats(0.0, 8.0))
def test_matmul_dd_within_dot2_bound(seed, phi):
    a = inputs.exponent_spread(3, 25, phi, seed)
    b = inputs.exponent_spread(25, 4, phi, seed + 1)
    hi, lo = matmul_dd(a, b)
    exact = fraction_matmul(a, b)
    gamma = 25 * U / (1 - 25 * U)
    bound = gamma**2 * (np.abs(a) @ np.abs(b)) * 1.01
    for i, j in np.ndindex(hi.shape):
        assert abs(Fraction(float(hi[i, j])) + Fraction(float(lo[i, j])) - exact[i][j]) <= Fraction(float(bound[i, j]))


def test_dot2_beats_fp64_on_an_ill_conditioned_dot_product():
    rng = np.random.default_rng(7)
    x = rng.standard_normal(50) * np.ldexp(1.0, rng.integers(0, 60, size=50))
    y = rng.standard_normal(50)
    # Append the negated products so that the dot product cancels to the small last term (condition ~ 1e18+).
    a = np.concatenate([x, -x, [1e-3]])[None, :]
    b = np.concatenate([y, y, [1.0]])[:, None]
    exact = fraction_matmul(a, b)[0][0]
    hi, lo = matmul_dd(a, b)
    dd_error = abs(Fraction(float(hi[0, 0])) + Fraction(float(lo[0, 0])) - exact)
    fp64_error = abs(Fraction(float((a @ b)[0, 0])) - exact)
    gamma = 101 * U / (1 - 101 * U)
    assert dd_error <= Fraction(gamma**2 * (np.abs(a) @ np.abs(b))[0, 0])
    assert dd_error <= Fraction(1, 10**9) * abs(exact) and fp64_error > abs(exact)


def test_matmul_dd_512_cube_is_fast_enough_and_better_than_fp64():
    a = inputs.normal(512, 512, 0)
    b = inputs.normal(512, 512, 1)
    hi, lo = matmul_dd(a, b)
    assert (hi == hi + lo).all()
    assert 0 < normwise_relative_error(a @ b, hi, lo) < 1e-14


def test_exact_gemm_alpha_beta():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((3, 9))
    b = rng.standard_normal((9, 2))
    c = rng.standard_normal((3, 2))
    hi, lo = exact_gemm(a, b, alpha=0.3, beta=-1.7, c=c)
    ab = fraction_matmul(a, b)
    for i, j in np.ndindex(hi.shape):
        exact = Fraction(0.3) * ab[i][j] + Fraction(-1.7) * Fraction(float(c[i, j]))
        size = abs(Fraction(0.3) * ab[i][j]) + abs(Fraction(1.7) * Fraction(float(c[i, j])))
        assert abs(Fraction(float(hi[i, j])) + Fraction(float(lo[i, j])) - exact) <= Fraction(2.0**-100) * size
    plain = exact_gemm(a, b, beta=0.0, c=np.full((3, 2), np.nan))
    np.testing.assert_array_equal(plain[0], matmul_dd(a, b)[0])


def test_matmul_dd_validation():
    with pytest.raises(TypeError, match="float64"):
        matmul_dd(np.ones((2, 2), dtype=np.float32), np.ones((2, 2)))
    with pytest.raises(ValueError, match="finite"):
        matmul_dd(np.array([[np.nan]]), np.ones((1, 1)))
    with pytest.raises(ValueError, match="shapes"):
        matmul_dd(np.ones((2, 3)), np.ones((2, 3)))


# ---- errors.py ---------------------------------------------------------------------------------------------------


def test_error_measures_known_values():
    ref = np.array([[1.0, -2.0], [4.0, 0.5]])
    c = ref * (1 + 2.0**-20)
    assert normwise_relative_error(c, ref) == pytest.approx(2.0**-20, rel=1e-9)
    assert max_elementwise_relative_error(c, ref) == pytest.approx(2.0**-20, rel=1e-9)
    c = ref.copy()
    c[1, 1] = 0.75
    assert max_elementwise_relative_error(c, ref) == 0.5
    assert normwise_relative_error(c, ref) == pytest.approx(0.25 / np.sqrt(1 + 4 + 16 + 0.25))


def test_error_measures_use_the_low_part():
    hi = np.ones((2, 2))
    lo = np.full((2, 2), 2.0**-60)
    assert normwise_relative_error(hi, hi) == 0.0
    assert normwise_relative_error(hi, hi, lo) == pytest.approx(2.0**-60)
    assert max_elementwise_relative_error(hi, hi, lo) == pytest.approx(2.0**-60)


def test_error_measures_zero_reference_nan_and_extreme_scales():
    zero = np.zeros((2, 3))
    assert max_elementwise_relative_error(zero, zero) == 0.0 and normwise_relative_error(zero, zero) == 0.0
    c = zero.copy()
    c[0, 1] = 1e-300
    assert max_elementwise_relative_error(c, zero) == np.inf and normwise_relative_error(c, zero) == np.inf
    ref = np.ones((2, 3))
    ref[0, 1] = 0.0
    assert max_elementwise_relative_error(c + ref, ref) == np.inf  # c[0, 1] = 1e-300 where ref is 0
    assert max_elementwise_relative_error(ref, ref) == 0.0
    assert np.isnan(normwise_relative_error(np.full((2, 3), np.nan), ref))
    assert np.isnan(max_elementwise_relative_error(np.full((2, 3), np.nan), ref))
    for scale in (1e300, 1e-310):  # squares would overflow or underflow
        big = np.full((4, 4), 3.0) * scale
        assert normwise_relative_error(big * (1 + 2.0**-30), big) == pytest.approx(2.0**-30, rel=1e-6)


def test_error_report_format_and_compare_with_native():
    a = inputs.normal(20, 30, 0)
    b = inputs.normal(30, 10, 1)
    hi, lo = matmul_dd(a, b)
    report = error_report(a @ b, hi, lo)
    assert set(report) == {"normwise", "max_elementwise", "against"} and report["against"] == "double-double"
    emulated = (a @ b) * (1 + 2.0**-40)
    result = compare_with_native(a, b, emulated)
    assert result["native"] == report
    assert result["emulated"] == error_report(emulated, hi, lo)
    assert result["ratio_normwise"] == result["emulated"]["normwise"] / report["normwise"] > 1
    exact_native = compare_with_native(np.eye(3), np.eye(3), np.eye(3))
    assert exact_native["ratio_normwise"] == 1.0 and exact_native["native"]["normwise"] == 0.0
    assert compare_with_native(np.eye(3), np.eye(3), 2 * np.eye(3))["ratio_max_elementwise"] == np.inf


# ---- inputs.py ---------------------------------------------------------------------------------------------------

GENERATORS = {
    "normal": lambda seed: inputs.normal(33, 17, seed),
    "exponent_spread": lambda seed: inputs.exponent_spread(33, 17, 2.0, seed),
    "huge_and_tiny": lambda seed: inputs.huge_and_tiny(33, 17, seed),
    "with_subnormals": lambda seed: inputs.with_subnormals(33, 17, seed),
    "with_zero_lines": lambda seed: inputs.with_zero_lines(inputs.normal(33, 17, 0), 1, 0.3, seed),
}


@pytest.mark.parametrize("name", GENERATORS)
def test_generators_are_seeded_finite_float64_c_contiguous(name):
    make = GENERATORS[name]
    x = make(5)
    assert x.shape == (33, 17) and x.dtype == np.float64 and x.flags.c_contiguous and np.isfinite(x).all()
    np.testing.assert_array_equal(x, make(5))
    assert not np.array_equal(x, make(6))


def test_exponent_spread_phi():
    uniform = inputs.exponent_spread(200, 200, 0.0, 1)
    assert np.abs(uniform).max() <= 0.5 and uniform.min() < -0.45 and uniform.max() > 0.45
    spreads = [np.std(np.log2(np.abs(inputs.exponent_spread(200, 200, phi, 1)))) for phi in (0.0, 0.5, 1, 2, 4)]
    assert all(later > earlier for earlier, later in zip(spreads, spreads[1:], strict=False)), spreads


def test_with_zero_lines():
    x = inputs.normal(20, 10, 0)
    rows = inputs.with_zero_lines(x, 0, 0.25, 1)
    zero_rows = ~rows.any(axis=1)
    assert zero_rows.sum() == 5 and (rows[~zero_rows] == x[~zero_rows]).all() and x.all()
    cols = inputs.with_zero_lines(x, 1, 0.01, 1)
    assert (~cols.any(axis=0)).sum() == 1
    with pytest.raises(ValueError):
        inputs.with_zero_lines(x, 2, 0.5, 0)


def test_huge_tiny_and_subnormal_contents():
    x = inputs.huge_and_tiny(30, 8, 0)
    row_max = np.abs(x).max(axis=1)
    assert (row_max > 1e299).sum() == 10 and (row_max < 1e-299).sum() == 10
    s = inputs.with_subnormals(16, 20, 0)
    subnormal = (s != 0) & (np.abs(s) < np.finfo(np.float64).smallest_normal)
    assert subnormal.all(axis=1).sum() >= 4 and subnormal.sum() > 4 * 20


def test_adversarial_pairs():
    m, k, n = 9, 14, 7
    pairs = inputs.adversarial_pairs(m, k, n, 0)
    names = [name for name, _, _ in pairs]
    assert len(set(names)) == len(names) >= 12
    for name, a, b in pairs:
        assert a.shape == (m, k) and b.shape == (k, n), name
        for x in (a, b):
            assert x.dtype == np.float64 and x.flags.c_contiguous and np.isfinite(x).all(), name
        assert np.isfinite(a @ b).all(), name
    again = inputs.adversarial_pairs(m, k, n, 0)
    assert all(np.array_equal(x[1], y[1]) and np.array_equal(x[2], y[2]) for x, y in zip(pairs, again, strict=True))
    by_name = {name: (a, b) for name, a, b in pairs}
    at, above = by_name["at the 127/128 margin"][0], by_name["just above the margin"][0]
    _, exp_at = np.frexp(np.abs(at).max(axis=1))
    mant_above, exp_above = np.frexp(np.abs(above).max(axis=1))
    assert (np.abs(at).max(axis=1) == np.ldexp(127 / 128, exp_at)).all() and (row_shifts(at) == exp_at).all()
    assert (mant_above > 127 / 128).all() and (row_shifts(above) == exp_above + 1).all()
    a, b = by_name["signed zeros"]
    zero = a == 0
    assert np.signbit(a[0]).all() and zero[0].all()
    assert (np.signbit(a[1:]) & zero[1:]).any() and (~np.signbit(a) & zero).any() and not zero.all()
    a, b = by_name["heavy cancellation"]
    assert np.abs(a @ b).max() < 1e-5 * (np.abs(a) @ np.abs(b)).max()


def test_worst_line_error_is_the_worst_row_or_column():
    from utilities.errors import worst_line_error

    ref = np.array([[1.0, 2.0, 0.0], [3.0, 4.0, 0.0]])
    c = ref.copy()
    c[1, 1] = 4.5  # row 1: 0.5 / 5; column 1: 0.5 / sqrt(20): the column is worse
    assert worst_line_error(c, ref) == pytest.approx(0.5 / np.sqrt(20.0))
    assert worst_line_error(ref, ref) == 0.0  # the zero column is left out, not 0/0
    big = ref * 2.0**600
    assert worst_line_error(c * 2.0**600, big) == pytest.approx(0.5 / np.sqrt(20.0))  # no overflow

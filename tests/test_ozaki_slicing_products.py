"""Ozaki-I reference, stages 1-3: exponent shifts, int8 slicing, slice products and the int32 budget (CPU only)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from utilities.ozaki import (
    NONFINITE_SHIFT,
    Int32OverflowError,
    SlicesError,
    check_int32_budget,
    col_shifts,
    diagonal_sums,
    exponent_shifts,
    max_k_int32,
    product_terms,
    row_shifts,
    slice_cols,
    slice_matrix,
    slice_products,
    slice_rows,
    unslice_cols,
    unslice_rows,
)

SETTINGS = settings(max_examples=60, derandomize=True, deadline=None, database=None)
MARGIN = Fraction(127, 128)

# Any finite double (subnormals and values near the overflow threshold included), or entries with a random
# common scale, so that rows hold related magnitudes rather than one dominant entry.
any_finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
scaled = st.builds(lambda mant, exp: float(np.ldexp(mant, exp)), st.floats(-1.0, 1.0), st.integers(-1100, 1020))
matrices = arrays(np.float64, st.tuples(st.integers(1, 5), st.integers(1, 6)), elements=st.one_of(any_finite, scaled))


def pow2(p: int) -> Fraction:
    return Fraction(2) ** p


def oracle_digits(x: float, e: int, slices: int) -> list[int]:
    """Balanced base-256 digits of N = rint(x * 2**(8S - 1 - e)), with Python integers (half to even)."""
    n = round(Fraction(x) * pow2(8 * slices - 1 - e))
    digits = []
    for _ in range(slices - 1):
        r = n % 256
        r = r - 256 if r >= 128 else r
        digits.append(r)
        n = (n - r) // 256
    return [n, *reversed(digits)]


def exact_value(digits: np.ndarray, e: int) -> Fraction:
    return sum(int(d) * pow2(e - 7 - 8 * s) for s, d in enumerate(digits))


# ---- stage 1: exponent shifts ------------------------------------------------------------------------------------


@SETTINGS
@given(matrices)
def test_shifts_are_the_smallest_exponent_within_the_margin(x):
    e = row_shifts(x)
    assert e.dtype == np.int32 and e.shape == (x.shape[0],)
    for i, row in enumerate(x):
        mu = Fraction(float(np.max(np.abs(row))))
        if mu == 0:
            assert e[i] == 0
        else:
            assert mu <= MARGIN * pow2(int(e[i])) and mu > MARGIN * pow2(int(e[i]) - 1)


def test_shifts_at_and_just_above_the_margin():
    at = np.ldexp(127.0 / 128.0, 5)
    rows = np.array([[at, 0.5], [np.nextafter(at, np.inf), 0.0], [-at, 1.0], [0.0, -0.0]])
    assert row_shifts(rows).tolist() == [5, 6, 5, 0]
    assert col_shifts(rows.T).tolist() == [5, 6, 5, 0]


def test_shifts_of_subnormal_rows():
    tiny = 2.0**-1074
    x = np.array([[tiny, 0.0], [-3 * tiny, tiny], [2.0**-1023, 0.0]])
    assert row_shifts(x).tolist() == [-1073, -1072, -1022]


def test_shifts_sentinel_for_nan_and_inf():
    x = np.ones((4, 3))
    x[0, 1] = np.nan
    x[2, 2] = np.inf
    x[3, 0] = -np.inf
    assert row_shifts(x).tolist() == [NONFINITE_SHIFT, 1, NONFINITE_SHIFT, NONFINITE_SHIFT]
    assert col_shifts(x).tolist() == [NONFINITE_SHIFT, NONFINITE_SHIFT, NONFINITE_SHIFT]
    assert exponent_shifts(x, axis=1).tolist() == row_shifts(x).tolist()
    assert NONFINITE_SHIFT == np.iinfo(np.int32).max


# ---- stage 2: slicing --------------------------------------------------------------------------------------------


@SETTINGS
@given(matrices, st.integers(1, 12))
def test_digits_match_python_integer_oracle_and_are_balanced(x, slices):
    a_slices, e = slice_rows(x, slices)
    assert a_slices.dtype == np.int8 and a_slices.shape == (slices, *x.shape)
    assert np.abs(a_slices[0].astype(int)).max() <= 127
    for i, j in np.ndindex(x.shape):
        assert a_slices[:, i, j].tolist() == oracle_digits(float(x[i, j]), int(e[i]), slices)


@SETTINGS
@given(matrices, st.integers(1, 12))
def test_round_trip_bound(x, slices):
    """|x - x_hat| <= 2**(e - 8S) <= 2**(1 - 8S) * (128/127) * mu, and unslice_rows gives x_hat exactly."""
    a_slices, e = slice_rows(x, slices)
    x_hat = unslice_rows(a_slices, e)
    for i, j in np.ndindex(x.shape):
        ei = int(e[i])
        exact = exact_value(a_slices[:, i, j], ei)
        error = abs(Fraction(float(x[i, j])) - exact)
        mu = Fraction(float(np.max(np.abs(x[i]))))
        assert error <= pow2(ei - 8 * slices)
        assert error <= pow2(1 - 8 * slices) * Fraction(128, 127) * mu
        if np.isfinite(x_hat[i, j]):  # x_hat rounds up to 2**1024 only for |x| ~ DBL_MAX with S <= 6
            assert Fraction(float(x_hat[i, j])) == exact


@pytest.mark.parametrize("slices", range(1, 8))
def test_digits_match_int64_oracle(slices):
    """N = rint(x * 2**(8S-1-e)) in int64 (S <= 7), then its balanced base-256 digits with NumPy integer ops."""
    rng = np.random.default_rng(slices)
    x = rng.standard_normal((40, 50)) * np.ldexp(1.0, rng.integers(-60, 60, size=(40, 50)))
    x[3] = np.ldexp(rng.standard_normal(50), -1060)  # a subnormal row
    x[5, ::2] = np.ldexp(rng.integers(-1000, 1000, size=25), -1074)  # subnormals next to large entries
    a_slices, e = slice_rows(x, slices)
    n = np.rint(np.ldexp(x, (8 * slices - 1 - e.astype(np.int64))[:, None])).astype(np.int64)
    expected = np.empty((slices, *x.shape), dtype=np.int64)
    for s in range(slices - 1, 0, -1):
        r = n % 256
        r = np.where(r >= 128, r - 256, r)
        expected[s] = r
        n = (n - r) // 256
    expected[0] = n
    np.testing.assert_array_equal(a_slices, expected)


def test_small_negative_entry_needing_more_than_53_bits_after_a_floor():
    """A signed floor would compute 1 - |t| with |t| = 2**-49 + 2**-60 in FP64 and round it: N would come out 0."""
    x = np.array([[1.0, -(2.0**-55 + 2.0**-66)]])
    a_slices, e = slice_rows(x, 7)
    assert e.tolist() == [1]
    assert a_slices[:, 0, 1].tolist() == [0, 0, 0, 0, 0, 0, -1] == oracle_digits(x[0, 1], 1, 7)


def test_signed_zero_gives_zero_digits():
    x = np.array([[-0.0, 0.0, -0.0], [1.0, -0.0, -1.5]])
    a_slices, e = slice_rows(x, 5)
    assert e.tolist() == [0, 1]
    assert not a_slices[:, 0].any() and not a_slices[:, 1, 1].any()
    x_hat = unslice_rows(a_slices, e)
    assert (x_hat == x).all()


def test_layouts_and_dtypes():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((7, 11))
    b = np.asfortranarray(rng.standard_normal((11, 5)))
    a_slices, e = slice_rows(a, 4)
    b_slices, f = slice_cols(b, 4)
    assert a_slices.shape == (4, 7, 11) and a_slices.dtype == np.int8 and a_slices.flags.c_contiguous
    assert b_slices.shape == (4, 5, 11) and b_slices.dtype == np.int8 and b_slices.flags.c_contiguous
    assert e.shape == (7,) and e.dtype == np.int32 and f.shape == (5,) and f.dtype == np.int32
    in_b_layout = slice_matrix(b, f, 4, axis=0)  # (S, k, n): slice_cols stores each slice transposed
    np.testing.assert_array_equal(b_slices, in_b_layout.transpose(0, 2, 1))
    b_hat = unslice_cols(b_slices, f)
    assert b_hat.shape == b.shape
    assert (np.abs(b_hat - b) <= np.ldexp(1.0, f - 32)[None, :]).all()


def test_nonfinite_lines_get_zero_digits():
    a = np.ones((3, 4))
    a[1, 2] = np.nan
    a_slices, e = slice_rows(a, 3)
    assert e[1] == NONFINITE_SHIFT
    assert not a_slices[:, 1].any() and a_slices[:, 0].any()
    assert (unslice_rows(a_slices, e)[1] == 0).all()


def test_slice_matrix_rejects_shifts_below_the_margin():
    x = np.array([[1.0, 0.5]])
    with pytest.raises(ValueError, match="exponent_shifts"):
        slice_matrix(x, np.array([0], dtype=np.int32), 3, axis=1)


@pytest.mark.parametrize("bad", [0, 13, -1, 2.5, True, "7"])
def test_slices_out_of_range(bad):
    with pytest.raises(SlicesError):
        slice_rows(np.ones((2, 2)), bad)


# ---- stage 3: products, diagonals, int32 budget ------------------------------------------------------------------


def test_product_terms_order():
    assert product_terms(3) == [(0, 0), (0, 1), (1, 0), (0, 2), (1, 1), (2, 0)]
    for slices in range(1, 13):
        terms = product_terms(slices)
        assert len(terms) == slices * (slices + 1) // 2
        assert terms == sorted(terms, key=lambda st_: (sum(st_), st_[0]))
        assert all(s + t <= slices - 1 and s >= 0 and t >= 0 for s, t in terms)


def python_int_matmul(x: np.ndarray, y_t: np.ndarray) -> list[list[int]]:
    return [[sum(int(p) * int(q) for p, q in zip(row, col, strict=True)) for col in y_t] for row in x]


@pytest.mark.parametrize(("slices", "m", "n", "k"), [(1, 3, 2, 5), (3, 4, 5, 17), (6, 2, 3, 33)])
def test_products_and_diagonals_are_exact(slices, m, n, k):
    rng = np.random.default_rng(slices)
    a_slices = rng.integers(-128, 128, size=(slices, m, k)).astype(np.int8)
    b_slices = rng.integers(-128, 128, size=(slices, n, k)).astype(np.int8)
    products = slice_products(a_slices, b_slices)
    diagonals = diagonal_sums(a_slices, b_slices)
    assert products.dtype == np.int32 and products.shape == (slices * (slices + 1) // 2, m, n)
    assert diagonals.dtype == np.int32 and diagonals.shape == (slices, m, n)
    expected_diagonals = np.zeros((slices, m, n), dtype=object)
    for term, (s, t) in enumerate(product_terms(slices)):
        exact = python_int_matmul(a_slices[s], b_slices[t])
        assert products[term].tolist() == exact
        expected_diagonals[s + t] += np.array(exact, dtype=object)
    assert diagonals.tolist() == expected_diagonals.tolist()


def test_budget_values():
    assert max_k_int32(7) == 18724
    assert max_k_int32(7, terms_per_accumulator=1) == 131071
    for slices in range(1, 13):
        k = max_k_int32(slices)
        assert slices * k * 2**14 <= 2**31 - 1 < slices * (k + 1) * 2**14


def test_budget_error_names_k_limit_and_fix():
    check_int32_budget(18724, 7)
    with pytest.raises(Int32OverflowError, match="18725") as info:
        check_int32_budget(18725, 7)
    message = str(info.value)
    assert "18724" in message and "Split K into chunks" in message and "fewer slices" in message
    assert isinstance(info.value, ValueError)
    with pytest.raises(Int32OverflowError, match="131072"):
        check_int32_budget(131072, 7, terms_per_accumulator=1)


def test_diagonal_sums_and_products_check_the_budget():
    k = max_k_int32(7) + 1
    ones = np.ones((7, 1, k), dtype=np.int8)
    with pytest.raises(Int32OverflowError):
        diagonal_sums(ones, ones)
    big = np.ones((2, 1, max_k_int32(2, 1) + 1), dtype=np.int8)
    with pytest.raises(Int32OverflowError):
        slice_products(big, big)


def test_all_minus_128_digits_reach_the_predicted_maximum():
    for slices in (3, 7):
        k = max_k_int32(slices)
        digits = np.full((slices, 1, k), -128, dtype=np.int8)
        diagonals = diagonal_sums(digits, digits)
        assert diagonals[:, 0, 0].tolist() == [(d + 1) * k * 2**14 for d in range(slices)]
        assert diagonals[-1, 0, 0] == slices * k * 2**14 <= 2**31 - 1
    k = max_k_int32(2, terms_per_accumulator=1)
    digits = np.full((2, 1, k), -128, dtype=np.int8)
    assert (slice_products(digits, digits) == k * 2**14).all()
    assert k * 2**14 == 2147467264

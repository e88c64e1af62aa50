"""Ozaki-I reference, stages 4-5: the FP64 epilogue, the end-to-end emulation, its error bound (CPU only)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from utilities import inputs
from utilities.errors import normwise_relative_error
from utilities.exact import matmul_dd
from utilities.ozaki import (
    NONFINITE_SHIFT,
    InputDtypeError,
    InputShapeError,
    Int32OverflowError,
    NonFiniteError,
    SlicesError,
    diagonal_sums,
    error_bound,
    ozaki_gemm_ref,
    ozaki_stages,
    reconstruct,
    reconstruct_from_products,
    slice_cols,
    slice_products,
    slice_rows,
)

SETTINGS = settings(max_examples=40, derandomize=True, deadline=None, database=None)
U = 2.0**-53
M, K, N = 64, 96, 80  # awkward sizes
PAIRS = inputs.adversarial_pairs(M, K, N, seed=2024)


def scalar_reconstruct(diagonals, e, f, alpha=1.0, beta=0.0, c=None):
    """The documented epilogue, one entry at a time with Python floats."""
    slices, m, n = diagonals.shape
    out = np.empty((m, n))
    for i in range(m):
        for j in range(n):
            acc = 0.0
            for d in range(slices - 1, -1, -1):
                acc = acc + float(diagonals[d, i, j]) * 2.0 ** (-8 * d)
            r = alpha * math.ldexp(acc, int(e[i]) + int(f[j]) - 14)
            out[i, j] = r + beta * float(c[i, j]) if beta != 0.0 else r
    return out


def random_diagonals(rng, slices, m, n):
    """Diagonal sums with large values, so that the FP64 accumulation really rounds."""
    return rng.integers(-(2**31) + 1, 2**31, size=(slices, m, n)).astype(np.int32)


def assert_within_bound(c, a, b, bound):
    """|c - A @ B| <= bound, with A @ B as a double-double (its own error, gamma_k^2 sum|a||b|, is allowed for)."""
    hi, lo = matmul_dd(a, b)
    k = a.shape[1]
    gamma = k * U / (1 - k * U)
    slack = 2 * gamma**2 * (np.abs(a) @ np.abs(b)) * (1 + 4 * k * U) + 2.0**-1070
    error = np.abs((c - hi) - lo)
    ok = error <= bound * (1 + 4 * U) + slack
    assert ok.all(), f"first violations at {np.argwhere(~ok)[:3].tolist()}: error {error[~ok][:3]} > {bound[~ok][:3]}"


# ---- stage 4: epilogue -------------------------------------------------------------------------------------------


@SETTINGS
@given(
    st.integers(1, 12),
    st.integers(0, 2**32 - 1),
    st.sampled_from([(1.0, 0.0), (-2.5, 0.0), (0.75, 1.0), (1.0, -0.3)]),
    st.sampled_from([0, 950, -1000, -1030]),  # up to 2**1008, and subnormal results
)
def test_reconstruct_is_bit_identical_to_the_documented_order(slices, seed, alpha_beta, offset):
    rng = np.random.default_rng(seed)
    diagonals = random_diagonals(rng, slices, 3, 4)
    e = (rng.integers(-20, 20, size=3) + offset).astype(np.int32)
    f = rng.integers(-20, 20, size=4).astype(np.int32)
    alpha, beta = alpha_beta
    c = rng.standard_normal((3, 4))
    got = reconstruct(diagonals, e, f, alpha, beta, c)
    want = scalar_reconstruct(diagonals, e, f, alpha, beta, c)
    np.testing.assert_array_equal(got.view(np.int64), want.view(np.int64))


@SETTINGS
@given(st.integers(1, 12), st.integers(0, 2**32 - 1))
def test_reconstruct_against_exact_fractions(slices, seed):
    """Only the FP64 accumulation rounds: within gamma_S * sum_d |D_d| 2**(-8d), scaled (no underflow here)."""
    rng = np.random.default_rng(seed)
    diagonals = random_diagonals(rng, slices, 2, 3)
    e = rng.integers(-30, 30, size=2).astype(np.int32)
    f = rng.integers(-30, 30, size=3).astype(np.int32)
    got = reconstruct(diagonals, e, f)
    gamma = Fraction(slices) * Fraction(U) / (1 - slices * Fraction(U))
    for i, j in np.ndindex(got.shape):
        scale = Fraction(2) ** (int(e[i]) + int(f[j]) - 14)
        exact = sum(int(diagonals[d, i, j]) * Fraction(2) ** (-8 * d) for d in range(slices)) * scale
        weighted = sum(abs(int(diagonals[d, i, j])) * Fraction(2) ** (-8 * d) for d in range(slices)) * scale
        assert abs(Fraction(float(got[i, j])) - exact) <= gamma * weighted


@pytest.mark.parametrize("slices", [1, 4, 7, 10])
def test_reconstruct_from_products_is_bit_identical(slices):
    rng = np.random.default_rng(slices)
    a_slices = rng.integers(-128, 128, size=(slices, 9, 37)).astype(np.int8)
    b_slices = rng.integers(-128, 128, size=(slices, 7, 37)).astype(np.int8)
    e = rng.integers(-5, 5, size=9).astype(np.int32)
    f = rng.integers(-5, 5, size=7).astype(np.int32)
    c = rng.standard_normal((9, 7))
    fused = reconstruct(diagonal_sums(a_slices, b_slices), e, f, 1.5, -0.5, c)
    unfused = reconstruct_from_products(slice_products(a_slices, b_slices), e, f, slices, 1.5, -0.5, c)
    np.testing.assert_array_equal(fused.view(np.int64), unfused.view(np.int64))


def test_beta_zero_does_not_read_c():
    rng = np.random.default_rng(0)
    diagonals = random_diagonals(rng, 3, 4, 5)
    e = np.zeros(4, dtype=np.int32)
    f = np.zeros(5, dtype=np.int32)
    nan_c = np.full((4, 5), np.nan)
    without = reconstruct(diagonals, e, f, 2.0, 0.0, None)
    assert np.isfinite(without).all()
    np.testing.assert_array_equal(reconstruct(diagonals, e, f, 2.0, 0.0, nan_c), without)
    np.testing.assert_array_equal(reconstruct(diagonals, e, f, 2.0, 0.0, "not even an array"), without)
    with pytest.raises(ValueError, match="beta != 0"):
        reconstruct(diagonals, e, f, 1.0, 1.0, None)


def test_alpha_beta_semantics():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((6, 10))
    b = rng.standard_normal((10, 5))
    c = rng.standard_normal((6, 5))
    plain = ozaki_gemm_ref(a, b)
    np.testing.assert_array_equal(ozaki_gemm_ref(a, b, alpha=-3.0, beta=0.5, c=c), -3.0 * plain + 0.5 * c)
    np.testing.assert_array_equal(ozaki_gemm_ref(a, b, alpha=0.25), 0.25 * plain)
    with pytest.raises(InputShapeError):
        ozaki_gemm_ref(a, b, beta=1.0, c=c[:, :4])


def test_sentinel_lines_give_nan_or_raise():
    diagonals = np.ones((2, 3, 4), dtype=np.int32)
    e = np.array([0, NONFINITE_SHIFT, 0], dtype=np.int32)
    f = np.array([0, 0, 0, NONFINITE_SHIFT], dtype=np.int32)
    out = reconstruct(diagonals, e, f, beta=1.0, c=np.zeros((3, 4)))
    nan = np.zeros((3, 4), dtype=bool)
    nan[1, :] = nan[:, 3] = True
    np.testing.assert_array_equal(np.isnan(out), nan)
    with pytest.raises(NonFiniteError, match="row 1 of A"):
        reconstruct(diagonals, e, f, nonfinite="raise")


# ---- stage 5: end to end -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("slices", [3, 5, 7, 10])
@pytest.mark.parametrize("phi", [0.0, 1.0])
def test_random_inputs_within_error_bound(slices, phi):
    a = inputs.exponent_spread(M, K, phi, seed=slices)
    b = inputs.exponent_spread(K, N, phi, seed=100 + slices)
    assert_within_bound(ozaki_gemm_ref(a, b, slices), a, b, error_bound(a, b, slices))


@pytest.mark.parametrize("slices", [4, 7])
@pytest.mark.parametrize(("name", "a", "b"), PAIRS, ids=[name for name, _, _ in PAIRS])
def test_adversarial_pairs_within_error_bound(name, a, b, slices):
    c = ozaki_gemm_ref(a, b, slices)
    assert c.shape == (M, N) and np.isfinite(c).all()
    bound = error_bound(a, b, slices)
    assert_within_bound(c, a, b, bound)
    zero_lines = ~np.any(a != 0, axis=1)[:, None] | ~np.any(b != 0, axis=0)[None, :]
    assert (c[zero_lines] == 0).all() and (bound[zero_lines] == 0).all()


def test_more_slices_are_more_accurate():
    a = inputs.normal(M, K, 5)
    b = inputs.normal(K, N, 6)
    hi, lo = matmul_dd(a, b)
    errors = [normwise_relative_error(ozaki_gemm_ref(a, b, s), hi, lo) for s in (2, 3, 4, 5, 6)]
    assert all(later < earlier / 50 for earlier, later in zip(errors, errors[1:], strict=False)), errors


def test_stages_compose_to_the_result():
    a = inputs.normal(13, 29, 0)
    b = inputs.normal(29, 11, 1)
    stages = ozaki_stages(a, b, 6)
    a_slices, e = slice_rows(a, 6)
    b_slices, f = slice_cols(b, 6)
    for got, want in [(stages.e, e), (stages.f, f), (stages.a_slices, a_slices), (stages.b_slices, b_slices)]:
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(stages.diagonals, diagonal_sums(a_slices, b_slices))
    assert stages.slices == 6 and stages.diagonals.dtype == np.int32
    np.testing.assert_array_equal(reconstruct(stages.diagonals, stages.e, stages.f), ozaki_gemm_ref(a, b, 6))


def test_nonfinite_raise_names_matrix_count_position_and_fix():
    a = inputs.normal(5, 7, 0)
    b = inputs.normal(7, 4, 1)
    a[2, 5] = np.nan
    a[4, 0] = np.inf
    with pytest.raises(NonFiniteError) as info:
        ozaki_gemm_ref(a, b)
    message = str(info.value)
    assert "A has 2 non-finite entries" in message and "A[2, 5] = nan" in message
    assert "Clean the input" in message and "nonfinite='propagate'" in message
    b[3, 1] = -np.inf
    with pytest.raises(NonFiniteError, match=r"B has 1 non-finite entries.*B\[3, 1\] = -inf"):
        ozaki_gemm_ref(np.ones((5, 7)), b)


def test_nonfinite_propagate_gives_nan_exactly_in_affected_lines():
    a = inputs.normal(M, K, 3)
    b = inputs.normal(K, N, 4)
    a[[5, 17], [2, 90]] = [np.nan, -np.inf]
    b[[0, 50], [79, 3]] = [np.inf, np.nan]
    c = ozaki_gemm_ref(a, b, nonfinite="propagate")
    expected = np.zeros((M, N), dtype=bool)
    expected[[5, 17], :] = True
    expected[:, [79, 3]] = True
    np.testing.assert_array_equal(np.isnan(c), expected)
    clean_a = np.where(np.isfinite(a), a, 0.0)
    clean_a[[5, 17]] = 0.0
    clean_b = np.where(np.isfinite(b), b, 0.0)
    np.testing.assert_array_equal(c[~expected], ozaki_gemm_ref(clean_a, clean_b)[~expected])


def test_input_validation():
    a = np.ones((4, 3))
    b = np.ones((3, 2))
    with pytest.raises(InputDtypeError, match=r"convert with \.astype\(np\.float64\)"):
        ozaki_gemm_ref(a.astype(np.float32), b)
    with pytest.raises(InputDtypeError):
        ozaki_gemm_ref(a.tolist(), b)
    with pytest.raises(InputShapeError, match="2-D"):
        ozaki_gemm_ref(np.ones(3), b)
    with pytest.raises(InputShapeError, match="inner dimensions differ"):
        ozaki_gemm_ref(a, np.ones((4, 2)))
    for bad in (0, 13):
        with pytest.raises(SlicesError):
            ozaki_gemm_ref(a, b, slices=bad)
    with pytest.raises(ValueError, match="nonfinite"):
        ozaki_gemm_ref(a, b, nonfinite="ignore")


def test_int32_budget_end_to_end():
    k = 18725
    with pytest.raises(Int32OverflowError, match="18724"):
        ozaki_gemm_ref(np.ones((1, k)), np.ones((k, 1)), slices=7)
    assert ozaki_gemm_ref(np.ones((1, k - 1)), np.ones((k - 1, 1)), slices=7)[0, 0] == k - 1


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_acceptance_7_slices_within_2x_native_fp64(seed):
    """The issue's acceptance: 512^3 normal inputs, 7 slices, normwise error <= 2x that of native FP64."""
    a = inputs.normal(512, 512, 2 * seed)
    b = inputs.normal(512, 512, 2 * seed + 1)
    hi, lo = matmul_dd(a, b)
    emulated = normwise_relative_error(ozaki_gemm_ref(a, b, 7), hi, lo)
    native = normwise_relative_error(a @ b, hi, lo)
    assert emulated <= 2 * native, (emulated, native)

"""The plain numba kernels of Ozaki-II against the NumPy reference: exponents, residues and CRT digits bit for bit,
C to its last rounding. Without a GPU they run in numba's CUDA simulator on small sizes (conftest.py)."""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

from utilities import inputs
from utilities.ozaki2 import reference as ref
from utilities.ozaki2 import simt

THREADS = 32  # the simulator runs one Python thread per CUDA thread: keep blocks small

pytestmark = pytest.mark.device


def _inputs():
    yield "normal", inputs.normal(5, 70, 1)
    yield "spread phi=3", inputs.exponent_spread(5, 70, 3.0, 3)
    yield "huge and tiny rows", inputs.huge_and_tiny(5, 70, 4)
    yield "subnormal rows", inputs.with_subnormals(5, 70, 6)
    yield "zero rows", inputs.with_zero_lines(inputs.normal(5, 70, 7), 0, 0.4, 8)
    yield "large digits", inputs.large_digits(5, 70, 9)
    a, _ = inputs.nonfinite_lines(5, 70, 3, 10)
    yield "an Inf in a row", a


CASES = list(_inputs())


def _residues(x: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    m, k = x.shape
    kp = -(-k // 16) * 16
    words = cuda.to_device(np.full((count, m, kp), 99, np.int8).view(np.int32))
    mu = cuda.to_device(np.zeros(m, np.int32))
    simt.make_residue_rows_kernel(k, kp, count, THREADS)[m, THREADS](cuda.to_device(x), words, mu)
    res = words.copy_to_host().view(np.int8)
    assert not res[:, :, k:].any(), "the padding must hold zero residues"
    return mu.copy_to_host(), res[:, :, :k]


@pytest.mark.parametrize("count", [3, 14, 20])
@pytest.mark.parametrize(("name", "x"), CASES, ids=[c[0] for c in CASES])
def test_residue_rows_kernel_matches_reference(name, x, count):
    mu, res = _residues(x, count)
    want_mu = ref.scale_exponents(x, 1, count)
    np.testing.assert_array_equal(mu, want_mu, err_msg=name)
    np.testing.assert_array_equal(res, ref.residues(ref.to_integers(x, want_mu, 1), count), err_msg=name)


def test_stats_kernel_matches_line_terms():
    x = inputs.exponent_spread(6, 90, 2.0, 11)
    x[2] = 0.0
    k = x.shape[1]
    kp = -(-k // 16) * 16
    e_max, s = cuda.to_device(np.zeros(6, np.int32)), cuda.to_device(np.zeros(6, np.int64))
    simt.make_stats_kernel(k, kp, THREADS)[6, THREADS](cuda.to_device(x), e_max, s)
    want_e, want_s = ref.line_terms(x, 1)
    np.testing.assert_array_equal(s.copy_to_host(), want_s)
    np.testing.assert_array_equal(e_max.copy_to_host(), np.where(want_s > 0, want_e, 0))


@pytest.mark.parametrize("count", [4, 15])
def test_reconstruct_kernel_matches_reference(count):
    a, b = inputs.exponent_spread(7, 50, 1.0, 12), inputs.exponent_spread(50, 9, 1.0, 13)
    a[3, 4] = np.nan
    st = ref.ozaki2_stages(a, b, count)
    c = np.random.default_rng(0).standard_normal((7, 9))
    for alpha, beta in ((1.0, 0.0), (-0.5, 2.0)):
        out = cuda.to_device(np.full((7, 9), -1.0))
        step = simt.reconstruct_launch(7, 9, count)
        c_arg = np.full_like(c, np.nan) if beta == 0.0 else c  # not read when beta == 0
        step.kernel[step.grid, step.block](cuda.to_device(st.products), cuda.to_device(st.mu), cuda.to_device(st.nu),
                                           alpha, beta, cuda.to_device(c_arg), out)  # fmt: skip
        got = out.copy_to_host()
        want = ref.reconstruct(st.digits, st.mu, st.nu, count, alpha, beta, c)
        assert np.isnan(got[3]).all() and np.isnan(want[3]).all()
        finite = np.isfinite(want)
        np.testing.assert_allclose(got[finite], want[finite], rtol=2**-51, atol=0)

"""The plain numba kernels of Ozaki-II against the NumPy reference, stage by stage: exponents, residues of rows and
of columns (transposed), CRT digits and C bit for bit. Without a GPU they run in numba's CUDA
simulator on small sizes (conftest.py)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from numba import cuda

from utilities import inputs, precision
from utilities.operands import NONFINITE_SHIFT
from utilities.ozaki2 import reference as ref
from utilities.ozaki2 import simt

THREADS = 32  # the simulator runs one Python thread per CUDA thread: keep blocks small
SIMULATOR = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")

pytestmark = pytest.mark.device


def on_a_device(count: int) -> object:
    """``count`` as a parameter that runs on a device only: in numba's simulator a block of 256 threads calling device
    functions that long contends for the simulator's per-module lock, and one launch took from one to ten minutes.
    The column kernel's code is the same for every count (N is a loop bound and a table size); ``residue`` and
    ``split_residue`` meet every modulus of 20 in the row kernel's and the edges' tests here."""
    reason = "the simulator's lock contention: on a device only (the GPU suite runs the device tests)"
    return pytest.param(count, marks=pytest.mark.skipif(SIMULATOR, reason=reason))


def _rows():
    yield "normal", inputs.normal(5, 70, 1)
    yield "spread phi=3", inputs.exponent_spread(5, 70, 3.0, 3)
    yield "huge and tiny rows", inputs.huge_and_tiny(5, 70, 4)
    yield "subnormal rows", inputs.with_subnormals(5, 70, 6)
    yield "zero rows", inputs.with_zero_lines(inputs.normal(5, 70, 7), 0, 0.4, 8)
    x = inputs.normal(5, 70, 9)
    x[1, 3], x[2] = np.finfo(np.float64).max, np.ldexp(x[2], -1070)  # near DBL_MAX; the smallest subnormals
    x[3, 10:] *= 2.0**-60  # one dominant entry
    yield "near DBL_MAX, subnormal, dominant", x
    a, _ = inputs.nonfinite_lines(5, 70, 3, 10)
    yield "an Inf in a row", a


ROWS = list(_rows())


def _residues(x: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    m, k = x.shape
    kp = -(-k // 16) * 16
    words = cuda.to_device(np.full((count, m, kp), 99, np.int8).view(np.int32))
    mu = cuda.to_device(np.zeros(m, np.int32))
    simt.make_residue_rows_kernel(k, kp, count, THREADS)[m, THREADS](cuda.to_device(x), words, mu)
    res = words.copy_to_host().view(np.int8)
    assert not res[:, :, k:].any(), "the padding must hold zero residues"
    return mu.copy_to_host(), res[:, :, :k]


@pytest.mark.parametrize("count", [2, 15, 20])
@pytest.mark.parametrize(("name", "x"), ROWS, ids=[c[0] for c in ROWS])
def test_residue_rows_kernel_matches_reference(name, x, count):
    mu, res = _residues(x, count)
    want_mu = ref.scale_exponents(x, 1, count)
    np.testing.assert_array_equal(mu, want_mu, err_msg=name)
    np.testing.assert_array_equal(res, ref.residues(ref.to_integers(x, want_mu, 1), count), err_msg=name)


def column_statistics(b: np.ndarray) -> np.ndarray:
    """istats (3, n) of B's columns, as ``precision_gpu`` computes them (here from the reference, which the
    statistics kernels match bit for bit: tests/test_core_precision_kernels.py)."""
    e, s = precision.line_terms(np.where(np.isfinite(b), b, 0.0), 0)
    return np.stack([e, s, (~np.isfinite(b).all(axis=0)).astype(np.int64)])


@pytest.mark.parametrize("group", [1, 2, 4], ids=["rows first", "pairs of row tiles", "fours (the course's)"])
@pytest.mark.parametrize("count", [3, 6, on_a_device(15), on_a_device(20)])
def test_residue_cols_kernel_writes_the_transposed_residues(count, group):
    """B (k x n) row-major in, B^T's residues out: two column tiles (the second partial), three row tiles (the last
    partial, then padding), columns holding a NaN, zeros, subnormals and a near-DBL_MAX entry; in each block order
    (``group``: with 2 and 4 the grid has a fourth row of blocks, past kp, that writes nothing)."""
    k, n = 150, 37
    b = inputs.exponent_spread(k, n, 2.0, 11)
    b[:, 3], b[7, 5], b[:, 8] = 0.0, np.nan, np.ldexp(b[:, 8], -1050)
    b[9, 30] = 1.6e308
    kp = -(-k // 16) * 16
    words = cuda.to_device(np.full((count, n, kp), 99, np.int8).view(np.int32))
    nu = cuda.to_device(np.full(n, -7, np.int32))
    step = simt.residue_cols_launch(k, n, kp, count, group=group)
    assert step.grid == (2, 3 if group == 1 else 4)
    step.kernel[step.grid, step.block](cuda.to_device(b), cuda.to_device(column_statistics(b)), words, nu)
    res = words.copy_to_host().view(np.int8)
    want_nu = ref.scale_exponents(b, 0, count)
    np.testing.assert_array_equal(nu.copy_to_host(), want_nu)
    np.testing.assert_array_equal(res[:, :, :k], ref.residues(ref.to_integers(b, want_nu, 0).T, count))
    assert not res[:, :, k:].any(), "rows k..kp-1 of B^T must hold zero residues"


@pytest.mark.parametrize("count", [3, 15])
@pytest.mark.parametrize("k", [300, 700], ids=["three runs", "six runs"])
@pytest.mark.parametrize("known", [True, False], ids=["statistics known", "statistics found"])
def test_the_rows_kernels_take_every_run_of_a_long_row(known, k, count):
    """The rows kernels, at 32 threads: k = 300 (kp = 304) gives three runs of four entries a thread (the
    known-statistics kernel loads them all first); k = 700 (kp = 704) six (it loads the last two after the first
    four are stored). Both write out their runs. The last run lies partly past the row's words and its entries past
    k are ragged; rows with a NaN, zeros, subnormals and a near-DBL_MAX entry. The residues and mu equal the
    reference's, the padding holds zeros."""
    m = 4
    x = inputs.exponent_spread(m, k, 2.0, 12)
    x[1, 7], x[2, :] = np.nan, np.ldexp(x[2, :], -1050)
    x[3, k - 1] = 1.6e308
    kp = -(-k // 16) * 16
    words = cuda.to_device(np.full((count, m, kp), 99, np.int8).view(np.int32))
    mu = cuda.to_device(np.full(m, -7, np.int32))
    if known:
        kernel = simt.make_residue_known_rows_kernel(k, kp, count, THREADS)
        stats = cuda.to_device(column_statistics(np.ascontiguousarray(x.T)))
        kernel[m, THREADS](cuda.to_device(x), stats, words, mu)
    else:
        simt.make_residue_rows_kernel(k, kp, count, THREADS)[m, THREADS](cuda.to_device(x), words, mu)
    res = words.copy_to_host().view(np.int8)
    want_mu = ref.scale_exponents(x, 1, count)
    np.testing.assert_array_equal(mu.copy_to_host(), want_mu)
    np.testing.assert_array_equal(res[:, :, :k], ref.residues(ref.to_integers(x, want_mu, 1), count))
    assert not res[:, :, k:].any(), "the padding must hold zero residues"


def test_residue_is_exact_at_the_edges_of_its_range():
    """``residue(w, t)`` for |w| < 2^47: multiples of p and their neighbours, the ends of the range, ties of 256."""
    residue = simt.make_residue(ref.MAX_MODULI)

    @cuda.jit
    def kernel(w, t, out):
        i = cuda.grid(1)
        if i < w.size:
            out[i] = residue(w[i], t)

    rng = np.random.default_rng(3)
    for t, p in enumerate(ref.MODULI):
        edges = [2.0**47 - 1, -(2.0**47) + 1, p // 2, -(p // 2), p // 2 + 1, 128.0, -128.0, 384.0]
        near_multiples = p * np.trunc(np.ldexp(rng.standard_normal(30), 30)) + rng.integers(-p, p + 1, 30)
        spread = np.trunc(np.ldexp(rng.standard_normal(100), rng.integers(0, 46, 100)))
        w = np.concatenate([spread, near_multiples, edges])
        out = cuda.to_device(np.zeros(w.size))
        kernel[-(-w.size // 64), 64](cuda.to_device(w), t, out)
        np.testing.assert_array_equal(out.copy_to_host(), ref.residue(w, p), err_msg=f"p = {p}")


@pytest.mark.parametrize("count", [2, 15, 20])
def test_digits_kernel_matches_reduce_products(count):
    rng = np.random.default_rng(count)
    products = rng.integers(-(2**31), 2**31, (count, 40), dtype=np.int64).astype(np.int32)
    products[:, :4] = [[0, 1, -1, -(2**31)]] * count
    want = ref.reduce_products(products, count)
    for t in range(count):
        digits = cuda.to_device(np.full(40, 255, np.uint8))
        step = simt.digits_launch(40, count)
        step.kernel[step.grid, step.block](cuda.to_device(products[t]), np.int64(t), digits)
        np.testing.assert_array_equal(digits.copy_to_host(), want[t], err_msg=f"modulus {t}")


@pytest.mark.parametrize("from_products", [False, True])
@pytest.mark.parametrize("count", [4, 15, 20])
def test_reconstruct_kernel_matches_reference(count, from_products):
    """C from digits (or from int32 products), with alpha and beta, C unread when beta = 0, a NaN row of A and an
    Inf column of B (there: DGEMM's NaN and +-Inf), the reference's bit for bit. On an H200 (2026-11-28) two of 48
    entries differed from it by 4.4e-16 at a value near 0.01, when the kernel's sums were ``s += u * w``, which the
    GPU fused and the reference rounded twice; both now round them once (tests/test_ozaki2_rounding.py)."""
    a, b = inputs.exponent_spread(7, 50, 1.0, 12), inputs.exponent_spread(50, 9, 1.0, 13)
    a[3, 4], b[6, 2] = np.nan, np.inf
    st = ref.ozaki2_stages(a, b, count)
    c = np.random.default_rng(0).standard_normal((7, 9))
    for alpha, beta in ((1.0, 0.0), (-0.5, 2.0)):
        out = cuda.to_device(np.full((7, 9), -1.0))
        step = simt.reconstruct_launch(7, 9, count, from_products=from_products)
        c_arg = np.full_like(c, np.nan) if beta == 0.0 else c  # not read when beta == 0
        planes = st.products if from_products else st.digits
        step.kernel[step.grid, step.block](
            cuda.to_device(planes),
            cuda.to_device(st.mu),
            cuda.to_device(st.nu),
            cuda.to_device(a),
            cuda.to_device(b),
            alpha,
            beta,
            cuda.to_device(c_arg),
            out,
        )
        got = out.copy_to_host()
        want = ref.reconstruct(st.digits, st.mu, st.nu, count, alpha, beta, c, a, b)
        with np.errstate(invalid="ignore"):
            native = alpha * (a @ b) + (beta * c if beta else 0.0)
        bad = ~np.isfinite(want)
        np.testing.assert_array_equal(got[bad], native[bad])  # DGEMM's NaN and +-Inf, where DGEMM has them
        assert np.isnan(got[3]).all() and bad[:, 2].all()
        differ = ~bad & (got != want)
        assert not differ.any(), f"{got[differ]} against {want[differ]} (alpha {alpha}, beta {beta})"


def test_the_reconstruction_is_nearly_correctly_rounded():
    """Integers whose digits are known: the double-double reconstruction gives each to within one unit in its
    last place (a plain r P rounds three times), plus the rounded third part of 1/p (about P 2^-110)."""
    from utilities.ozaki2 import check

    rng = np.random.default_rng(5)
    for count in (7, 15, 20):
        t = ref.crt(count).t
        ints = [int(rng.integers(-(2**62), 2**62)) >> max(0, 62 - t) for _ in range(200)] + [1 << t, -(1 << t), 1]
        x = np.array(ints, object).reshape(1, -1)
        got = ref.integer_product(check.digits_of(x, count), count)[0]
        exact = np.array([float(v) for v in ints])
        low_part = ref.crt(count).product_float * 2.0**-104
        assert np.all(np.abs(got - exact) <= np.spacing(np.abs(exact)) + low_part), count


def test_nonfinite_shift_is_the_operands_sentinel():
    assert NONFINITE_SHIFT == np.iinfo(np.int32).max


@pytest.mark.parametrize("shape", [(64, 96), (70, 37), (20, 31)], ids=["whole tiles", "whole and ragged", "ragged"])
def test_transpose_kernel_moves_every_entry(shape):
    """B^T for the rows kernel: tiles that divide the shape take the path without tests, the edges' tiles the tested
    one; (70, 37) has both in one launch, (20, 31) none whole. Distinct entries: a swapped offset shows."""
    rows, cols = shape
    x = np.arange(rows * cols, dtype=np.float64).reshape(rows, cols) + 0.5
    xt = cuda.to_device(np.full((cols, rows), np.nan))
    grid = (-(-cols // simt.T_TILE), -(-rows // simt.T_TILE))
    simt.make_transpose_kernel()[grid, (simt.T_TILE, simt.T_ROWS)](cuda.to_device(x), xt)
    np.testing.assert_array_equal(xt.copy_to_host(), x.T)


@pytest.mark.parametrize(("k", "known", "found"), [(2048, 128, 128), (8192, 512, 512), (16384, 512, 1024)])
def test_the_rows_kernels_default_widths(k, known, found):
    """The known-statistics kernel runs at most 512 threads a row (two blocks an SM take turns where one of 1024
    would drain alone); the kernel that finds its statistics keeps ``rows_threads``' width, up to 1024, for its
    reduction."""
    assert simt.residue_known_launch(4, k, k, 15).block == known
    assert simt.residue_launch(4, k, k, 15).block == found

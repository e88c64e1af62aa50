"""The cuBLAS baselines against NumPy (needs a GPU; skipped without one by the conftest)."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


def _int8(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    x = rng.integers(-128, 128, size=shape, dtype=np.int8)
    x.flat[:: max(1, x.size // 7)] = -128  # the extreme that a symmetric range would miss
    return x


@pytest.mark.parametrize(("m", "n", "k"), [(64, 64, 64), (1823, 781, 260), (5, 3, 4), (256, 512, 1024)])
def test_igemm_matches_numpy_int64(m: int, n: int, k: int) -> None:
    import cupy

    from utilities import cublas

    rng = np.random.default_rng(m * n + k)
    a = _int8(rng, (m, k))
    b = _int8(rng, (k, n))
    c = cublas.igemm(cupy.asarray(a), cupy.asarray(np.ascontiguousarray(b.T)))
    assert c.dtype == cupy.int32 and c.shape == (m, n)
    want = a.astype(np.int64) @ b.astype(np.int64)
    np.testing.assert_array_equal(cupy.asnumpy(c).astype(np.int64), want)


def test_igemm_all_minus_128_is_exact_and_reuses_out() -> None:
    import cupy

    from utilities import cublas

    m, n, k = 32, 48, 4096
    a = cupy.full((m, k), -128, dtype=cupy.int8)
    bt = cupy.full((n, k), -128, dtype=cupy.int8)
    out = cupy.zeros((m, n), dtype=cupy.int32)
    c = cublas.igemm(a, bt, out=out)
    assert c is out
    assert int(c.min()) == int(c.max()) == k * 128 * 128


def test_igemm_rejects_bad_inputs() -> None:
    import cupy

    from utilities import cublas

    a = cupy.zeros((8, 12), dtype=cupy.int8)
    bt = cupy.zeros((16, 12), dtype=cupy.int8)
    with pytest.raises(ValueError, match="multiple of 4"):
        cublas.igemm(cupy.zeros((8, 10), dtype=cupy.int8), cupy.zeros((16, 10), dtype=cupy.int8))
    with pytest.raises(ValueError, match="inner sizes"):
        cublas.igemm(a, cupy.zeros((16, 8), dtype=cupy.int8))
    with pytest.raises(ValueError, match="int8"):
        cublas.igemm(a.astype(cupy.int16), bt)
    with pytest.raises(ValueError, match="C-contiguous"):
        cublas.igemm(a, cupy.zeros((12, 16), dtype=cupy.int8).T)
    with pytest.raises(ValueError, match="shape"):
        cublas.igemm(a, bt, out=cupy.zeros((16, 8), dtype=cupy.int32))


def test_dgemm_matches_numpy() -> None:
    import cupy

    from utilities import cublas

    rng = np.random.default_rng(0)
    a = rng.standard_normal((1823, 781))
    b = rng.standard_normal((781, 333))
    out = cupy.empty((1823, 333))
    c = cublas.dgemm(cupy.asarray(a), cupy.asarray(b), out=out)
    assert c is out
    want = a @ b
    err = np.linalg.norm(cupy.asnumpy(c) - want) / np.linalg.norm(want)
    assert err < 1e-13


def test_providers_run_and_rate() -> None:
    import cupy

    from utilities import bench, cublas

    m = n = k = 1024
    a = cupy.random.standard_normal((m, k))
    b = cupy.random.standard_normal((k, n))
    a8 = cupy.random.randint(-128, 128, size=(m, k), dtype=cupy.int8)
    bt8 = cupy.random.randint(-128, 128, size=(n, k), dtype=cupy.int8)
    providers = {
        "cublas.dgemm": cublas.dgemm_provider(a, b),
        "cublas.igemm": cublas.igemm_provider(a8, bt8),
    }
    records = bench.compare(providers, m=m, n=n, k=k, repeats=5, show=False)
    assert [r.name for r in records] == ["cublas.dgemm", "cublas.igemm"]
    assert all(r.tflops > 0 and r.time.repeats == 5 for r in records)
    apart = bench.compare(providers, m=m, n=n, k=k, repeats=5, interleave=False, show=False)
    assert [r.name for r in apart] == ["cublas.dgemm", "cublas.igemm"] and all(r.tflops > 0 for r in apart)
    flushed = bench.bench(providers["cublas.dgemm"], m=m, n=n, k=k, name="cublas.dgemm", repeats=5, flush_l2=True)
    assert flushed.time.median > 0

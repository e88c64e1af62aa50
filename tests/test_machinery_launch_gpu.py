"""The fast launch path (``utilities.machinery.launch``) against numba's own launch (skipped without a GPU).

The fast path packs numba's kernel arguments itself; a mistake there would pass wrong shapes, strides or
scalars, so the kernel below reads a 3-D array through its strides, a 2-D one, a float32 and an int64, and uses
more than 48 KiB of dynamic shared memory (the launch fails unless the limit was raised).
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

SHARED = 64 * 1024
LAST = SHARED // 4 - 1  # the last float32 of the dynamic shared buffer


@pytest.fixture(scope="module")
def env():
    import cupy as cp
    from numba import cuda, float32

    from utilities.machinery import launch

    @cuda.jit
    def scaled_plus(x, y, alpha, plane, out):
        smem = cuda.shared.array(0, dtype=np.float32)
        i, j = cuda.blockIdx.x, cuda.threadIdx.x
        smem[j] = alpha * float32(x[plane, i, j]) + y[i, j]
        smem[LAST - j] = smem[j] + float32(1)
        cuda.syncthreads()
        out[i, j] = smem[LAST - j]

    return cp, launch, scaled_plus


def operands(cp, rows=5, cols=96):
    rng = np.random.default_rng(7)
    x = cp.asarray(rng.standard_normal((3, rows, cols)).astype(np.float16))
    y = cp.asarray(rng.standard_normal((rows, cols)).astype(np.float32))
    return x, y, cp.full((rows, cols), np.nan, np.float32)


def expected(x, y, alpha, plane):
    return alpha * x[plane].get().astype(np.float32) + y.get() + np.float32(1)


def test_fast_launch_matches_the_reference_and_numba(env):
    cp, launch, kernel = env
    x, y, out = operands(cp)
    args = (x, y, np.float32(0.5), np.int64(2), out)
    launch.launch(kernel, (x.shape[1],), x.shape[2], SHARED, *args)
    np.testing.assert_array_equal(out.get(), expected(x, y, np.float32(0.5), 2))
    assert any(entry is not None for entry in launch._fast[kernel].values()), "the fast path was not used"

    via_numba = cp.full_like(out, np.nan)
    launch.allow_shared_memory(kernel, SHARED, x, y, np.float32(0.5), np.int64(2), via_numba)
    kernel[(x.shape[1],), x.shape[2], 0, SHARED](x, y, np.float32(0.5), np.int64(2), via_numba)
    np.testing.assert_array_equal(out.get(), via_numba.get())


def test_second_call_and_new_values_reuse_the_entry(env):
    cp, launch, kernel = env
    x, y, out = operands(cp)
    launch.launch(kernel, (x.shape[1],), x.shape[2], SHARED, x, y, np.float32(2.0), np.int64(0), out)
    entries = len(launch._fast[kernel])
    x2, y2, out2 = operands(cp, rows=7, cols=64)  # same types, other shapes: same compiled kernel
    launch.launch(kernel, (x2.shape[1],), x2.shape[2], SHARED, x2, y2, np.float32(-1.0), np.int64(1), out2)
    assert len(launch._fast[kernel]) == entries
    np.testing.assert_array_equal(out2.get(), expected(x2, y2, np.float32(-1.0), 1))


def test_python_scalars_fall_back_to_numba(env):
    cp, launch, kernel = env
    x, y, out = operands(cp)
    launch.launch(kernel, (x.shape[1],), x.shape[2], SHARED, x, y, 0.25, 1, out)  # Python float and int
    np.testing.assert_allclose(out.get(), expected(x, y, np.float32(0.25), 1), rtol=1e-6)

"""Developer tool: how long a benchmark sees a small numba kernel take, launched by numba and by ``launch``.

Run on a GPU: ``python tools/launch_overhead.py``. Prints GPU-event medians (cupyx.profiler.benchmark), which
include any host time spent between the events, for a kernel with six array arguments and 64 KiB of dynamic
shared memory.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHARED = 64 * 1024


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    import cupy as cp  # after the arguments: --help needs no GPU
    import numpy as np
    from cupyx.profiler import benchmark
    from numba import cuda

    from utilities.machinery import launch

    @cuda.jit
    def six_arrays(a, b, c, d, e, out, alpha):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = alpha * (a[i] + b[i] + c[i] + d[i] + e[i])

    n = 1 << 16
    arrays = [cp.ones(n, cp.float32) for _ in range(6)]
    args = (*arrays, np.float32(2.0))
    grid, block = n // 256, 256

    def numba_launch() -> None:
        launch.allow_shared_memory(six_arrays, SHARED, *args)  # what launch() did per call before the fast path
        six_arrays[grid, block, 0, SHARED](*args)

    def fast_launch() -> None:
        launch.launch(six_arrays, grid, block, SHARED, *args)

    for name, fn in (("numba dispatcher", numba_launch), ("utilities.machinery.launch", fast_launch)):
        fn()
        cp.cuda.Device().synchronize()
        result = benchmark(fn, n_repeat=200, n_warmup=20)
        gpu_us = float(np.median(result.gpu_times)) * 1e6
        cpu_us = float(np.median(result.cpu_times)) * 1e6
        print(f"{name:22s} GPU events {gpu_us:8.1f} us   host {cpu_us:8.1f} us")
    assert float(arrays[-1][0]) == 10.0, "wrong result"


if __name__ == "__main__":
    main()

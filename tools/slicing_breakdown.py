"""Developer tool: where the Ozaki-I slicing time goes, kernel by kernel, against the memory floor.

Run on a GPU: ``python tools/slicing_breakdown.py [--size 8192] [--slices 7]``. Launches the plain numba
kernels of ``utilities.ozaki.kernels`` the way ``OzakiGemm.slice`` does (no cuBLASDx build needed) and prints,
for each, the GPU-event median (cupyx.profiler.benchmark), the bytes it must move and the bandwidth achieved.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import cupy as cp
from cupyx.profiler import benchmark

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from utilities import inputs  # noqa: E402
from utilities.gpu import launch  # noqa: E402
from utilities.ozaki import kernels as plain  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--slices", type=int, default=7)
    args = parser.parse_args()
    n = m = k = args.size
    S, kp = args.slices, -(-args.size // 128) * 128
    a, b = cp.asarray(inputs.exponent_spread(m, k, 1.0, 1)), cp.asarray(inputs.exponent_spread(k, n, 1.0, 2))
    a_words, b_words = cp.zeros((S, m, kp // 4), cp.int32), cp.zeros((S, n, kp // 4), cp.int32)
    e, f = cp.zeros(m, cp.int32), cp.zeros(n, cp.int32)
    mu, bad = cp.zeros(n, cp.float64), cp.zeros(n, cp.int32)
    threads, (tile, depth) = plain.ROWS_THREADS, plain.COLS_BLOCK
    rows = plain.make_slice_rows_kernel(k, kp, S, threads)
    col_max, cols = plain.make_col_max_kernel(), plain.make_slice_cols_kernel(S, tile, depth)
    stages = {
        "slice_rows (A)": (lambda: launch.launch(rows, m, threads, 0, a, a_words, e), 8 * m * k + S * m * kp),
        "col_max (B)": (lambda: launch.launch(col_max, (-(-n // 256), -(-k // 256)), 256, 0, b, mu, bad), 8 * k * n),
        "shifts_from_max": (  # also zeroes the maxima for the next col_max
            lambda: launch.launch(plain.shifts_from_max_kernel, -(-n // 256), 256, 0, mu, bad, f),
            24 * n,
        ),
        "slice_cols (B)": (
            lambda: launch.launch(cols, (-(-n // tile), kp // (4 * tile)), (tile, depth), 0, b, f, b_words),
            8 * k * n + S * n * kp,
        ),
    }

    def everything() -> None:
        for fn, _ in stages.values():
            fn()

    print(f"slicing both {args.size}^2 operands into {S} slices (GPU-event medians)")
    print(f"{'stage':<18} {'ms':>8} {'GB moved':>9} {'TB/s':>6}")
    total = sum(nbytes for _, nbytes in stages.values())
    for name, (fn, nbytes) in [*stages.items(), ("all (as a plan)", (everything, total))]:
        ms = float(cp.median(cp.asarray(benchmark(fn, n_repeat=20, n_warmup=3).gpu_times[0]))) * 1e3
        print(f"{name:<18} {ms:8.3f} {nbytes / 1e9:9.3f} {nbytes / ms / 1e9:6.2f}")


if __name__ == "__main__":
    main()

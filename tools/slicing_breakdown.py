"""Developer tool: where the Ozaki-I slicing time goes, kernel by kernel, against the memory floor.

Run on a GPU: ``python tools/slicing_breakdown.py [--size 8192] [--slices 7]``. Launches the plain numba
kernels of ``utilities.ozaki.simt.slicing_launches``, as ``OzakiGemm.slice`` does (no cuBLASDx build needed),
and prints, for each, the GPU-event median (cupyx.profiler.benchmark), the bytes it must move and the bandwidth
achieved.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--slices", type=int, default=7)
    args = parser.parse_args()
    import cupy as cp  # after the arguments: --help needs no GPU
    from cupyx.profiler import benchmark

    from utilities import inputs
    from utilities.machinery import launch
    from utilities.ozaki import simt as plain

    n = m = k = args.size
    S, kp = args.slices, -(-args.size // 128) * 128
    a, b = cp.asarray(inputs.exponent_spread(m, k, 1.0, 1)), cp.asarray(inputs.exponent_spread(k, n, 1.0, 2))
    a_words, b_words = cp.zeros((S, m, kp // 4), cp.int32), cp.zeros((S, n, kp // 4), cp.int32)
    e, f = cp.zeros(m, cp.int32), cp.zeros(n, cp.int32)
    mu, bad = cp.zeros(n, cp.float64), cp.zeros(n, cp.int32)
    launch_args = ((a, a_words, e), (b, mu, bad), (mu, bad, f), (b, f, b_words))
    moved = {  # what each must move: FP64 in, int8 slices out (shifts_from_max: mu, bad and f, 24 bytes a column)
        "slice_rows": 8 * m * k + S * m * kp,
        "col_max": 8 * k * n,
        "shifts_from_max": 24 * n,
        "slice_cols": 8 * k * n + S * n * kp,
    }

    def run(step: Any, step_args: tuple) -> Callable[[], None]:
        def one_launch() -> None:  # a named function: cupyx's benchmark reports its __name__
            launch.launch(step.kernel, step.grid, step.block, 0, *step_args)

        return one_launch

    steps = zip(plain.slicing_launches(m, n, k, kp, S), launch_args, strict=True)
    stages = {step.name: (run(step, step_args), moved[step.name]) for step, step_args in steps}

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

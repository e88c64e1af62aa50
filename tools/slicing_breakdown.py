"""Developer tool: where the Ozaki-I slicing time goes, kernel by kernel, against the memory floor.

Run on a GPU: ``python tools/slicing_breakdown.py [--size 8192] [--slices 7]``. Launches the plain numba
kernels of the plan's slicing (``utilities.ozaki.simt.SimtPlan.slicing_steps``: the plan's own buffers and grids,
as ``OzakiGemm.slice`` runs them; no cuBLASDx build needed), and prints, for each, the GPU-event median
(cupyx.profiler.benchmark), the bytes it must move and the bandwidth achieved.
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
    S = args.slices
    a, b = cp.asarray(inputs.exponent_spread(m, k, 1.0, 1)), cp.asarray(inputs.exponent_spread(k, n, 1.0, 2))
    plan = plain.SimtPlan(m, n, k, S, "fused", xp=cp)  # the plan's own buffers and launches (OzakiGemm's host side)
    kp = plan.kp
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

    stages = {step.name: (run(step, step_args), moved[step.name]) for step, step_args in plan.slicing_steps(a, b)}

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

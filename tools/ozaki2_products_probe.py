"""Developer tool (issue 43): is Ozaki-II's products stage slower than its floor, or is the floor measured too fast?

Run on a GPU: ``python tools/ozaki2_products_probe.py [--size 16384] [--count 15] [--repeats 3] [--json OUT]``.

The report's floor for the products is ``count`` times one ``cublas.igemm`` on random int8 operands, timed a few
calls at a time. The stage itself runs ``count`` of them back to back, about 110 ms at 16384^3, long enough for the
GPU's clock to settle lower under the tensor cores' power. This tool times, in one process:

- one ``igemm`` (the report's floor, divided by nothing);
- ``count`` ``igemm`` back to back on the same operands, into ``count`` int32 planes (the stage's work, with none of
  its own code), timed as one call;
- the plan's own products stage (``Ozaki2Gemm(..., digits="late").products``, on the residues of normal inputs);
- one ``igemm`` again, right after the long runs.

Each with the SM clock and power that ``nvidia-smi`` sampled while it ran (every 20 ms, in a second process).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
SAMPLE = ["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits", "-lms", "20"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=16384, help="m = n = k (default 16384)")
    parser.add_argument("--count", type=int, default=15, help="moduli (default 15)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    import cupy as cp
    import numpy as np

    from utilities import bench, cublas, inputs
    from utilities.ozaki2.tensorcore import Ozaki2Gemm

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from ozaki2_scaling_probe import report_head

    size, count = args.size, args.count
    rng = np.random.default_rng(0)
    a8 = cp.asarray(rng.integers(-128, 128, (size, size), dtype=np.int8))
    b8 = cp.asarray(rng.integers(-128, 128, (size, size), dtype=np.int8))
    planes = cp.empty((count, size, size), cp.int32)

    def many() -> None:
        for t in range(count):
            cublas.igemm(a8, b8, out=planes[t])

    a, b = cp.asarray(inputs.normal(size, size, 0)), cp.asarray(inputs.normal(size, size, 1))
    plan = Ozaki2Gemm(size, size, size, count, digits="late")
    plan(a, b, out=cp.empty((size, size)))  # scaled once: the planes hold this A's and B's residues
    one = cublas.igemm_provider(a8, b8)
    runs = {
        "one igemm (the report's floor)": (one, 1),
        f"{count} igemm back to back": (many, count),
        "the plan's products stage": (plan.products, count),
        "one igemm, after the long runs": (one, 1),
    }
    rows: list[dict] = []
    for name, (fn, gemms) in runs.items():
        sampler = subprocess.Popen(SAMPLE, stdout=subprocess.PIPE, text=True)  # this run's clock and power
        record = bench.bench(fn, m=size, n=size, k=size, name=name, repeats=args.repeats)
        sampler.terminate()
        samples = [line.split(",") for line in sampler.communicate()[0].splitlines() if line.count(",") == 1]
        ms = record.time.median
        row = {"run": name, "ms": ms, "ms_per_gemm": ms / gemms, "tops": 2.0 * gemms * size**3 / ms / 1e9}
        if samples:
            row["sm_mhz_median"] = float(np.median([float(c) for c, _ in samples]))
            row["power_w_median"] = float(np.median([float(w) for _, w in samples]))
        rows.append(row)
    print(f"{size}^3, {count} moduli, median of {args.repeats}")
    print(f"{'run':<34} {'ms':>9} {'ms a GEMM':>10} {'TOPS':>7} {'SM MHz':>7} {'W':>6}")
    for r in rows:
        print(
            f"{r['run']:<34} {r['ms']:9.3f} {r['ms_per_gemm']:10.3f} {r['tops']:7.0f} "
            f"{r.get('sm_mhz_median', float('nan')):7.0f} {r.get('power_w_median', float('nan')):6.0f}"
        )
    if args.json:
        report = {**report_head("ozaki2_products_probe.py"), "size": size, "count": count, "rows": rows}
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()

"""Developer tool (issue 43): Ozaki-II with its products and reconstruction in row panels, beside one panel.

Run on a GPU: ``python tools/ozaki2_panels_probe.py [--size 8192] [--panels 1,2,4,8] [--repeats 5] [--json OUT]``.

``Ozaki2Gemm(..., digits="late", panels=P)`` runs each panel's GEMMs, then that panel's reconstruction on a second
stream beside the next panel's GEMMs, so that all but the last panel's reconstruction hide under the GEMMs. This
tool makes one automatic plan for each count of panels, checks that every one gives the C of one panel bit for bit,
then times them interleaved with cuBLAS DGEMM (``bench.compare``): the whole call, and the products and the
reconstruction alone (each panel after the other, on one stream).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=8192, help="m = n = k (default 8192)")
    parser.add_argument("--panels", default="1,2,4,8", help="counts of row panels, comma-separated (1 first)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    counts = [int(p) for p in args.panels.split(",")]
    if counts[0] != 1:
        parser.error("--panels must start with 1: the others are checked against it")
    import cupy as cp

    from utilities import bench, cublas, inputs
    from utilities.ozaki2.tensorcore import Ozaki2Gemm

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from ozaki2_scaling_probe import report_head

    size = args.size
    a, b = cp.asarray(inputs.normal(size, size, 0)), cp.asarray(inputs.normal(size, size, 1))
    plans = {p: Ozaki2Gemm(size, size, size, "auto", digits="late", panels=p) for p in counts}
    first = plans[1](a, b)
    same = {}
    for p, plan in plans.items():
        c = plan(a, b)
        same[p] = bool(cp.array_equal(c, first))
        del c
    out = cp.empty_like(first)
    providers = {"cublas.dgemm": cublas.dgemm_provider(a, b)}
    providers |= {f"ozaki2.auto, {p} panels": (lambda plan=plan: plan(a, b, out=out)) for p, plan in plans.items()}
    records = bench.compare(providers, m=size, n=size, k=size, repeats=args.repeats, show=False)
    dgemm = next(r.time.median for r in records if r.name == "cublas.dgemm")
    rows = [{"run": r.name, "ms": r.time.median, "q20": r.time.q20, "q80": r.time.q80} for r in records]
    for p, plan in plans.items():  # the stages alone, each panel after the other on one stream
        alone = {
            "products": plan.products,
            "reconstruct": lambda plan=plan: plan.reconstruct(a, b, out, out, 1.0, 0.0),
        }
        for stage, fn in alone.items():
            record = bench.bench(fn, m=size, n=size, k=size, repeats=args.repeats)
            rows.append({"run": f"{stage} alone, {p} panels", "ms": record.time.median})
    print(f"{size}^3, moduli chosen: {plans[1].count}; C the same as one panel's: {same}")
    print(f"{'run':<36} {'ms':>9} {'x DGEMM speed':>14}")
    for r in rows:
        speed = f"{dgemm / r['ms']:14.2f}" if r["run"].startswith("ozaki2.auto") else ""
        print(f"{r['run']:<36} {r['ms']:9.3f} {speed}")
    if args.json:
        report = {**report_head("ozaki2_panels_probe.py"), "size": size, "same_c": same, "rows": rows}
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    if not all(same.values()):
        sys.exit("a count of panels gave another C than one panel's")


if __name__ == "__main__":
    main()

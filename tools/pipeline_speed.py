"""A shape-generic device pipeline against nvmath's shape-specific one, at one shape: the same bits, and the speed.

Both pipelines feed the same kernel (the fully fused Ozaki-I, or track 1's pipelined int8 GEMM), built once for
each pipeline type in this process; the outputs on fixed inputs must be bit for bit equal, and the two plans are
timed interleaved (``utilities.bench.compare``). Usage (GPU machine)::

    python tools/pipeline_speed.py --kernel fused --shape 8192x8192x8192

Prints the table, then one JSON line: the kernel, the shape, whether the bits agree, and each median in ms.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from typing import Any


def _plans(kernel: str, m: int, n: int, k: int) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """(shape-specific run, shape-generic run): each a zero-argument call that returns its output."""
    import cupy as cp

    from utilities import inputs
    from utilities.machinery import pipelines

    def built(make: Callable[[], Any], generic: bool) -> Any:
        os.environ[pipelines.SWITCH] = "on" if generic else "off"
        try:
            return make()
        finally:
            os.environ.pop(pipelines.SWITCH, None)

    if kernel == "fused":
        from utilities.ozaki.tensorcore import OzakiGemm

        a = cp.asarray(inputs.exponent_spread(m, k, 1.0, 1))
        b = cp.asarray(inputs.exponent_spread(k, n, 1.0, 2))
        runs = []
        for generic in (False, True):
            plan, out = built(lambda: OzakiGemm(m, n, k, 7, "fused"), generic), cp.empty((m, n))
            runs.append(lambda plan=plan, out=out: plan(a, b, out=out))
        return runs[0], runs[1]
    from utilities.multipass.benchmarks import random_operands
    from utilities.multipass.tensorcore import PipelineGemm

    a, bt = random_operands(m, n, k, "int8")
    plans = [built(lambda: PipelineGemm(a, bt, "int8"), generic) for generic in (False, True)]
    outs = [cp.empty((m, n), cp.int32) for _ in plans]
    return (lambda: plans[0](outs[0])), (lambda: plans[1](outs[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel", choices=["fused", "pipeline-int8"], default="fused")
    parser.add_argument("--shape", default="8192x8192x8192")
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    import cupy as cp

    from utilities import bench
    from utilities.machinery import buildcache

    buildcache.install(quiet=True)
    m, n, k = (int(x) for x in args.shape.split("x"))
    specific, generic = _plans(args.kernel, m, n, k)
    same = bool(cp.array_equal(specific(), generic()))
    records = bench.compare(
        {"shape-specific": specific, "shape-generic": generic},
        m=m,
        n=n,
        k=k,
        flops=2.0 * m * n * k,
        repeats=args.repeats,
    )
    medians = {r.name: r.time.median for r in records}
    ratio = medians["shape-generic"] / medians["shape-specific"]
    print(
        json.dumps(
            {
                "kernel": args.kernel,
                "shape": args.shape,
                "same_bits": same,
                "median_ms": medians,
                "generic_over_specific": round(ratio, 4),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()

"""Measure the four build times of issue 3 for the fully fused Ozaki-I kernel, with and without the build cache.

Each figure is the wall time from nothing to a finished first launch (build, link, load, run, synchronize):

- first: a fresh process, empty cache;
- edit: the same process, the kernel's source edited (same tile configuration, same libmathdx functions);
- new_shape: the same process, a problem shape it has not built (a new DevicePipeline type);
- warm_restart: a fresh process, the cache left by the first one (a notebook restart).

Usage (GPU machine): ``python tools/build_times.py --mode after --cache DIR`` prints one JSON line; ``--mode
before`` runs with the cache off; ``--restart`` measures only the first build (for the warm restart).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import time


def _timed(fn) -> float:
    import cupy as cp

    start = time.perf_counter()
    fn()
    cp.cuda.Device().synchronize()
    return round(time.perf_counter() - start, 2)


def run_plan(shape: tuple[int, int, int], slices: int) -> None:
    import cupy as cp

    from utilities.gpu.ozaki import OzakiGemm

    m, n, k = shape
    OzakiGemm(m, n, k, slices, "fused")(cp.ones((m, k)), cp.ones((k, n)))


def edited_fused_factory():
    """``make_fused_kernel`` with one line of its body changed, as an attendee's edit would."""
    from utilities.gpu import ozaki

    source = inspect.getsource(ozaki.make_fused_kernel.__wrapped__)
    edited = source.replace("weight = math.ldexp(1.0, -8 * d)", "weight = math.ldexp(2.0, -8 * d - 1)")
    assert edited != source, "the line to edit is gone: update tools/build_times.py"
    namespace = dict(vars(ozaki))
    exec(compile(edited, "<edited kernel>", "exec"), namespace)
    return namespace["make_fused_kernel"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=["before", "after"], required=True)
    parser.add_argument("--cache", default=None)
    parser.add_argument("--restart", action="store_true")
    parser.add_argument("--shape", default="2048x2048x2048")
    parser.add_argument("--new-shape", default="4096x4096x4096")
    parser.add_argument("--slices", type=int, default=7)
    args = parser.parse_args()
    os.environ["COURSE_BUILD_CACHE"] = "off" if args.mode == "before" else args.cache
    from utilities import buildcache

    buildcache.install()
    shape = tuple(int(x) for x in args.shape.split("x"))
    new_shape = tuple(int(x) for x in args.new_shape.split("x"))
    result = {"mode": args.mode, "restart": args.restart, "shape": args.shape}
    result["first_s"] = _timed(lambda: run_plan(shape, args.slices))
    if not args.restart:
        from utilities.gpu import ozaki

        ozaki.make_fused_kernel = edited_fused_factory()  # the plan picks the edited kernel up
        result["edit_s"] = _timed(lambda: run_plan(shape, args.slices))
        result["new_shape_s"] = _timed(lambda: run_plan(new_shape, args.slices))
    stats = buildcache.stats()
    result["cache"] = stats.summary() if stats else "off"
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()

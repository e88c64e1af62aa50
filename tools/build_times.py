"""Measure the four build times of issue 3 for the fully fused Ozaki-I kernel, with and without the build cache.

Each figure is the wall time from nothing to a finished first launch (build, link, load, run, synchronize):

- first: a fresh process, empty cache;
- edit: the same process, the kernel's source edited (same tile configuration, same libmathdx functions);
- new_shape: the same process, a problem shape it has not run (with shape-generic pipelines, no new build);
- warm_restart: a fresh process, the cache left by the first one (a notebook restart).

Each build also runs the kernel on fixed random inputs and records the SHA-256 of its output, so that the suite
can check that a kernel built through the cache (generated in worker processes, or served from disk) computes
bit for bit what the normal build computes.

Usage (GPU machine): ``python tools/build_times.py --mode after --cache DIR`` prints one JSON line; ``--mode
before`` runs with the cache off; ``--restart`` measures only the first build (for the warm restart).
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import os
import time
from collections.abc import Callable
from typing import Any


def _timed(fn, digests: dict[str, str], name: str) -> tuple[float, Callable[[], dict[str, Any]]]:
    """Seconds from nothing to a finished run of ``fn`` (build included), and the run's check, for afterwards.

    The output's digest goes to ``digests``.
    """
    import cupy as cp

    start = time.perf_counter()
    out, check = fn()
    cp.cuda.Device().synchronize()
    seconds = round(time.perf_counter() - start, 2)
    digests[name] = hashlib.sha256(cp.asnumpy(out).tobytes()).hexdigest()
    return seconds, check


def run_plan(shape: tuple[int, int, int], slices: int) -> tuple[Any, Callable[[], dict[str, Any]]]:
    """Build and run the fused plan on fixed inputs: its output, and a check of this run to call after the timing.

    The check compares the slices bit for bit with the NumPy reference, and C with cuBLAS DGEMM. It keeps the
    plan's buffers, not the plan: the plan is freed as before, inside the timing (nvmath builds a kernel to
    destroy its pipeline then).
    """
    import cupy as cp
    import numpy as np

    from utilities import inputs, ozaki
    from utilities.ozaki.tensorcore import OzakiGemm

    m, n, k = shape
    a_h, b_h = inputs.exponent_spread(m, k, 1.0, 11), inputs.exponent_spread(k, n, 1.0, 12)
    a, b = cp.asarray(a_h), cp.asarray(b_h)
    plan = OzakiGemm(m, n, k, slices, "fused")
    out = plan(a, b)
    kept = {"a": plan.a_slices, "b": plan.b_slices, "e": plan.e, "f": plan.f}

    def check() -> dict[str, Any]:
        a_slices, e = ozaki.slice_rows(a_h, slices)
        b_slices, f = ozaki.slice_cols(b_h, slices)
        got = {name: cp.asnumpy(x) for name, x in kept.items()}
        exact = (
            np.array_equal(got["a"][:slices, :m, :k], a_slices)
            and np.array_equal(got["b"][:slices, :n, :k], b_slices)
            and np.array_equal(got["e"][:m], e)
            and np.array_equal(got["f"][:n], f)
        )
        dgemm = a @ b
        error = float(cp.linalg.norm(out - dgemm) / cp.linalg.norm(dgemm))
        return {"slices_exact": bool(exact), "normwise_vs_dgemm": error}

    return out, check


def edited_fused_factory():
    """``make_fused_kernel`` with one line of its body changed, as an attendee's edit would."""
    from utilities.ozaki import tensorcore as ozaki

    source = inspect.getsource(ozaki.make_fused_kernel.__wrapped__)
    edited = source.replace("weight = math.ldexp(1.0, -8 * d)", "weight = math.ldexp(2.0, -8 * d - 1)")
    assert edited != source, "the line to edit is gone: update tools/build_times.py"
    namespace = dict(vars(ozaki))
    exec(compile(edited, "<edited kernel>", "exec"), namespace)
    return namespace["make_fused_kernel"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["before", "after"], required=True)
    parser.add_argument("--cache", default=None)
    parser.add_argument("--restart", action="store_true")
    parser.add_argument("--shape", default="2048x2048x2048")
    parser.add_argument("--new-shape", default="4096x4096x4096")
    parser.add_argument("--slices", type=int, default=7)
    parser.add_argument("--profile-edit", default="", help="write a cProfile of the edit build to this file")
    args = parser.parse_args()
    os.environ["COURSE_BUILD_CACHE"] = "off" if args.mode == "before" else args.cache
    from utilities.machinery import buildcache

    buildcache.install()
    shape = tuple(int(x) for x in args.shape.split("x"))
    new_shape = tuple(int(x) for x in args.new_shape.split("x"))
    result = {"mode": args.mode, "restart": args.restart, "shape": args.shape}
    digests: dict[str, str] = {}
    result["first_s"], check = _timed(lambda: run_plan(shape, args.slices), digests, "first")
    result["first_breakdown_s"] = buildcache.seconds()  # where the first build blocked (with the cache only)
    result["checks"] = check()
    if not args.restart:
        from utilities.ozaki import tensorcore as ozaki

        ozaki.make_fused_kernel = edited_fused_factory()  # the plan picks the edited kernel up
        before = buildcache.seconds()
        import cProfile
        import pstats

        profiler = cProfile.Profile() if args.profile_edit else None
        call = profiler.runcall if profiler else lambda fn, *a: fn(*a)
        result["edit_s"], _ = _timed(lambda: call(run_plan, shape, args.slices), digests, "edit")
        result["edit_breakdown_s"] = {k: round(v - before.get(k, 0.0), 1) for k, v in buildcache.seconds().items()}
        if args.profile_edit:
            with open(args.profile_edit, "w") as out:
                pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(40)
        result["new_shape_s"], _ = _timed(lambda: run_plan(new_shape, args.slices), digests, "new_shape")
    stats = buildcache.stats()
    result["cache"] = stats.summary() if stats else "off"
    result["workers"] = buildcache.workers()
    result["output_sha256"] = digests
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()

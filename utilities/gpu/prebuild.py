"""Build the course's kernels ahead of a session, in parallel processes, into the on-disk build cache.

libmathdx generates code in one thread per process, so a 16-core GPU host builds several kernels at once
only from several processes. An instructor runs this once before a workshop; attendees' notebooks then find
every kernel in the cache (see ``utilities.buildcache``)::

    python -m utilities.gpu.prebuild                      # what the course's notebooks and tests use
    python -m utilities.gpu.prebuild --jobs fused:2048x2048x2048,partial:8192x8192x8192
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time


def build_one(variant: str, shapes: list[tuple[int, int, int]], slices: int) -> None:
    import cupy as cp

    from utilities import buildcache

    buildcache.install()
    from utilities.gpu.ozaki import OzakiGemm

    for m, n, k in shapes:
        start = time.perf_counter()
        plan = OzakiGemm(m, n, k, slices, variant)
        plan(cp.zeros((m, k)), cp.zeros((k, n)))
        cp.cuda.Device().synchronize()
        print(f"prebuild: ozaki.{variant} {m}x{n}x{k}: {time.perf_counter() - start:.1f} s", flush=True)
        del plan
        cp.get_default_memory_pool().free_all_blocks()


# (variant, shape) pairs that the notebooks, the tests and the GPU report build
COURSE_JOBS = (
    "unfused:256x256x384,partial:256x256x384,fused:256x256x384,unfused:8192x8192x8192,partial:8192x8192x8192,"
    "fused:8192x8192x8192,fused:2048x2048x2048,fused:4096x4096x4096"
)


def parse_shape(text: str) -> tuple[int, int, int]:
    m, n, k = (int(x) for x in text.lower().split("x"))
    return m, n, k


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default=COURSE_JOBS, help="comma-separated variant:MxNxK pairs, one process each")
    parser.add_argument("--slices", type=int, default=7)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # worker mode
    args = parser.parse_args(argv)
    jobs = [job.split(":") for job in args.jobs.split(",")]
    if args.one:
        ((variant, shape),) = jobs
        build_one(variant, [parse_shape(shape)], args.slices)
        return 0
    start = time.perf_counter()
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "utilities.gpu.prebuild",
                "--one",
                "--jobs",
                f"{v}:{s}",
                "--slices",
                str(args.slices),
            ]
        )
        for v, s in jobs
    ]
    failed = [f"{v}:{s}" for (v, s), w in zip(jobs, workers, strict=True) if w.wait() != 0]
    print(f"prebuild: {len(jobs) - len(failed)} of {len(jobs)} builds in {time.perf_counter() - start:.0f} s"
          + (f"; failed: {', '.join(failed)}" if failed else ""))  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

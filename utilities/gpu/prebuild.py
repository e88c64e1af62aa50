"""Build the course's kernels ahead of a session, in parallel processes, into the on-disk build cache.

libmathdx generates code in one thread per process, so a 16-core GPU host builds several kernels at once
only from several processes. An instructor runs this once before a workshop; attendees' notebooks then find
every kernel in the cache (see ``utilities.buildcache``)::

    python -m utilities.gpu.prebuild --variants unfused,partial,fused --shapes 256x256x384,8192x8192x8192
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


def parse_shape(text: str) -> tuple[int, int, int]:
    m, n, k = (int(x) for x in text.lower().split("x"))
    return m, n, k


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="unfused,partial,fused")
    parser.add_argument("--shapes", default="256x256x384")
    parser.add_argument("--slices", type=int, default=7)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # worker mode
    args = parser.parse_args(argv)
    shapes = [parse_shape(s) for s in args.shapes.split(",")]
    variants = args.variants.split(",")
    if args.one:
        build_one(variants[0], shapes, args.slices)
        return 0
    start = time.perf_counter()
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "utilities.gpu.prebuild",
                "--one",
                "--variants",
                v,
                "--shapes",
                args.shapes,
                "--slices",
                str(args.slices),
            ]
        )  # fmt: skip
        for v in variants
    ]
    failed = [v for v, w in zip(variants, workers, strict=True) if w.wait() != 0]
    print(f"prebuild: {len(variants) - len(failed)} of {len(variants)} variants in {time.perf_counter() - start:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

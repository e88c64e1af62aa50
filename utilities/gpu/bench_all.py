"""Every benchmark of the GPU report, at the report's sizes: ``python -m utilities.gpu.bench_all --sizes 8192``."""

from __future__ import annotations

import argparse

from utilities import buildcache


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="2048,4096,8192")
    parser.add_argument("--slices", type=int, default=7)
    parser.add_argument("--tracks", default="ozaki")
    parser.add_argument("--plots", default="", help="folder for the PNG figures (none if empty)")
    args = parser.parse_args(argv)
    buildcache.install()
    sizes = [int(s) for s in args.sizes.split(",")]
    if "ozaki" in args.tracks:
        from utilities.gpu.ozaki_bench import ozaki_benchmarks

        for size in sizes:
            ozaki_benchmarks(
                size, args.slices, variants=("unfused", "partial", "fused") if size == max(sizes) else ("fused",)
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

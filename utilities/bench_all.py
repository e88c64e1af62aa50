"""Every benchmark of the GPU report, at the report's sizes: ``python -m utilities.bench_all --sizes 8192``."""

from __future__ import annotations

import argparse

from .machinery import buildcache


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="2048,4096,8192")
    parser.add_argument("--slices", type=int, default=7)
    parser.add_argument("--tracks", default="ozaki,ozaki2,fusion,conv,multipass")
    parser.add_argument("--plots", default="", help="folder for the PNG figures (none if empty)")
    parser.add_argument("--accuracy", choices=["yes", "no", "only"], default="yes", help="accuracy sweeps (2048^3)")
    args = parser.parse_args(argv)
    buildcache.install()
    sizes = [int(s) for s in args.sizes.split(",")]
    if "ozaki" in args.tracks.split(","):
        from .ozaki.benchmarks import accuracy_records, ozaki_benchmarks
        from .ozaki.figures import save_plots

        records = []
        for size in sizes if args.accuracy != "only" else []:
            variants = ("unfused", "partial", "fused") if size == max(sizes) else ("fused",)
            records += ozaki_benchmarks(size, args.slices, variants=variants)
        if args.accuracy != "no":
            records += accuracy_records()
        if args.plots and args.accuracy != "only":
            print("plots:", ", ".join(save_plots(records, args.plots)))
    if "ozaki2" in args.tracks.split(","):
        from .emulations import ozaki1_auto, ozaki1_fused
        from .ozaki2.benchmarks import accuracy_records as accuracy2
        from .ozaki2.benchmarks import ozaki2_records

        for size in sizes if args.accuracy != "only" else []:
            ozaki2_records(size, ozaki1=ozaki1_fused(args.slices), ozaki1_auto=ozaki1_auto())
        if args.accuracy != "no":
            accuracy2(ozaki1_auto=ozaki1_auto())
    if "multipass" in args.tracks.split(","):
        from .multipass.benchmarks import multipass_records
        from .multipass.figures import save_plots as save_multipass_plots

        records = multipass_records(sizes=(max(sizes),))
        if args.plots:
            print("plots:", ", ".join(save_multipass_plots(records, args.plots)))
    if "fusion" in args.tracks.split(","):
        from .fusion.benchmarks import fusion_records
        from .fusion.figures import save_plots as save_fusion_plots
        from .peaks import current_hbm_tbs

        records = fusion_records()
        if args.plots:
            print("plots:", ", ".join(save_fusion_plots(records, args.plots, current_hbm_tbs())))
    if "conv" in args.tracks.split(","):
        from .conv.benchmarks import conv_benchmarks
        from .conv.figures import save_plots as save_conv_plots

        records = conv_benchmarks()
        if args.plots:
            print("plots:", ", ".join(save_conv_plots(records, args.plots)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

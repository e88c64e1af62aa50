"""Developer tool (issue 44, item 1): the tensor-copy 3x3 kernel on a GPU, checked, then timed beside conv.fused.

Run on a GPU, after importing a bundle that holds the ``conv_tma`` jobs of ``prebuild.CONV_JOBS`` (else each
kernel builds: 60-200 s):

    source .whl/setup.sh && timeout 300 python3 tools/conv_tma_probe.py --json OUT.json [--diagnostics] [--triton]

1. Checks ``tensorcore_persistent.TmaConv`` with the course's checker (``conv.check.check_conv``: every case of
   ``reference.CONV_CASES``, random and adversarial) at the shapes of ``tests/test_conv_tma.py`` (tiles inside an
   image row, tiles of four whole rows, two column tiles), with one wave of blocks and with two blocks walking
   every tile; then at the target (8 x 512 x 512, 64 -> 64), random and large magnitudes, against the FP64
   reference on sampled pixels within its derived bound, as the speed run checks ``conv.fused``.
2. Times it (median of interleaved rounds: ``benchmarks.interleaved``, three operand sets) beside the pipelined
   ``conv.fused`` (``layout.speed_configs()[0]``) and cuDNN; with ``--diagnostics`` also both kernels' gathers
   alone and MMAs alone; with ``--triton`` the Triton peer (its autotuning takes minutes); with ``--tiles`` the
   tensor-copy kernel at other blocks too (each checked first).

Prints a table; ``--json`` writes ``{"gpu", "compilers", "shape", "checks", "rows", "ok"}``. Exits 1 when a check
fails (nothing is timed then), 3 when a launch has not finished after ``--hang`` seconds (a barrier whose bytes
never come).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def finish_or_exit(what: str, seconds: float) -> None:
    """Wait for the GPU's work so far; after ``seconds`` without it finishing, say so and end the process (3)."""
    import cupy as cp

    done = cp.cuda.Event()
    done.record()
    deadline = time.monotonic() + seconds
    while not done.done:
        if time.monotonic() > deadline:
            print(
                f"conv_tma_probe: {what} has not finished after {seconds:.0f} s: a barrier never completes?", flush=True
            )
            os._exit(3)
        time.sleep(0.005)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the result here")
    parser.add_argument("--repeats", type=int, default=10, help="interleaved rounds of timing")
    parser.add_argument("--diagnostics", action="store_true", help="also each kernel's gathers alone and MMAs alone")
    parser.add_argument("--triton", action="store_true", help="also the Triton peer (its autotuning: minutes)")
    parser.add_argument("--hang", type=float, default=30.0, help="seconds a launch may take once built")
    parser.add_argument(
        "--tiles",
        default="",
        help="more tiles of the tensor-copy kernel to check and time (PipeConfig or TmaConfig specs, commas; "
        "tma...-w: the filters by tensor copies too)",
    )
    args = parser.parse_args(argv)

    from utilities.preflight import PreflightError, preflight

    try:
        env = preflight(require_gpu=True, require_mathdx=True, quiet=True)
    except PreflightError as exc:
        print(f"conv_tma_probe: cannot run: {exc}", file=sys.stderr)
        return 2
    import cupy as cp
    import numpy as np

    from utilities import bench
    from utilities.machinery import buildcache

    buildcache.install()
    from utilities.checker import CheckFailure
    from utilities.conv import benchmarks, check, model
    from utilities.conv import reference as ref
    from utilities.conv.baselines import CudnnConv
    from utilities.conv.layout import TMA_PREFIX, TmaConfig, speed_configs
    from utilities.conv.tensorcore_persistent import PipelinedConv, TmaConv
    from utilities.report import compilers

    shape = benchmarks.TARGET
    cfg = speed_configs()[0]  # the gathering kernel's default block
    copies = TmaConfig.parse(TMA_PREFIX + cfg.spec)  # the same block, its A tiles by tensor copies
    more = [TmaConfig.parse(t if t.startswith(TMA_PREFIX) else TMA_PREFIX + t) for t in args.tiles.split(",") if t]
    result: dict[str, Any] = {
        "gpu": env.gpu.name,
        "compilers": compilers(),
        "shape": dataclasses.asdict(shape),
        "tile": cfg.spec,
        "checks": [],
        "rows": [],
        "ok": False,
    }

    def write() -> None:
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=1, default=str) + "\n")

    def runner(plan: Any) -> Any:
        def run(*host: Any) -> Any:
            s = plan.shape
            out = cp.full((s.batch, s.height, s.width, s.c_out), np.nan, cp.float16)
            plan(*(cp.asarray(v) for v in host), out=out)
            finish_or_exit(f"the kernel at {s.label}", args.hang)
            return cp.asnumpy(out)

        return run

    started = time.monotonic()
    try:
        for small in check.TMA_SHAPES:
            for blocks, seed in ((None, 31), (2, 38)):
                verdict = check.check_conv(runner(TmaConv(small, blocks=blocks)), shape=small, seed=seed)
                line = f"tma at {small.label}, blocks {blocks or 'one wave'}: {verdict.status}"
                result["checks"].append(line)
                print(line, flush=True)
                if not verdict:
                    raise CheckFailure("out", f"{line} ({verdict.why})")
        for tile in more:  # the checker's shape whose image rows hold whole tiles of every tile_m
            small = check.TMA_SHAPES[0]
            verdict = check.check_conv(runner(TmaConv(small, cfg=tile, blocks=2)), shape=small, seed=40)
            line = f"{tile.spec} at {small.label}, blocks 2: {verdict.status}"
            result["checks"].append(line)
            print(line, flush=True)
            if not verdict:
                raise CheckFailure("out", f"{line} ({verdict.why})")
        pixels = benchmarks.sample_pixels(shape, 0)
        inputs = {
            "random": tuple(cp.asnumpy(v) for v in benchmarks.conv_operands(shape, 0)),
            "large magnitudes": ref.conv_inputs(shape, "large magnitudes", 7).args(),
        }
        for tile in [copies, *more]:
            plan = TmaConv(shape, cfg=tile)
            for name, host in inputs.items():
                out = plan(*(cp.asarray(v) for v in host))
                finish_or_exit("the kernel at the target", args.hang)
                error = benchmarks._error(out, host, pixels, fused=True)
                line = f"{tile.spec} at the target, {name}: max |error| / bound {error['max_elementwise']:.3g}"
                result["checks"].append({"line": line, "error": error})
                print(line, flush=True)
                if not error["max_elementwise"] <= 1.0:
                    raise CheckFailure("out", f"{line}: beyond the FP64 reference's derived bound")
    except CheckFailure as exc:
        print(f"conv_tma_probe: CHECK FAILED: {exc}", file=sys.stderr)
        result["failure"] = str(exc)
        write()
        return 1
    except Exception as exc:  # a build or a launch that failed: nothing to time
        print(f"conv_tma_probe: the check could not run: {type(exc).__name__}: {exc}", file=sys.stderr)
        result["failure"] = f"{type(exc).__name__}: {exc}"
        write()
        raise
    print(f"checks passed in {time.monotonic() - started:.0f} s (builds included)", flush=True)

    sets = [
        benchmarks.conv_operands(shape, i) for i in range(bench.copies_for(model.conv_traffic("fused", shape).bytes))
    ]
    outs = [cp.empty((shape.batch, shape.height, shape.width, shape.c_out), cp.float16) for _ in sets]
    plans: dict[str, Any] = {
        copies.spec: TmaConv(shape, cfg=copies),
        f"fused@{cfg.spec}": PipelinedConv(shape, cfg=cfg),
    }
    for tile in more:
        plans[tile.spec] = TmaConv(shape, cfg=tile)
    if args.diagnostics:  # each part alone (wrong results: no error)
        for part in ("gather", "mma"):
            plans[f"{part}_only@{copies.spec}"] = TmaConv(shape, cfg=copies, parts=part)
            plans[f"fused_{part}_only@{cfg.spec}"] = PipelinedConv(shape, cfg=cfg, parts=part)
    paths = {n: [lambda p=p, s=s, o=o: p(*s, out=o) for s, o in zip(sets, outs, strict=True)] for n, p in plans.items()}
    host = tuple(cp.asnumpy(v) for v in sets[0])
    errors = {}
    for name, fns in paths.items():
        got = fns[0]()
        finish_or_exit(name, args.hang)
        errors[name] = None if "_only@" in name else benchmarks._error(got, host, pixels, fused=True)
    if CudnnConv.available() is None:
        cudnn = [CudnnConv(shape, s[1], s[2]) for s in sets]
        paths["cudnn"] = [lambda c=c, s=s: c(s[0]) for c, s in zip(cudnn, sets, strict=True)]
    else:
        print(f"conv_tma_probe: no cuDNN: {CudnnConv.available()}")
    if args.triton:
        from utilities.conv import triton_peer

        if triton_peer.available() is None:
            peer = triton_peer.TritonConv()
            paths["triton"] = [lambda s=s, o=o: peer(*s, o) for s, o in zip(sets, outs, strict=True)]
            paths["triton"][0]()  # autotunes
        else:
            print(f"conv_tma_probe: no Triton: {triton_peer.available()}")
    timings = benchmarks.interleaved(paths, args.repeats)
    flops = model.conv_traffic("fused", shape).flops
    print(f"\n{env.gpu.name}, {shape.label}, median of {args.repeats} interleaved rounds")
    print(f"{'path':<40} {'ms':>8} {'q20-q80':>15} {'TFLOP/s':>8} {'regs':>5} {'spill':>5} {'smem':>7} {'blk/SM':>6}")
    for name, t in timings.items():
        res = plans[name].resources if name in plans else {}
        row = {
            "name": name,
            "time_ms": t.to_dict(),
            "tflops": flops / (t.median * 1e-3) / 1e12,
            "error": errors.get(name),
            **{k: res[k] for k in benchmarks.RESOURCE_KEYS if k in res},
        }
        result["rows"].append(row)
        band = f"{t.q20:.4f}-{t.q80:.4f}"
        print(f"{name:<40} {t.median:8.4f} {band:>15} {row['tflops']:8.1f} {res.get('registers', ''):>5} "
              f"{res.get('spills', ''):>5} {res.get('smem', ''):>7} {res.get('blocks_per_sm', ''):>6}")  # fmt: skip
    result["ok"] = True
    write()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Build the course's kernels ahead of a session, in parallel processes, into the on-disk build cache.

libmathdx generates code in one thread per process, so a 16-core GPU host builds several kernels at once
only from several processes. An instructor runs this once before a workshop; attendees' notebooks then find
every kernel in the cache (see ``utilities.buildcache``)::

    python -m utilities.gpu.prebuild                      # what the course's notebooks and tests use
    python -m utilities.gpu.prebuild --jobs fused:2048x2048x2048,partial:8192x8192x8192
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor


def _ozaki(variant: str, shape: tuple[int, ...], slices: int) -> None:
    import cupy as cp

    from utilities.gpu.ozaki import OzakiGemm

    m, n, k = shape
    OzakiGemm(m, n, k, slices, variant)(cp.zeros((m, k)), cp.zeros((k, n)))


def _b2b(keep_d0: bool, shape: tuple[int, ...], block: tuple[int, ...] = (), persistent: bool = False) -> None:
    import cupy as cp

    from utilities.gpu.blockfusion import BackToBack, BlockConfig

    k0, n0, n1 = shape  # the kernel does not depend on M: one row-tile's worth builds it
    z = cp.zeros
    cfg = BlockConfig(**dict(zip(("tile_m", "threads", "depth"), block, strict=False))) if block else None
    plan = BackToBack(256, k0, n0, n1, keep_d0=keep_d0, cfg=cfg, persistent=persistent)
    plan(z((256, k0), cp.float16), z((k0, n0), cp.float16), z((n0, n1), cp.float16), z((256, n1), cp.float16))


def _b2b_pipelined(shape: tuple[int, ...], block: tuple[int, ...]) -> None:
    import cupy as cp

    from utilities.gpu.b2b_pipelined import PipelineConfig, PipelinedBackToBack

    nb, m, k0, n0, n1 = shape if len(shape) == 5 else (1, *shape)  # the pipeline's type carries the shapes of
    z = cp.zeros  # A0 and B0: one build per batch and M
    plan = PipelinedBackToBack(z((nb, m, k0), cp.float16), z((nb, k0, n0), cp.float16), n1, PipelineConfig(*block))
    plan(z((nb, n0, n1), cp.float16), z((nb, m, n1), cp.float16))


def _gemm_bias_relu(shape: tuple[int, ...]) -> None:
    import cupy as cp

    from utilities.gpu.blockfusion import GemmBiasRelu

    m, n, k = shape
    GemmBiasRelu(m, n, k)(cp.zeros((m, k), cp.float16), cp.zeros((k, n), cp.float16), cp.zeros(n, cp.float16))


def build_one(job: str, slices: int) -> None:
    import cupy as cp

    from utilities import buildcache

    buildcache.install()
    start = time.perf_counter()
    kind, spec = job.split(":", 1)
    if kind in ("multipass", "pipeline"):
        from utilities.gpu.multipass_bench import build_job

        build_job(job)
        print(f"prebuild: {job}: {time.perf_counter() - start:.1f} s", flush=True)
        return
    spec, _, block = spec.partition("@")  # b2b:576x64x128@64x256: a row tile of 64, 256 threads (x3: depth 3)
    shape = parse_shape(spec)
    if kind in ("unfused", "partial", "fused"):
        _ozaki(kind, shape, slices)
    elif kind in ("b2b", "b2b_keep", "b2b_persistent"):
        _b2b(kind == "b2b_keep", shape, parse_shape(block) if block else (), persistent=kind == "b2b_persistent")
    elif kind == "b2b_pipelined":
        _b2b_pipelined(shape, parse_shape(block))
    elif kind == "gemm_bias_relu":
        _gemm_bias_relu(shape)
    else:
        raise ValueError(f"unknown kernel kind {kind!r}")
    cp.cuda.Device().synchronize()
    print(f"prebuild: {job}: {time.perf_counter() - start:.1f} s", flush=True)


# (kind, shape) pairs that the notebooks, the tests and the GPU report build
OZAKI_JOBS = (
    "unfused:256x256x384,partial:256x256x384,fused:256x256x384,unfused:8192x8192x8192,partial:8192x8192x8192,"
    "fused:8192x8192x8192,fused:2048x2048x2048,fused:4096x4096x4096"
)
FUSION_JOBS = (
    "b2b:576x64x128,b2b:64x256x64,b2b_keep:576x64x128,b2b_keep:64x256x64,b2b:4096x256x64,gemm_bias_relu:512x128x256,"
    "b2b_persistent:64x256x64@32x128x3,b2b_persistent:576x64x128@128x256x3,"
    "b2b_pipelined:131072x64x256x64@64x128x32x2,b2b_pipelined:262144x64x256x64@64x128x32x2,"
    "b2b_pipelined:19264x64x256x64@64x128x32x2,b2b_pipelined:3x2560x64x256x64@64x128x32x2"
)
MULTIPASS_JOBS = (
    "multipass:int8:1,multipass:int8:2,multipass:int8:4,multipass:int8:8,multipass:float16:1,multipass:float16:2,"
    "multipass:float16:4,multipass:float16:8,pipeline:int8:256,pipeline:int8:8192,pipeline:float16:256,"
    "pipeline:float16:8192"
)
COURSE_JOBS = f"{OZAKI_JOBS},{FUSION_JOBS},{MULTIPASS_JOBS}"


def parse_shape(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.lower().split("x"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--jobs",
        default=COURSE_JOBS,
        help="comma-separated jobs, one process each: unfused|partial|fused:MxNxK, "
        "b2b|b2b_keep|b2b_persistent:K0xN0xN1[@TMxTHREADS[xDEPTH]], "
        "b2b_pipelined:[BATCHx]MxK0xN0xN1@TMxTHREADSxTKxDEPTH, gemm_bias_relu:MxNxK, "
        "multipass:int8|float16:F, pipeline:int8|float16:SIZE",
    )
    parser.add_argument("--slices", type=int, default=7)
    parser.add_argument("--parallel", type=int, default=os.cpu_count() or 4, help="builds at a time")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # worker mode
    args = parser.parse_args(argv)
    jobs = args.jobs.split(",")
    if args.one:
        (job,) = jobs
        build_one(job, args.slices)
        return 0
    start = time.perf_counter()

    # each build generates its code in worker processes of its own: share the cores among the builds
    env = dict(os.environ)
    env.setdefault("COURSE_BUILD_JOBS", str(max(1, (os.cpu_count() or 1) // min(args.parallel, len(jobs)))))

    def worker(job: str) -> bool:
        cmd = [sys.executable, "-m", "utilities.gpu.prebuild", "--one", "--jobs", job, "--slices", str(args.slices)]
        return subprocess.run(cmd, env=env).returncode == 0

    with ThreadPoolExecutor(max_workers=args.parallel) as pool:  # each worker is a process of its own
        ok = list(pool.map(worker, jobs))
    failed = [job for job, good in zip(jobs, ok, strict=True) if not good]
    print(f"prebuild: {len(jobs) - len(failed)} of {len(jobs)} builds in {time.perf_counter() - start:.0f} s"
          + (f"; failed: {', '.join(failed)}" if failed else ""))  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

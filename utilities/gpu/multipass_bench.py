"""Benchmarks of the multi-pass track: every F beside cuBLASDx's pipeline and cuBLAS, in one run.

Names in the GPU report: ``multipass.<dtype>`` (params F, N, tile and the compiled kernel's registers, spills,
smem, blocks_per_sm, occupancy), ``multipass.<dtype>.pipeline`` (cuBLASDx's device pipeline, same tile),
``cublas.igemm`` (int8, B column-major) and ``cublas.hgemm`` (``cupy.matmul`` on FP16, FP16 out). TOPS for int8
and TFLOP/s for FP16, counted as 2mnk / t.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cupy as cp

from .. import bench
from ..multipass import PassConfig
from . import cublas
from .multipass import OUT_DTYPE, PassGemm, PipelineGemm

COURSE_FS = (1, 2, 4, 8)
COURSE_DTYPES = ("int8", "float16")
TEST_SHAPE = (256, 256, 1024)  # tests/test_gpu_multipass.py and the notebook's checks


def random_operands(m: int, n: int, k: int, dtype: str, seed: int = 0) -> tuple[Any, Any]:
    """A (m, k) and B^T (n, k) on the GPU: uniform int8, or standard normal FP16."""
    rs = cp.random.RandomState(seed)
    if dtype == "int8":
        return rs.randint(-128, 128, (m, k), dtype=cp.int8), rs.randint(-128, 128, (n, k), dtype=cp.int8)
    return rs.standard_normal((m, k), dtype=cp.float32).astype(cp.float16), rs.standard_normal(
        (n, k), dtype=cp.float32
    ).astype(cp.float16)


def _agreement(got: Any, want: Any, dtype: str, against: str) -> dict[str, Any]:
    """Error entry against the baseline's result: int8 must agree exactly (raises otherwise)."""
    if dtype == "int8":
        wrong = int(cp.count_nonzero(got != want))
        if wrong:
            raise AssertionError(f"{wrong} entries differ from {against}: the kernel is wrong")
        return bench.error_entry(0.0, 0.0, against)
    g, w = got.astype(cp.float64), want.astype(cp.float64)
    normwise = float(cp.linalg.norm(g - w) / cp.linalg.norm(w))
    elementwise = float(cp.max(cp.abs(g - w)) / cp.max(cp.abs(w)))  # relative to the largest entry: no tiny divisors
    return bench.error_entry(normwise, elementwise, against + " (max elementwise: max |difference| / max |entry|)")


def baseline(a: Any, bt: Any, dtype: str) -> tuple[Any, Any, str]:
    """cuBLAS on the same operands: (callable, its result, name)."""
    if dtype == "int8":
        out = cublas.igemm(a, bt)
        return (lambda: cublas.igemm(a, bt, out=out)), out, "cublas.igemm"
    out = cp.matmul(a, bt.T)
    return (lambda: cp.matmul(a, bt.T, out=out)), out, "cublas.hgemm"


def multipass_records(
    sizes: Sequence[int] = (8192,),
    fs: Sequence[int] = COURSE_FS,
    dtypes: Sequence[str] = COURSE_DTYPES,
    *,
    passes: int = 8,
    tile: tuple[int, int] = (128, 128),
    pipeline: bool = True,
    repeats: int = 10,
    show: bool = True,
    record: bool = True,
) -> list[bench.BenchRecord]:
    """Time every F (and the library pipeline, and cuBLAS) at m = n = k = size, checking each result first.

    Each kernel builds once per (dtype, F) whatever the size; the pipeline builds per size (its TMA
    descriptors are part of its type).
    """
    records: list[bench.BenchRecord] = []
    for dtype in dtypes:
        for size in sizes:
            m = n = k = size
            a, bt = random_operands(m, n, k, dtype)
            run_ref, ref, ref_name = baseline(a, bt, dtype)
            records.append(bench.bench(run_ref, m=m, n=n, k=k, name=ref_name, repeats=repeats))
            for f in fs:
                cfg = PassConfig(dtype, tile[0], tile[1], passes=passes, fused=f)
                plan = PassGemm(m, n, k, cfg)
                out = plan(a, bt)
                error = _agreement(out, ref, dtype, ref_name)
                params = {"F": f, "N": passes, "tile": f"{tile[0]}x{tile[1]}", **plan.resources()}
                records.append(
                    bench.bench(lambda plan=plan, a=a, bt=bt, out=out: plan(a, bt, out=out), m=m, n=n, k=k,
                                name=f"multipass.{dtype}", params=params, repeats=repeats, error=error)
                )  # fmt: skip
            if pipeline:
                lib = PipelineGemm(a, bt, dtype, tile)
                out = cp.empty((m, n), dtype=OUT_DTYPE[dtype])
                lib(out)
                params = {"tile": f"{tile[0]}x{tile[1]}", "depth": 3, **lib.resources()}
                error = _agreement(out, ref, dtype, ref_name)
                records.append(
                    bench.bench(lambda lib=lib, out=out: lib(out), m=m, n=n, k=k, name=f"multipass.{dtype}.pipeline",
                                params=params, repeats=repeats, error=error)
                )  # fmt: skip
                del lib
            a = bt = ref = out = None  # free the operands before the next size
            cp.get_default_memory_pool().free_all_blocks()
    if record:
        bench.record(records)
    if show:
        bench.print_table(records)
    return records


def sweep_table(records: Sequence[bench.BenchRecord], dtype: str = "int8") -> list[dict[str, Any]]:
    """One row per F of ``multipass.<dtype>``: F, registers, spills, occupancy, blocks_per_sm, smem, tflops."""
    rows = []
    for r in records:
        if r.name == f"multipass.{dtype}":
            keys = ("registers", "spills", "occupancy", "blocks_per_sm", "smem")
            rows.append({"F": r.params["F"], **{key: r.params[key] for key in keys}, "tflops": r.tflops})
    return sorted(rows, key=lambda row: row["F"])


# ------------------------------------------------------------------------------------------------------------
# Prebuild: the kernels the notebook, the tests and the GPU report use
# ------------------------------------------------------------------------------------------------------------


def prebuild_jobs(sizes: Sequence[int] = (8192,)) -> list[str]:
    """``multipass:<dtype>:<F>`` (one build serves every size) and ``pipeline:<dtype>:<size>`` jobs."""
    jobs = [f"multipass:{dtype}:{f}" for dtype in COURSE_DTYPES for f in COURSE_FS]
    sizes = sorted({*sizes, TEST_SHAPE[0]})
    jobs += [f"pipeline:{dtype}:{size}" for dtype in COURSE_DTYPES for size in sizes]
    return jobs


def build_job(job: str) -> None:
    """Build one job of :func:`prebuild_jobs` into the build cache (run it in its own process)."""
    kind, dtype, value = job.split(":")
    if kind == "multipass":
        m, n, k = TEST_SHAPE
        plan = PassGemm(m, n, k, PassConfig(dtype, fused=int(value)))
        plan(*random_operands(m, n, k, dtype))
    elif kind == "pipeline":
        size = int(value)
        m, n, k = (size, size, size) if size != TEST_SHAPE[0] else TEST_SHAPE
        PipelineGemm(*random_operands(m, n, k, dtype), dtype)()
    else:
        raise ValueError(f"unknown job {job!r}: expected multipass:<dtype>:<F> or pipeline:<dtype>:<size>")
    cp.cuda.Device().synchronize()


def save_plots(records: Sequence[bench.BenchRecord], folder: str | Path) -> list[str]:
    """The F-sweep figure (registers, spills, occupancy, throughput) of each dtype in ``records``, as PNGs."""
    from .. import plots

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for dtype in COURSE_DTYPES:
        sweep = sweep_table(records, dtype)
        if sweep:
            path = folder / f"multipass_{dtype}.png"
            plots.registers_occupancy(sweep, title=f"{dtype}: fused passes F (F = N = 8 is full fusion)", path=path)
            paths.append(str(path))
    return paths

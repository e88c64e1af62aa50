"""Benchmarks of the multi-pass track: every F beside cuBLASDx's pipeline and cuBLAS, in one run.

Names in the GPU report (``RESULTS.md``): ``multipass.F=<n>`` (params dtype, F, N, tile and the compiled kernel's
registers, spills, smem, blocks_per_sm, occupancy), ``multipass.best`` (the fastest F of a dtype, the same figures),
``pipeline.<dtype>`` (cuBLASDx's device pipeline, same tile), ``cublas.igemm`` (int8, B column-major) and
``cublas.hgemm`` (``cupy.matmul`` on FP16, FP16 out). TOPS for int8 and TFLOP/s for FP16, counted as 2mnk / t.
Reports written before 2026-11-23 name the F sweep ``multipass.<dtype>`` and the pipeline
``multipass.<dtype>.pipeline``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import cupy as cp

from .. import bench, cublas
from ..tiles import OUT_DTYPE
from .config import DTYPES, PassConfig, PipelineConfig
from .tensorcore import Kernels, PassGemm, PipelineGemm

COURSE_FS = (1, 2, 4, 8)
TEST_SHAPE = (256, 256, 1024)  # tests/test_multipass_gpu.py and the notebook's checks


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


def yours_beside_ours(
    kernel_factory: Any,
    dtype: str = "int8",
    fused: int = 2,
    size: int = 8192,
    *,
    repeats: int = 10,
    show: bool = True,
) -> list[bench.BenchRecord]:
    """Your kernel (``kernel_factory``, the factory the exercise wrote) beside the course's and cuBLAS, on the same
    operands at ``size``^3, each result compared with cuBLAS's first (int8: exactly; a mismatch is printed, and the
    record has no error entry).

    A phase loop that waits too often, or races on a buffer yet gives the right values at the check's small shape,
    shows here as a time. Yours builds nothing new: it is the kernel the check built (same tile, same F).
    """
    m = n = k = size
    a, bt = random_operands(m, n, k, dtype)
    run_ref, ref, ref_name = baseline(a, bt, dtype)
    records = [bench.bench(run_ref, m=m, n=n, k=k, name=ref_name, repeats=repeats)]
    cfg = PassConfig(dtype, fused=fused)
    for name, factory in (("multipass.yours", kernel_factory), (f"multipass.F={fused}", None)):
        plan = PassGemm(m, n, k, cfg, kernels=Kernels(multipass=factory))
        out = plan(a, bt)
        try:
            error = _agreement(out, ref, dtype, ref_name)
        except AssertionError as wrong:
            if factory is None:
                raise
            print(f"{name}: {wrong} (the check above says where); timed all the same")  # unfinished or wrong
            error = None
        records.append(
            bench.bench(
                lambda plan=plan, out=out: plan(a, bt, out=out),
                m=m,
                n=n,
                k=k,
                name=name,
                params={"dtype": dtype, "F": fused},
                repeats=repeats,
                error=error,
            )
        )
    if show:
        bench.print_table(records)
    return records


def multipass_records(
    sizes: Sequence[int] = (8192,),
    fs: Sequence[int] = COURSE_FS,
    dtypes: Sequence[str] = DTYPES,
    *,
    passes: int = 8,
    tile: tuple[int, int] = (128, 128),
    pipeline: bool = True,
    repeats: int = 10,
    show: bool = True,
    record: bool = True,
) -> list[bench.BenchRecord]:
    """Time every F (and the library pipeline, and cuBLAS) at m = n = k = size, checking each result first.

    Each kernel builds once per (dtype, F) whatever the size, and the pipeline's once per dtype (its shapes are
    run-time values: ``utilities.machinery.pipelines``).
    """
    records: list[bench.BenchRecord] = []
    for dtype in dtypes:
        for size in sizes:
            m = n = k = size
            a, bt = random_operands(m, n, k, dtype)
            run_ref, ref, ref_name = baseline(a, bt, dtype)
            records.append(bench.bench(run_ref, m=m, n=n, k=k, name=ref_name, repeats=repeats))
            for f in fs:
                cfg = PassConfig(dtype, passes, f, tile_m=tile[0], tile_n=tile[1])
                plan = PassGemm(m, n, k, cfg)
                out = plan(a, bt)
                error = _agreement(out, ref, dtype, ref_name)
                params = {"dtype": dtype, "F": f, "N": passes, "tile": f"{tile[0]}x{tile[1]}", **plan.resources()}
                records.append(
                    bench.bench(
                        lambda plan=plan, a=a, bt=bt, out=out: plan(a, bt, out=out),
                        m=m,
                        n=n,
                        k=k,
                        name=f"multipass.F={f}",
                        params=params,
                        repeats=repeats,
                        error=error,
                    )
                )
            swept = [
                r for r in records if r.name.startswith("multipass.F=") and r.params["dtype"] == dtype and r.m == size
            ]
            if swept:
                best = max(swept, key=lambda r: r.tflops)
                records.append(dataclasses.replace(best, name="multipass.best", params=dict(best.params)))
            if pipeline:
                lib = PipelineGemm(a, bt, dtype, PipelineConfig(tile_m=tile[0], tile_n=tile[1]))
                out = cp.empty((m, n), dtype=OUT_DTYPE[dtype])
                lib(out)
                params = {"dtype": dtype, "tile": f"{tile[0]}x{tile[1]}", "depth": lib.cfg.depth, **lib.resources()}
                error = _agreement(out, ref, dtype, ref_name)
                records.append(
                    bench.bench(
                        lambda lib=lib, out=out: lib(out),
                        m=m,
                        n=n,
                        k=k,
                        name=f"pipeline.{dtype}",
                        params=params,
                        repeats=repeats,
                        error=error,
                    )
                )
                del lib
            a = bt = ref = out = None  # free the operands before the next size
            cp.get_default_memory_pool().free_all_blocks()
    if record:
        bench.record(records)
    if show:
        bench.print_table(records)
    return records

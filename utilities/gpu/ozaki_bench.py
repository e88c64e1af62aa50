"""Benchmarks of the Ozaki-I track: every variant beside cuBLAS DGEMM and cuBLAS int8 GEMM, in one run.

Names follow the GPU report (``../shared/RESULTS.md``): ``cublas.dgemm``, ``cublas.igemm``, ``ozaki.slicing``,
``ozaki.unfused``, ``ozaki.partial``, ``ozaki.fused`` (end to end, slicing included), ``ozaki.fused.kernel``,
and the stages ``ozaki.<variant>.products`` / ``.epilogue``. TFLOP/s are counted as 2mnk / t for all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import cupy as cp
import numpy as np

from .. import bench, errors, exact, inputs
from . import cublas
from .ozaki import OzakiGemm


def _sampled_error(c: Any, a: np.ndarray, b: np.ndarray, rows: np.ndarray | None) -> dict[str, Any]:
    """Errors against the double-double product, on every row or on a sample of rows (large sizes)."""
    c = cp.asnumpy(c)
    if rows is None:
        hi, lo = exact.matmul_dd(a, b)
        return errors.error_report(c, hi, lo, against="double-double")
    hi, lo = exact.matmul_dd(a[rows], b)
    return errors.error_report(c[rows], hi, lo, against=f"double-double, {len(rows)} sampled rows")


def ozaki_benchmarks(
    size: int,
    slices: int = 7,
    variants: Sequence[str] = ("unfused", "partial", "fused"),
    *,
    repeats: int = 10,
    sample_rows: int = 16,
    seed: int = 0,
    show: bool = True,
) -> list[bench.BenchRecord]:
    """Time and check every variant at m = n = k = ``size``; returns the records (also sent to the recorder)."""
    m = n = k = size
    a_h, b_h = inputs.normal(m, k, seed), inputs.normal(k, n, seed + 1)
    a, b = cp.asarray(a_h), cp.asarray(b_h)
    rows = None if size <= 1024 else np.sort(np.random.default_rng(seed).choice(m, sample_rows, replace=False))
    params = {"slices": slices}
    records: list[bench.BenchRecord] = []

    def add(rec: bench.BenchRecord) -> None:
        records.append(rec)
        bench.record(rec)

    out = cublas.dgemm(a, b)
    native_error = _sampled_error(out, a_h, b_h, rows)
    add(bench.bench(lambda: cublas.dgemm(a, b, out=out), m=m, n=n, k=k, name="cublas.dgemm", repeats=repeats,
                    error=native_error))  # fmt: skip
    a8 = cp.asarray(np.random.default_rng(seed).integers(-128, 128, (m, k), dtype=np.int8))
    b8 = cp.asarray(np.random.default_rng(seed + 1).integers(-128, 128, (n, k), dtype=np.int8))
    add(bench.bench(cublas_igemm_runner(a8, b8), m=m, n=n, k=k, name="cublas.igemm", repeats=repeats))

    for variant in variants:
        plan = OzakiGemm(m, n, k, slices, variant)
        c = plan(a, b)
        error = _sampled_error(c, a_h, b_h, rows)
        add(bench.bench(lambda p=plan, c=c: p(a, b, out=c), m=m, n=n, k=k, name=f"ozaki.{variant}", params=params,
                        repeats=repeats, error=error))  # fmt: skip
        if variant == "fused":
            add(bench.bench(lambda p=plan: p.slice(a, b), m=m, n=n, k=k, name="ozaki.slicing", params=params,
                            repeats=repeats, bytes_moved=(8 + slices) * (m * k + k * n)))  # fmt: skip
            add(bench.bench(lambda p=plan, c=c: p.fused(c, c, 1.0, 0.0), m=m, n=n, k=k, name="ozaki.fused.kernel",
                            params=params, repeats=repeats))  # fmt: skip
        else:
            add(bench.bench(plan.products, m=m, n=n, k=k, name=f"ozaki.{variant}.products", params=params,
                            repeats=repeats))  # fmt: skip
            add(bench.bench(lambda p=plan, c=c: p.epilogue(c, c, 1.0, 0.0), m=m, n=n, k=k,
                            name=f"ozaki.{variant}.epilogue", params=params, repeats=repeats))  # fmt: skip
        del plan
        cp.get_default_memory_pool().free_all_blocks()
    if show:
        print(f"m = n = k = {size}, {slices} slices")
        bench.print_table(records, metric="ms")
    return records


def cublas_igemm_runner(a8: Any, b8: Any) -> Any:
    out = cublas.igemm(a8, b8)
    return lambda: cublas.igemm(a8, b8, out=out)

"""Benchmarks of the Ozaki-I track: every variant beside cuBLAS DGEMM and cuBLAS int8 GEMM, in one run.

Names follow the GPU report (``../shared/RESULTS.md``): ``cublas.dgemm``, ``cublas.igemm``, ``ozaki.slicing``,
``ozaki.unfused``, ``ozaki.partial``, ``ozaki.fused`` (end to end, slicing included), ``ozaki.fused.kernel``,
and the stages ``ozaki.<variant>.products`` / ``.epilogue``. TFLOP/s are counted as 2mnk / t for all of them.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import cupy as cp
import numpy as np

from .. import bench, cublas, inputs
from ..errors import error_rows, sampled_error
from .tensorcore import OzakiGemm


def baseline_records(a: Any, b: Any, *, repeats: int = 10, error: dict | None = None) -> list[bench.BenchRecord]:
    """cuBLAS DGEMM on (a, b) and cuBLAS int8 GEMM (B column-major) on random int8 matrices of the same shape."""
    m, k = a.shape
    n = b.shape[1]
    out = cublas.dgemm(a, b)
    rng = np.random.default_rng(0)
    a8 = cp.asarray(rng.integers(-128, 128, (m, k), dtype=np.int8))
    b8 = cp.asarray(rng.integers(-128, 128, (n, k), dtype=np.int8))
    out8 = cublas.igemm(a8, b8)
    return [
        bench.bench(
            lambda: cublas.dgemm(a, b, out=out), m=m, n=n, k=k, name="cublas.dgemm", repeats=repeats, error=error
        ),
        bench.bench(lambda: cublas.igemm(a8, b8, out=out8), m=m, n=n, k=k, name="cublas.igemm", repeats=repeats),
    ]


def plan_records(plan: OzakiGemm, a: Any, b: Any, *, repeats: int = 10, error: dict | None = None) -> list:
    """End to end (slicing included), then each stage of ``plan`` alone: slicing, products/epilogue or fused."""
    m, n, k, variant = plan.m, plan.n, plan.k, plan.variant
    params = {"slices": plan.slices}
    c = plan(a, b)

    def timed(fn: Any, name: str, **extra: Any) -> bench.BenchRecord:
        return bench.bench(fn, m=m, n=n, k=k, name=name, params=params, repeats=repeats, **extra)

    moved = (8 + plan.slices) * (m * k + k * n)  # FP64 read, int8 digits written
    records = [timed(lambda: plan(a, b, out=c), f"ozaki.{variant}", error=error)]
    records.append(timed(lambda: plan.slice(a, b), "ozaki.slicing", bytes_moved=moved))
    if variant == "fused":
        records.append(timed(lambda: plan.fused(c, c, 1.0, 0.0), "ozaki.fused.kernel"))
    else:
        records.append(timed(plan.products, f"ozaki.{variant}.products"))
        records.append(timed(lambda: plan.epilogue(c, c, 1.0, 0.0), f"ozaki.{variant}.epilogue"))
    return records


def ozaki_benchmarks(
    size: int,
    slices: int = 7,
    variants: Sequence[str] = ("unfused", "partial", "fused"),
    *,
    repeats: int = 10,
    seed: int = 0,
    show: bool = True,
    record: bool = True,
) -> list[bench.BenchRecord]:
    """Time and check every variant at m = n = k = ``size`` beside cuBLAS, in one run (used by the GPU suite).

    First the headline: every variant end to end and cuBLAS DGEMM, interleaved round by round (params
    ``timing: interleaved``), so that all see the same clocks and temperature. Timed one after another, the
    variants ran on a GPU warmed by the int8 work before them, and DGEMM, first, on a cool one. Then cuBLAS
    (DGEMM and int8) alone, and each variant end to end and stage by stage.
    """
    m = n = k = size
    a_h, b_h = inputs.normal(m, k, seed), inputs.normal(k, n, seed + 1)
    a, b = cp.asarray(a_h), cp.asarray(b_h)
    rows = error_rows(m, seed=seed)
    dgemm_error = sampled_error(cublas.dgemm(a, b), a_h, b_h, rows)
    plans = {variant: OzakiGemm(m, n, k, slices, variant) for variant in variants}
    errors = {variant: sampled_error(plan(a, b), a_h, b_h, rows) for variant, plan in plans.items()}
    outs = {variant: cp.empty((m, n)) for variant in variants}
    providers = {"cublas.dgemm": cublas.dgemm_provider(a, b)}
    providers |= {f"ozaki.{v}": functools.partial(plan, a, b, out=outs[v]) for v, plan in plans.items()}
    params = {"slices": slices, "timing": "interleaved"}
    records = bench.compare(providers, m=m, n=n, k=k, params=params, repeats=repeats, show=False)
    for r in records:
        r.error = dgemm_error if r.name == "cublas.dgemm" else errors[r.name.removeprefix("ozaki.")]
    del providers, outs  # the providers hold the output buffers (and the plans): release them here
    records += baseline_records(a, b, repeats=repeats, error=dgemm_error)
    for variant in variants:
        plan = plans.pop(variant)
        variant_records = plan_records(plan, a, b, repeats=repeats, error=errors[variant])
        if variant != "fused":  # slicing is the same kernel for every variant: report it once
            variant_records = [r for r in variant_records if r.name != "ozaki.slicing"]
        records += variant_records
        del plan  # one plan's buffers at a time from here on (the unfused one holds 28 int32 products)
        cp.get_default_memory_pool().free_all_blocks()
    if record:
        bench.record(records)
    if show:
        print(f"m = n = k = {size}, {slices} slices")
        bench.print_table(records, metric="ms")
    return records


def accuracy_records(n: int = 2048, *, seed: int = 4, record: bool = True) -> list[bench.BenchRecord]:
    """Accuracy of the fused emulation against slices (3..10, normal inputs) and exponent spread (phi), beside
    cuBLAS DGEMM on the same inputs; errors on 16 sampled rows against the double-double product.

    One kernel build serves every slice count (the count is a run-time argument of the fused kernel).
    """
    rows = error_rows(n, count=16, seed=seed)
    records: list[bench.BenchRecord] = []

    def measure(a_h: np.ndarray, b_h: np.ndarray, slices: int, phi: float, native: bool) -> None:
        a, b = cp.asarray(a_h), cp.asarray(b_h)
        params = {"slices": slices, "phi": phi}
        plan = OzakiGemm(n, n, n, slices, "fused")
        c = plan(a, b)
        records.append(
            bench.bench(
                lambda: plan(a, b, out=c),
                m=n,
                n=n,
                k=n,
                name="ozaki.fused",
                params=params,
                repeats=5,
                error=sampled_error(c, a_h, b_h, rows),
            )
        )
        if native:
            out = cublas.dgemm(a, b)
            records.append(
                bench.bench(
                    lambda: cublas.dgemm(a, b, out=out),
                    m=n,
                    n=n,
                    k=n,
                    name="cublas.dgemm",
                    params={"phi": phi},
                    repeats=5,
                    error=sampled_error(out, a_h, b_h, rows),
                )
            )

    a_h, b_h = inputs.normal(n, n, seed), inputs.normal(n, n, seed + 1)
    for slices in range(3, 11):
        measure(a_h, b_h, slices, 0.0, native=slices == 3)
    for phi in (0.5, 1.0, 2.0, 4.0):
        a_h, b_h = inputs.exponent_spread(n, n, phi, seed + 2), inputs.exponent_spread(n, n, phi, seed + 3)
        for slices in (7, 8, 9, 10) if phi == 4.0 else (7,):
            measure(a_h, b_h, slices, phi, native=slices == 7)
    if record:
        bench.record(records)
    return records

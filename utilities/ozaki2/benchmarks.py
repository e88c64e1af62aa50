"""Benchmarks of the Ozaki-II track: the emulation beside cuBLAS DGEMM, cuBLAS's int8 GEMM and Ozaki-I, in one run.

Names (the GPU report, ``../shared/RESULTS.md``): ``cublas.dgemm``, ``cublas.igemm``, ``ozaki.fused`` (Ozaki-I,
7 slices), ``ozaki2.unfused`` (end to end: scaling, residues, products and reconstruction; ``params`` hold the
moduli count and whether it was chosen automatically), and its stages ``ozaki2.scaling``, ``ozaki2.products``,
``ozaki2.reconstruct``. The headline times DGEMM and the emulations interleaved round by round. TFLOP/s are
2mnk / t for all. Accuracy: ``ozaki2.accuracy`` records, errors against the exact product (double-double).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import cupy as cp
import numpy as np

from .. import bench, cublas, inputs
from ..errors import error_rows, sampled_error
from . import model
from .tensorcore import Ozaki2Gemm


def ozaki2_records(
    size: int,
    moduli: int | str = "auto",
    *,
    ozaki1: Callable[[int, int, int], Any] | None = None,
    repeats: int = 10,
    seed: int = 0,
    record: bool = True,
    show: bool = True,
) -> list[bench.BenchRecord]:
    """Ozaki-II at m = n = k = ``size`` beside cuBLAS DGEMM, interleaved; then cuBLAS's int8 GEMM and each Ozaki-II
    stage alone. ``ozaki1``: a factory ``(m, n, k) -> plan`` of the fused Ozaki-I (with its
    ``slices``), timed beside them as ``ozaki.fused`` (this track does not import the other: the caller passes it)."""
    m = n = k = size
    a_h, b_h = inputs.normal(m, k, seed), inputs.normal(k, n, seed + 1)
    a, b = cp.asarray(a_h), cp.asarray(b_h)
    rows = error_rows(m, seed=seed)
    plan = Ozaki2Gemm(m, n, k, moduli)
    c2 = plan(a, b)
    count = plan.count
    params = {"moduli": count, "auto": moduli == "auto", "timing": "interleaved"}
    if plan.choice is not None:
        params["estimate_u"], params["target_u"] = plan.choice.estimate, plan.choice.target
    errors = {"ozaki2.unfused": sampled_error(c2, a_h, b_h, rows), "cublas.dgemm": None}
    providers: dict[str, Any] = {"cublas.dgemm": cublas.dgemm_provider(a, b)}
    errors["cublas.dgemm"] = sampled_error(cublas.dgemm(a, b), a_h, b_h, rows)
    providers["ozaki2.unfused"] = functools.partial(plan, a, b, out=c2)
    if ozaki1 is not None:
        plan1 = ozaki1(m, n, k)
        c1 = plan1(a, b)
        errors["ozaki.fused"] = sampled_error(c1, a_h, b_h, rows)
        providers["ozaki.fused"] = functools.partial(plan1, a, b, out=c1)
    records = bench.compare(providers, m=m, n=n, k=k, params=params, repeats=repeats, show=False)
    for r in records:
        r.error = errors[r.name]
        if r.name == "ozaki.fused":
            r.params = {"slices": plan1.slices, "timing": "interleaved"}
        elif r.name == "cublas.dgemm":
            r.params = {"timing": "interleaved"}
    del providers
    cp.get_default_memory_pool().free_all_blocks()

    rng = np.random.default_rng(0)
    a8 = cp.asarray(rng.integers(-128, 128, (m, k), dtype=np.int8))
    b8 = cp.asarray(rng.integers(-128, 128, (n, k), dtype=np.int8))
    records.append(bench.bench(cublas.igemm_provider(a8, b8), m=m, n=n, k=k, name="cublas.igemm", repeats=repeats))
    del a8, b8
    stage = {"moduli": count}
    moved = model.design("unfused", m, n, k, count)[0].bytes  # A read, B read + transposed + read, residues
    records.append(bench.bench(lambda: plan.scale(a, b), m=m, n=n, k=k, name="ozaki2.scaling", params=stage,
                               repeats=repeats, bytes_moved=moved))  # fmt: skip
    records.append(bench.bench(plan.products, m=m, n=n, k=k, name="ozaki2.products", params=stage, repeats=repeats,
                               flops=2.0 * count * m * n * k))  # fmt: skip
    records.append(bench.bench(lambda: plan.reconstruct(c2, c2, 1.0, 0.0), m=m, n=n, k=k, name="ozaki2.reconstruct",
                               params=stage, repeats=repeats, bytes_moved=(4 * count + 8) * m * n))  # fmt: skip
    if record:
        bench.record(records)
    if show:
        print(f"m = n = k = {size}, Ozaki-II with {count} moduli" + (" (automatic)" if moduli == "auto" else ""))
        bench.print_table(records, metric="ms")
    return records


def accuracy_records(
    n: int = 2048, phis: Sequence[float] = (0.0, 0.5, 1.0, 2.0, 4.0), counts: Sequence[int] = range(10, 19), *,
    ozaki1: Callable[[np.ndarray, np.ndarray], tuple[Any, Any]] | None = None, seed: int = 4, record: bool = True,
) -> list[bench.BenchRecord]:  # fmt: skip
    """Errors against the exact product on 16 sampled rows of n^3 products: Ozaki-II against the moduli count
    (normal inputs), and at each phi its automatic count beside cuBLAS DGEMM on the same inputs. ``ozaki1``: a
    function ``(A, B) -> (plan, choice)`` giving Ozaki-I's plan with its automatic slice count, timed beside them as
    ``ozaki.fused``. Times are per call, 5 repeats."""

    rows = error_rows(n, count=16, seed=seed)
    records: list[bench.BenchRecord] = []

    def measure(name: str, fn: Any, a_h: np.ndarray, b_h: np.ndarray, params: dict[str, Any]) -> None:
        out = fn()
        records.append(bench.bench(fn, m=n, n=n, k=n, name=name, params=params, repeats=5,
                                   error=sampled_error(out, a_h, b_h, rows)))  # fmt: skip

    a_h, b_h = inputs.normal(n, n, seed), inputs.normal(n, n, seed + 1)
    a, b = cp.asarray(a_h), cp.asarray(b_h)
    for count in counts:
        plan = Ozaki2Gemm(n, n, n, count)
        measure("ozaki2.unfused", lambda plan=plan: plan(a, b), a_h, b_h, {"moduli": count, "phi": 0.0, "auto": False})
    for phi in phis:
        if phi:
            a_h, b_h = inputs.exponent_spread(n, n, phi, seed + 2), inputs.exponent_spread(n, n, phi, seed + 3)
        a, b = cp.asarray(a_h), cp.asarray(b_h)
        measure("cublas.dgemm", lambda a=a, b=b: cublas.dgemm(a, b), a_h, b_h, {"phi": phi})
        auto = Ozaki2Gemm(n, n, n, "auto")
        auto(a, b)
        params = {"moduli": auto.count, "phi": phi, "auto": True, "estimate_u": auto.choice.estimate,
                  "target_u": auto.choice.target}  # fmt: skip
        measure("ozaki2.unfused", lambda plan=auto, a=a, b=b: plan(a, b), a_h, b_h, params)
        if ozaki1 is not None:
            plan1, choice = ozaki1(a_h, b_h)
            params = {"slices": choice.count, "phi": phi, "auto": True, "estimate_u": choice.estimate,
                      "target_u": choice.target}  # fmt: skip
            measure("ozaki.fused", lambda plan=plan1, a=a, b=b: plan(a, b), a_h, b_h, params)
    if record:
        bench.record(records)
    return records

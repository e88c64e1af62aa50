"""Benchmarks of the Ozaki-II track: the emulation beside cuBLAS DGEMM and Ozaki-I, end to end and stage by stage,
in one run (``tools/ozaki2_report.py`` writes them as one report).

Names (the GPU report, ``../shared/RESULTS.md``):

- ``cublas.dgemm``, ``ozaki2.auto`` (the count chosen on every call; ``params``: the count, the estimate, the
  choice's own time ``choice_ms`` and its share of the call), ``ozaki2.fixed`` (the same count, given),
  ``ozaki.fused`` (Ozaki-I, 7 slices), ``ozaki.auto`` (Ozaki-I, slices chosen on every call): end to end, timed
  round by round, interleaved (the plan's default design: per-modulus GEMMs, digits late where the products fit,
  ``simt.digits_for``); at the smaller sizes also the plan's designs named outright: ``ozaki2.auto.batched`` (one
  batched int8 GEMM), ``ozaki2.auto.early`` (each product's digits right after its GEMM, on a second stream),
  ``ozaki2.auto.late`` (digits taken in the reconstruction) and ``ozaki2.auto.serial`` (early digits on one
  stream);
- stages alone, at the chosen count: ``ozaki2.choice``, ``ozaki2.scaling``, ``ozaki2.products`` (``params``
  say per-modulus or batched, early or late digits), ``ozaki2.reconstruct`` (from digits or products),
  ``cublas.igemm``; each with its floor (``floor_ms``: bytes at the measured copy bandwidth, int8 operations at
  the measured cuBLAS int8 rate, ``utilities.ozaki2.model``) and its host time (``host_ms``: from the call to its
  return, the GPU idle at the call; a stage whose host time nears its GPU time is bound by its launches).

Accuracy (``accuracy_records``): at each exponent spread phi, errors against the exact product (double-double) of
cuBLAS DGEMM, Ozaki-II and Ozaki-I with their automatic counts, on the same inputs; ``accuracy_over_k_records``
the same for DGEMM and Ozaki-II at long K (m = n smaller than k). Ozaki-I reaches this track as arguments
(``utilities.emulations``): no track imports another.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

import cupy as cp
import numpy as np

from .. import bench, cublas, inputs
from ..errors import error_report, error_rows, sampled_error
from ..exact import matmul_dd
from ..peaks import measure_copy_bandwidth
from . import model
from .tensorcore import Ozaki2Gemm

VARIANTS = {  # every design named outright: the default's digits depend on the GPU's memory (simt.digits_for)
    "ozaki2.auto.batched": {"products": "batched", "digits": "early"},
    "ozaki2.auto.early": {"digits": "early"},
    "ozaki2.auto.late": {"digits": "late"},
    "ozaki2.auto.serial": {"digits": "early", "overlap": False},
}
OLD_PATHS = {  # the designs the default replaced, each beside it in one run (``old_new``)
    "ozaki2.auto.recompute": {"statistics": "recompute"},  # A's row statistics found twice
    "ozaki2.auto.by-rows": {"columns": "by-rows"},  # B transposed, then the rows kernel: not in one pass
}
VARIANT_SIZES = 8192  # the variants run up to this size (each plan holds its own buffers)


def host_ms(fn: Callable[[], object], repeats: int = 5) -> float:
    """Median wall time (ms) from calling ``fn`` to its return, the GPU idle at each call: the host's work of a stage
    (Python, launches; and the wait of a stage that copies to the host). CUDA events around a host-bound stage
    time this too: the GPU waits for the launches."""
    times = []
    for _ in range(repeats):
        cp.cuda.Device().synchronize()
        start = time.perf_counter()
        fn()
        times.append(1e3 * (time.perf_counter() - start))
    cp.cuda.Device().synchronize()
    return float(np.median(times))


def _modes(plan: Ozaki2Gemm) -> dict[str, Any]:
    return {
        "products": plan.products_mode,
        "digits": plan.digits_mode,
        "overlap": plan.overlap,
        "panels": len(plan.row_panels),
    }


def ozaki2_records(
    size: int,
    *,
    ozaki1: Callable[[int, int, int], Any] | None = None,
    ozaki1_auto: Callable[[int, int, int], Any] | None = None,
    repeats: int = 10,
    seed: int = 0,
    variants: bool | None = None,
    record: bool = True,
    show: bool = True,
    old_new: bool = False,
    stages: bool = True,
) -> list[bench.BenchRecord]:
    """Ozaki-II with the automatic count at m = n = k = ``size``, end to end beside cuBLAS DGEMM (and Ozaki-I when
    ``ozaki1`` and ``ozaki1_auto``, factories ``(m, n, k) -> plan``, are given), interleaved; then each stage
    alone with its floor. ``variants`` (default: up to size 8192) adds the plan's other designs end to end;
    ``old_new`` adds the designs the default replaced (``OLD_PATHS``: A's row statistics found again, B's residues
    by B^T's rows) end to end, and the automatic plan's scaling alone beside each (``scaling_records``); ``stages``
    False leaves the stage timings out. The fixed count and the old designs take the automatic plan's digits:
    ``digits="auto"`` looks at the free memory when a plan is made, which the plans made before it have taken."""
    m = n = k = size
    a_h, b_h = inputs.normal(m, k, seed), inputs.normal(k, n, seed + 1)
    a, b = cp.asarray(a_h), cp.asarray(b_h)
    rows = error_rows(m, seed=seed)
    auto = Ozaki2Gemm(m, n, k, "auto")
    out = auto(a, b)
    count = auto.count
    choice = auto.choice
    same_digits = {"digits": auto.digits_mode}
    plans: dict[str, Any] = {"ozaki2.auto": auto, "ozaki2.fixed": Ozaki2Gemm(m, n, k, count, **same_digits)}
    if variants if variants is not None else size <= VARIANT_SIZES:
        plans |= {name: Ozaki2Gemm(m, n, k, "auto", **options) for name, options in VARIANTS.items()}
    if old_new:
        plans |= {name: Ozaki2Gemm(m, n, k, "auto", **(same_digits | options)) for name, options in OLD_PATHS.items()}
    if ozaki1 is not None:
        plans["ozaki.fused"] = ozaki1(m, n, k)
    if ozaki1_auto is not None:
        plans["ozaki.auto"] = ozaki1_auto(m, n, k)
    errors, same_c = {}, {}
    for name, plan in plans.items():  # each C checked, then dropped: 2 GiB each at 16384^3, beside the plans' 112
        c = out if name == "ozaki2.auto" else plan(a, b)
        errors[name] = sampled_error(c, a_h, b_h, rows)
        if name in OLD_PATHS:  # C of the two paths, bit for bit (the candidate's claim, checked where it runs)
            same_c[name] = bool(cp.array_equal(c, out))
        del c
    providers: dict[str, Any] = {"cublas.dgemm": cublas.dgemm_provider(a, b)}
    errors["cublas.dgemm"] = sampled_error(cublas.dgemm(a, b), a_h, b_h, rows)
    timed_c = cp.empty_like(out)  # every plan's C goes here while they are timed
    providers |= {name: functools.partial(plan, a, b, out=timed_c) for name, plan in plans.items()}
    records = bench.compare(providers, m=m, n=n, k=k, repeats=repeats, show=False)

    choice_ms = bench.bench(lambda: auto.choose(a, b), m=m, n=n, k=k, repeats=repeats).time.median
    for r in records:
        r.error = errors[r.name]
        plan = plans.get(r.name)
        r.params = {"timing": "interleaved"}
        if isinstance(plan, Ozaki2Gemm):
            r.params |= {
                "moduli": plan.count,
                "auto": plan.moduli == "auto",
                **_modes(plan),
                "statistics": plan.statistics,
                "columns": plan.columns_mode,
            }
            if plan.choice is not None:
                r.params |= {"estimate_u": plan.choice.estimate, "target_u": plan.choice.target}
            if r.name == "ozaki2.auto":
                r.params |= {"choice_ms": choice_ms, "choice_share": choice_ms / r.time.median}
        elif plan is not None:  # Ozaki-I
            r.params |= {"slices": plan.slices, "auto": getattr(plan, "auto", False)}
            if getattr(plan, "choice", None) is not None:
                r.params |= {"estimate_u": plan.choice.estimate, "target_u": plan.choice.target}
        if r.name in same_c:
            r.params["same_c_as_auto"] = same_c[r.name]
    if old_new:
        records += scaling_records(size, a, b, auto, plans["ozaki2.auto.by-rows"], repeats=repeats)
    del providers, timed_c, plans
    cp.get_default_memory_pool().free_all_blocks()
    if stages:
        records += stage_records(size, count, a, b, auto, repeats=repeats)
    if record:
        bench.record(records)
    if show:
        print(f"m = n = k = {size}: Ozaki-II chose {count} moduli ({choice.describe()})")
        bench.print_table(records, metric="ms")
    return records


def scaling_records(
    size: int, a: Any, b: Any, auto: Ozaki2Gemm, by_rows: Ozaki2Gemm, *, repeats: int = 10
) -> list[bench.BenchRecord]:
    """The automatic plan's scaling alone (after its choice, B's column statistics known), interleaved round by
    round: the default (``ozaki2.scaling.auto``), A's residues with their row statistics found again
    (``ozaki2.scaling.auto.recompute``), and B's residues by B^T's rows in ``by_rows``, a plan with
    ``columns="by-rows"`` (``ozaki2.scaling.auto.by-rows``; its words and exponents checked against the default's)."""
    auto.choose(a, b)
    by_rows.choose(a, b)
    providers = {
        "ozaki2.scaling.auto": lambda: auto.scale(a, b, columns_known=True, rows_known=True),
        "ozaki2.scaling.auto.recompute": lambda: auto.scale(a, b, columns_known=True, rows_known=False),
        "ozaki2.scaling.auto.by-rows": lambda: by_rows.scale(a, b, columns_known=True, rows_known=True),
    }
    records = bench.compare(providers, m=size, n=size, k=size, repeats=repeats, show=False)
    count = auto.count
    same = bool(cp.array_equal(auto.b_res[:count], by_rows.b_res[:count])) and bool(cp.array_equal(auto.nu, by_rows.nu))
    for r in records:
        statistics = "recompute" if r.name.endswith("recompute") else "reuse"
        r.params = {"timing": "interleaved", "moduli": count, "statistics": statistics, "columns": auto.columns_mode}
        if r.name.endswith("by-rows"):
            r.params |= {"columns": "by-rows", "same_b_words_as_auto": same}
    return records


def stage_records(
    size: int, count: int, a: Any, b: Any, auto: Ozaki2Gemm, *, repeats: int = 10
) -> list[bench.BenchRecord]:
    """Each stage of the default design alone at ``count`` moduli, and of the batched and late designs' products
    and reconstruction, each with its floor at this run's int8 rate and copy bandwidth."""
    m = n = k = size
    rng = np.random.default_rng(0)
    a8 = cp.asarray(rng.integers(-128, 128, (m, k), dtype=np.int8))
    b8 = cp.asarray(rng.integers(-128, 128, (n, k), dtype=np.int8))
    igemm = bench.bench(cublas.igemm_provider(a8, b8), m=m, n=n, k=k, name="cublas.igemm", repeats=repeats)
    del a8, b8
    copy_tbs = measure_copy_bandwidth()
    int8_tops = igemm.tflops
    records = [igemm]

    def floor(design: str, stage: str, auto_count: bool = False) -> dict[str, Any]:
        works = {w.name: w for w in model.design(design, m, n, k, count, auto=auto_count)}
        w = works[stage]
        return {
            "floor_ms": w.floor_ms(int8_tops, copy_tbs),
            "floor_bytes": w.bytes,
            "copy_tbs": copy_tbs,
            "int8_tops": int8_tops,
        }

    def timed(name: str, fn: Callable[[], object], params: dict[str, Any], **rates: Any) -> None:
        params = params | {"host_ms": host_ms(fn)}
        records.append(bench.bench(fn, m=m, n=n, k=k, name=name, params=params, repeats=repeats, **rates))

    c = cp.empty((m, n))
    timed(
        "ozaki2.choice",
        lambda: auto.choose(a, b),
        {"moduli": count} | floor("early", "choice", True),
        bytes_moved=model.design("early", m, n, k, count, auto=True)[0].bytes,
    )
    for options in ({"digits": "early"}, {"products": "batched", "digits": "early"}, {"digits": "late"}):
        plan = Ozaki2Gemm(m, n, k, count, **options)
        plan(a, b, out=c)
        design = "late" if plan.digits is None else "early"
        modes = {"moduli": count, **_modes(plan)}
        if options == {"digits": "early"}:  # the scaling is the same in every design: its params name none
            timed(  # the automatic plan's (``auto``, after its choice): B's column statistics are the choice's
                "ozaki2.scaling",
                lambda: auto.scale(a, b, columns_known=True, rows_known=True),
                {"moduli": count, "auto": True} | floor(design, "scaling", True),
                bytes_moved=model.design(design, m, n, k, count, auto=True)[1].bytes,
            )
        products = model.design(design, m, n, k, count)
        gemm_floor = floor(design, "products")
        if plan.digits is not None:  # the digits are part of this stage: their floor adds
            gemm_floor["floor_ms"] += floor(design, "digits")["floor_ms"]
        timed("ozaki2.products", plan.products, modes | gemm_floor, flops=2.0 * count * m * n * k)
        if options.get("products") != "batched":
            timed(
                "ozaki2.reconstruct",
                lambda plan=plan: plan.reconstruct(a, b, c, c, 1.0, 0.0),
                modes | floor(design, "reconstruct"),
                bytes_moved=products[-1].bytes,
            )
        del plan
        cp.get_default_memory_pool().free_all_blocks()
    return records


def accuracy_records(
    n: int = 2048,
    phis: Sequence[float] = (0.0, 0.5, 1.0, 2.0, 4.0),
    counts: Sequence[int] = range(12, 19),
    *,
    ozaki1_auto: Callable[[int, int, int], Any] | None = None,
    seed: int = 4,
    record: bool = True,
) -> list[bench.BenchRecord]:
    """Errors against the exact product on 16 sampled rows of n^3 products: Ozaki-II against the moduli count
    (normal inputs, ``ozaki2.fixed``), and at each phi the automatic counts of Ozaki-II (``ozaki2.auto``) and
    Ozaki-I (``ozaki.auto``, a factory ``(m, n, k) -> plan`` given by the caller) beside cuBLAS DGEMM on the same
    inputs. Times are per call, 5 repeats."""
    rows = error_rows(n, count=16, seed=seed)
    records: list[bench.BenchRecord] = []

    def measure(name: str, fn: Any, a_h: np.ndarray, b_h: np.ndarray, params: dict[str, Any]) -> None:
        out = fn()
        records.append(
            bench.bench(
                fn, m=n, n=n, k=n, name=name, params=params, repeats=5, error=sampled_error(out, a_h, b_h, rows)
            )
        )

    a_h, b_h = inputs.normal(n, n, seed), inputs.normal(n, n, seed + 1)
    a, b = cp.asarray(a_h), cp.asarray(b_h)
    for count in counts:
        plan = Ozaki2Gemm(n, n, n, count)
        measure("ozaki2.fixed", lambda plan=plan: plan(a, b), a_h, b_h, {"moduli": count, "phi": 0.0, "auto": False})
    auto = Ozaki2Gemm(n, n, n, "auto")
    plan1 = ozaki1_auto(n, n, n) if ozaki1_auto is not None else None
    for phi in phis:
        if phi:
            a_h, b_h = inputs.exponent_spread(n, n, phi, seed + 2), inputs.exponent_spread(n, n, phi, seed + 3)
        a, b = cp.asarray(a_h), cp.asarray(b_h)
        measure("cublas.dgemm", lambda a=a, b=b: cublas.dgemm(a, b), a_h, b_h, {"phi": phi})
        auto(a, b)
        params = {
            "moduli": auto.count,
            "phi": phi,
            "auto": True,
            "estimate_u": auto.choice.estimate,
            "target_u": auto.choice.target,
        }
        measure("ozaki2.auto", lambda a=a, b=b: auto(a, b), a_h, b_h, params)
        if plan1 is not None:
            plan1(a, b)
            params = {
                "slices": plan1.slices,
                "phi": phi,
                "auto": True,
                "estimate_u": plan1.choice.estimate,
                "target_u": plan1.choice.target,
            }
            measure("ozaki.auto", lambda a=a, b=b: plan1(a, b), a_h, b_h, params)
    if record:
        bench.record(records)
    return records


def accuracy_over_k_records(
    ks: Sequence[int] = (1024, 8192, 16384),
    phis: Sequence[float] = (0.0, 0.5, 1.0, 2.0, 4.0),
    n: int = 1024,
    *,
    seed: int = 4,
    repeats: int = 3,
    record: bool = True,
) -> list[bench.BenchRecord]:
    """Errors against the exact product (double-double, 16 sampled rows) of cuBLAS DGEMM and of Ozaki-II with its
    automatic count on A (n, k) and B (k, n) at each k and exponent spread phi (normal entries at phi = 0): the
    longer k, the larger DGEMM's error and the more moduli the choice must find. One plan a k; each input's exact
    product is found once for both."""
    rows = inputs.sample_rows(n, 16, seed)
    against = f"double-double, {len(rows)} sampled rows"
    records: list[bench.BenchRecord] = []
    for k in ks:
        auto = Ozaki2Gemm(n, n, k, "auto")
        for phi in phis:
            if phi:
                a_h, b_h = inputs.exponent_spread(n, k, phi, seed + 2), inputs.exponent_spread(k, n, phi, seed + 3)
            else:
                a_h, b_h = inputs.normal(n, k, seed), inputs.normal(k, n, seed + 1)
            hi, lo = matmul_dd(a_h[rows], b_h)
            a, b = cp.asarray(a_h), cp.asarray(b_h)
            emulated = functools.partial(auto, a, b)
            emulated()  # the count for these inputs
            choice = {"moduli": auto.count, "auto": True, "estimate_u": auto.choice.estimate}
            choice |= {"target_u": auto.choice.target}
            for name, fn, params in (
                ("cublas.dgemm", functools.partial(cublas.dgemm, a, b), {"phi": phi}),
                ("ozaki2.auto", emulated, {"phi": phi, **choice}),
            ):
                error = error_report(cp.asnumpy(fn())[rows], hi, lo, against=against)
                records.append(bench.bench(fn, m=n, n=n, k=k, name=name, params=params, repeats=repeats, error=error))
        del auto
        cp.get_default_memory_pool().free_all_blocks()
    if record:
        bench.record(records)
    return records

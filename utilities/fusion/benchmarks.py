"""Benchmarks of the block-resident fusion track: fused kernels beside both library paths, in one run.

Record names: ``b2b.fused`` (the exercise's kernel, one row tile per block), ``b2b.persistent`` (B0 and B1 kept
in shared memory by one wave of blocks that walk the row tiles; where ``PERSISTENT`` names the shape),
``b2b.pipelined`` (persistent too, GEMM 0 on cuBLASDx's device pipeline; where ``PIPELINED`` names the shape),
``b2b.epilogue`` (nvmath/cuBLASLt epilogues), ``b2b.plain`` (cuBLAS + CuPy elementwise: the ``library`` path;
``b2b.library`` in reports before 2026-11-23), and ``gemm_bias_relu.fused`` / ``.epilogue`` / ``.separate``. A
record's m, n, k are M, N1, K0 (GEMM: M, N, K); ``params`` hold K0, N0, N1, the bytes the path must move
(``utilities.fusion.model``) and the fraction of the GPU's data-sheet HBM bandwidth achieved; ``tflops`` counts
the GEMMs' 2 M (K0 N0 + N0 N1).

Timing: held samples (``bench.bench(..., hold=True)``): the GPU spins while the host (Python, launches,
nvmath's bookkeeping) queues ten calls, so that the samples are GPU time even for calls shorter than their host
side. The calls cycle through several copies of the operands, at least three L2 caches' worth
(``bench.copies_for``), so that the inputs come from HBM.
Errors: on 16 sampled rows against the FP64 reference; ``max_elementwise`` is max |error| / the derived bound
(``utilities.fusion.reference``), so at most 1 for a result within the bound.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import cupy as cp
import numpy as np

from .. import bench, peaks
from ..errors import bounded_error
from ..inputs import sample_rows
from . import baselines as lib
from . import model, reference
from .tensorcore import BackToBack, BlockConfig, GemmBiasRelu, Kernels
from .tensorcore_persistent import PersistentBackToBack, PipelineConfig, PipelinedBackToBack

TARGET_SHAPES = ((576, 64, 128), (64, 256, 64))  # (K0, N0, N1): CUTLASS example 13's, and a wide intermediate
LOSING = ((2**16, 4096, 256, 64),)  # (M, K0, N0, N1): compute-bound, D0 a tenth of the traffic
GEMM_SHAPES = ((2**16, 256, 256), (8192, 8192, 8192))  # (M, N, K): memory-bound (fusion pays), compute-bound
# (K0, N0, N1) -> the persistent kernel's block, chosen on an H100 (see the fusion report's notes)
PERSISTENT = {
    (64, 256, 64): BlockConfig(tile_m=32, threads=128, depth=3),  # 104 KiB: two blocks an SM
    (576, 64, 128): BlockConfig(tile_m=128, threads=256, depth=3),  # 216 KiB: one block an SM
}
# (K0, N0, N1) -> the pipelined kernel's block: at (576, 64, 128) it lost to the streaming kernel with the best of
# five blocks (instructor-notes/fusion.md), so it runs where it wins
PIPELINED = {(64, 256, 64): PipelineConfig(tile_m=64, threads=128, tile_k=32, depth=2)}  # 113 KiB: two blocks an SM


def _b2b_operands(m: int, k0: int, n0: int, n1: int, seed: int, batch: int | None = None) -> dict[str, Any]:
    """Random FP16 operands on the GPU, scaled as ``reference.b2b_inputs``'s random case."""
    rng = cp.random.default_rng(seed)
    lead = () if batch is None else (batch,)

    def normal(shape: tuple[int, ...], scale: float) -> Any:
        return (rng.standard_normal((*lead, *shape), dtype=cp.float32) * scale).astype(cp.float16)

    return {
        "a0": normal((m, k0), 1.0),
        "b0": normal((k0, n0), 1 / math.sqrt(k0)),
        "b1": normal((n0, n1), math.sqrt(2 / n0)),
        "c1": normal((m, n1), 1.0),
    }


RECORD_NAMES = {"library": "plain"}  # path -> report name (RESULTS.md: b2b.plain is the library GEMMs + elementwise)


def _b2b_error(d1: Any, ops: dict[str, Any], alphas: tuple[float, float, float], rows: np.ndarray) -> dict[str, Any]:
    host = {k: cp.asnumpy(v) for k, v in ops.items()}
    r = reference.b2b_ref(host["a0"][rows], host["b0"], host["b1"], host["c1"][rows], *alphas)
    return bounded_error(cp.asnumpy(d1)[rows], r.d1, r.bound_d1, f"FP64 reference, {len(rows)} sampled rows")


def b2b_records(
    m: int, k0: int, n0: int, n1: int, *, batch: int | None = None, repeats: int = 10, seed: int = 0
) -> list[bench.BenchRecord]:
    """Fused, epilogue-fused library and plain library back-to-back GEMM at one shape, errors included."""
    alphas = (0.75, 1.25, -0.5)
    b = 1 if batch is None else batch
    set_bytes = model.b2b_traffic("fused", m, k0, n0, n1, b).bytes
    sets = [_b2b_operands(m, k0, n0, n1, seed + i, batch) for i in range(bench.copies_for(set_bytes))]
    fused = BackToBack(m, k0, n0, n1, batch=batch)
    library = lib.LibraryB2B(m, k0, n0, n1, batch=batch)
    outs = [cp.empty_like(s["c1"]) for s in sets]
    epilogues = [lib.EpilogueB2B(*s.values(), *alphas) for s in sets]

    def calls(fn: Callable[[dict[str, Any], Any], object]) -> list[Callable[[], object]]:
        return [lambda s=s, o=o: fn(s, o) for s, o in zip(sets, outs, strict=True)]

    paths: dict[str, list[Callable[[], object]]] = {"fused": calls(lambda s, o: fused(*s.values(), *alphas, out=o))}
    results = {"fused": fused(*sets[0].values(), *alphas)}
    if (k0, n0, n1) in PERSISTENT:
        persistent = PersistentBackToBack(m, k0, n0, n1, batch=batch, cfg=PERSISTENT[k0, n0, n1])
        paths["persistent"] = calls(lambda s, o: persistent(*s.values(), *alphas, out=o))
        results["persistent"] = persistent(*sets[0].values(), *alphas)
    if (k0, n0, n1) in PIPELINED:  # a plan per operand set: the pipeline is built for its A0 and B0
        as3 = (lambda x: x[None]) if batch is None else (lambda x: x)
        views = [{k: as3(v) for k, v in s.items()} | {"out": as3(o)} for s, o in zip(sets, outs, strict=True)]
        plans = [PipelinedBackToBack(v["a0"], v["b0"], n1, PIPELINED[k0, n0, n1]) for v in views]
        paths["pipelined"] = [
            lambda p=p, v=v: p(v["b1"], v["c1"], *alphas, out=v["out"]) for p, v in zip(plans, views, strict=True)
        ]
        d1 = plans[0](views[0]["b1"], views[0]["c1"], *alphas)
        results["pipelined"] = d1[0] if batch is None else d1
    paths |= {
        "epilogue": [e.__call__ for e in epilogues],
        "library": calls(lambda s, o: library(*s.values(), *alphas, out=o)),
    }
    results |= {"epilogue": epilogues[0](), "library": library(*sets[0].values(), *alphas)}
    records = _b2b_path_records(paths, results, sets, alphas, (m, k0, n0, n1), batch, repeats, seed)
    for e in epilogues:
        e.free()
    return records


def b2b_yours_beside_ours(
    kernel_factory: Any, m: int = 2**17, k0: int = 576, n0: int = 64, n1: int = 128, *, repeats: int = 10, seed: int = 0
) -> list[bench.BenchRecord]:
    """Your back-to-back kernel (``kernel_factory``, the factory the exercise wrote) beside the course's and the
    library's epilogue-fused path, on the same operands, errors included.

    Both fused kernels run with ``keep_d0=True``, the variant the check built: they also write D0 (M x N0 FP16),
    counted in their bytes, so yours builds nothing new. Names: ``b2b.yours``, ``b2b.fused_keep_d0``,
    ``b2b.epilogue``.
    """
    alphas = (0.75, 1.25, -0.5)
    extra = 2 * m * n0  # the D0 tile each block also writes
    set_bytes = model.b2b_traffic("fused", m, k0, n0, n1).bytes + extra
    sets = [_b2b_operands(m, k0, n0, n1, seed + i, None) for i in range(bench.copies_for(set_bytes))]
    outs = [cp.empty_like(s["c1"]) for s in sets]
    plans = {
        "yours": BackToBack(m, k0, n0, n1, keep_d0=True, kernels=Kernels(b2b=kernel_factory)),
        "fused_keep_d0": BackToBack(m, k0, n0, n1, keep_d0=True),
    }
    epilogues = [lib.EpilogueB2B(*s.values(), *alphas) for s in sets]
    paths = {
        name: [lambda p=p, s=s, o=o: p(*s.values(), *alphas, out=o) for s, o in zip(sets, outs, strict=True)]
        for name, p in plans.items()
    }
    paths["epilogue"] = [e.__call__ for e in epilogues]
    results = {name: p(*sets[0].values(), *alphas) for name, p in plans.items()}
    results["epilogue"] = epilogues[0]()
    records = _b2b_path_records(
        paths, results, sets, alphas, (m, k0, n0, n1), None, repeats, seed, extra_bytes=dict.fromkeys(plans, extra)
    )
    for e in epilogues:
        e.free()
    return records


def b2b_lever_records(
    cfg: BlockConfig, m: int = 2**18, k0: int = 576, n0: int = 64, n1: int = 128, *, repeats: int = 10, seed: int = 0
) -> list[bench.BenchRecord]:
    """The streaming kernel with the course's block (``b2b.fused``) and with the block ``cfg`` (``b2b.lever``, its
    ``params`` hold the block) beside the epilogue-fused library path, on the same operands, errors included."""
    alphas = (0.75, 1.25, -0.5)
    set_bytes = model.b2b_traffic("fused", m, k0, n0, n1).bytes
    sets = [_b2b_operands(m, k0, n0, n1, seed + i, None) for i in range(bench.copies_for(set_bytes))]
    outs = [cp.empty_like(s["c1"]) for s in sets]
    plans = {"fused": BackToBack(m, k0, n0, n1), "lever": BackToBack(m, k0, n0, n1, cfg=cfg)}
    epilogues = [lib.EpilogueB2B(*s.values(), *alphas) for s in sets]
    paths = {
        name: [lambda p=p, s=s, o=o: p(*s.values(), *alphas, out=o) for s, o in zip(sets, outs, strict=True)]
        for name, p in plans.items()
    }
    paths["epilogue"] = [e.__call__ for e in epilogues]
    results = {name: p(*sets[0].values(), *alphas) for name, p in plans.items()}
    results["epilogue"] = epilogues[0]()
    records = _b2b_path_records(paths, results, sets, alphas, (m, k0, n0, n1), None, repeats, seed)
    for e in epilogues:
        e.free()
    lever = next(r for r in records if r.name == "b2b.lever")
    lever.params |= {"tile_m": cfg.tile_m, "tile_k": cfg.tile_k, "threads": cfg.threads}
    return records


def _b2b_path_records(
    paths: dict[str, list[Callable[[], object]]],
    results: dict[str, Any],
    sets: list[dict[str, Any]],
    alphas: tuple[float, float, float],
    shape: tuple[int, int, int, int],
    batch: int | None,
    repeats: int,
    seed: int,
    extra_bytes: dict[str, int] | None = None,
) -> list[bench.BenchRecord]:
    """Time each path's calls (held) and check its first result against the FP64 reference on sampled rows; bytes
    and FLOPs from ``model.b2b_traffic`` (the fused kernels' variants count as ``fused``), plus ``extra_bytes``."""
    m, k0, n0, n1 = shape
    rows, peak = sample_rows(m, seed=seed), peaks.current_hbm_tbs()
    first = {k: v if batch is None else v[0] for k, v in sets[0].items()}  # batch 0's operands
    records = []
    for path, fns in paths.items():
        t = model.b2b_traffic(
            path if path in model.B2B_PATHS else "fused", m, k0, n0, n1, 1 if batch is None else batch
        )
        moved = t.bytes + (extra_bytes or {}).get(path, 0)
        params = {"k0": k0, "n0": n0, "n1": n1, "batch": batch, "bytes": moved, "kernels": t.kernels}
        d1 = results[path] if batch is None else results[path][0]
        rec = bench.bench(
            fns,
            hold=True,
            repeats=repeats,
            name=f"b2b.{RECORD_NAMES.get(path, path)}",
            m=m,
            n=n1,
            k=k0,
            params=params,
            flops=t.flops,
            bytes_moved=moved,
            error=_b2b_error(d1, first, alphas, rows),
        )
        records.append(_with_hbm_fraction(rec, peak))
    return records


def _with_hbm_fraction(rec: bench.BenchRecord, peak: float | None) -> bench.BenchRecord:
    """The record, with its achieved bandwidth as a fraction of HBM's (``hbm_fraction``) when both are known."""
    if peak and rec.bandwidth_tbs is not None:
        rec.params["hbm_fraction"] = rec.bandwidth_tbs / peak
    return rec


def _block(cfg: BlockConfig) -> dict[str, Any]:
    """A block as a record's params: the tile and the threads."""
    return {"tile": [cfg.tile_m, cfg.tile_n, cfg.tile_k], "threads": cfg.threads}


def gemm_records(
    m: int, n: int, k: int, *, repeats: int = 10, seed: int = 0, yours: Any = None, lever: BlockConfig | None = None
) -> list[bench.BenchRecord]:
    """Fused GEMM + bias + ReLU beside cuBLASLt's RELU_BIAS epilogue and cuBLAS + an elementwise kernel; with
    ``yours`` (a kernel factory, as the exercise takes), that kernel too, as ``gemm_bias_relu.yours``; with ``lever``
    (a ``BlockConfig`` for ``GemmBiasRelu``), the course's kernel built with that block too, as
    ``gemm_bias_relu.lever`` (its ``params`` hold the block)."""
    rng = cp.random.default_rng(seed)
    set_bytes = model.gemm_bias_relu_traffic("fused", m, n, k).bytes
    sets = [
        (
            rng.standard_normal((m, k), dtype=cp.float32).astype(cp.float16),
            (rng.standard_normal((k, n), dtype=cp.float32) / math.sqrt(k)).astype(cp.float16),
            (rng.standard_normal(n, dtype=cp.float32) / 2).astype(cp.float16),
        )
        for _ in range(bench.copies_for(set_bytes))
    ]
    outs = [cp.empty((m, n), cp.float16) for _ in sets]
    fused, separate = GemmBiasRelu(m, n, k), lib.SeparateGemmBiasRelu(m, n, k)
    epilogues = [lib.EpilogueGemmBiasRelu(*s) for s in sets]
    plans = {"fused": fused, "separate": separate}
    if yours is not None:
        plans = {"yours": GemmBiasRelu(m, n, k, kernels=Kernels(gemm_bias_relu=yours)), **plans}
    if lever is not None:
        plans = {**plans, "lever": GemmBiasRelu(m, n, k, cfg=lever)}
    paths = {
        name: [lambda plan=plan, s=s, o=o: plan(*s, out=o) for s, o in zip(sets, outs, strict=True)]
        for name, plan in plans.items()
    }
    paths["epilogue"] = [e.__call__ for e in epilogues]
    results = {name: plan(*sets[0]) for name, plan in plans.items()}
    results["epilogue"] = epilogues[0]()
    rows = sample_rows(m, seed=seed)
    a, b, bias = (cp.asnumpy(x) for x in sets[0])
    want, bound = reference.gemm_bias_relu_ref(a[rows], b, bias)
    peak = peaks.current_hbm_tbs()
    records = []
    for path, fns in paths.items():
        t = model.gemm_bias_relu_traffic("fused" if path in ("yours", "lever") else path, m, n, k)
        error = bounded_error(cp.asnumpy(results[path])[rows], want, bound, f"FP64 reference, {len(rows)} rows")
        rec = bench.bench(
            fns,
            hold=True,
            repeats=repeats,
            name=f"gemm_bias_relu.{path}",
            m=m,
            n=n,
            k=k,
            params={"bytes": t.bytes, "kernels": t.kernels, **(_block(lever) if path == "lever" and lever else {})},
            flops=t.flops,
            bytes_moved=t.bytes,
            error=error,
        )
        records.append(_with_hbm_fraction(rec, peak))
    for e in epilogues:
        e.free()
    cp.get_default_memory_pool().free_all_blocks()
    return records


def fusion_records(
    ms: Sequence[int] = (2**17, 2**18),
    shapes: Sequence[tuple[int, int, int]] = TARGET_SHAPES,
    losing: Sequence[tuple[int, int, int, int]] = LOSING,
    gemm_shapes: Sequence[tuple[int, int, int]] = GEMM_SHAPES,
    *,
    batched: tuple[int, int, int, int, int] | None = (8, 2**14, 576, 64, 128),
    repeats: int = 10,
    record: bool = True,
    show: bool = True,
) -> list[bench.BenchRecord]:
    """Every record of the track: the target shapes at each M, the losing shapes, a batched case, the warm-up."""
    records: list[bench.BenchRecord] = []
    for m in ms:
        for k0, n0, n1 in shapes:
            records += b2b_records(m, k0, n0, n1, repeats=repeats)
            cp.get_default_memory_pool().free_all_blocks()
    for m, k0, n0, n1 in losing:
        for r in (recs := b2b_records(m, k0, n0, n1, repeats=repeats)):
            r.params["losing"] = True
        records += recs
    if batched is not None:
        batch, m, k0, n0, n1 = batched
        records += b2b_records(m, k0, n0, n1, batch=batch, repeats=repeats)
    for m, n, k in gemm_shapes:
        records += gemm_records(m, n, k, repeats=repeats)
    cp.get_default_memory_pool().free_all_blocks()
    if record:
        bench.record(records)
    if show:
        print(summary(records))
    return records


def summary(records: Sequence[bench.BenchRecord]) -> str:
    """One line per record: shape, time, GB/s (and share of HBM), TFLOP/s, error, and speedups of the fused path."""
    lines = [f"{'name':<24} {'shape':<28} {'us':>8} {'GB/s':>7} {'HBM':>5} {'TFLOP/s':>8} {'err/bound':>9} {'x':>6}"]
    fused_us: dict[tuple, float] = {}
    for r in records:
        key = (r.name.split(".")[0], r.m, r.n, r.k, r.params.get("n0"), r.params.get("batch"))
        if r.name.endswith((".fused", ".persistent", ".pipelined", ".fused_keep_d0", ".lever")):
            fused_us[key] = min(r.time.median, fused_us.get(key, float("inf")))
    for r in records:
        key = (r.name.split(".")[0], r.m, r.n, r.k, r.params.get("n0"), r.params.get("batch"))
        shape = (
            f"M={r.m} K0={r.k} N0={r.params['n0']} N1={r.n}"
            + (f" b={r.params['batch']}" if r.params.get("batch") else "")
            if "n0" in r.params
            else f"M={r.m} N={r.n} K={r.k}"
        )
        gbs = (r.bandwidth_tbs or 0.0) * 1e3
        hbm = f"{r.params['hbm_fraction']:.0%}" if "hbm_fraction" in r.params else "-"
        err = f"{r.error['max_elementwise']:.2f}" if r.error else "-"
        speedup = f"{r.time.median / fused_us[key]:.2f}" if key in fused_us else "-"
        lines.append(
            f"{r.name:<24} {shape:<28} {r.time.median * 1e3:8.1f} {gbs:7.0f} {hbm:>5} {r.tflops:8.1f} {err:>9} "
            f"{speedup:>6}"
        )
    lines.append(
        "x: this path's time / the fastest fused kernel's (above 1: fusion wins); err/bound <= 1: within the bound"
    )
    return "\n".join(lines)

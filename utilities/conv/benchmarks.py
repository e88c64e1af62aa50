"""Benchmarks of the convolution track: the fused kernel beside the unfused course path and the library, in one run.

Record names (RESULTS.md): ``conv.fused`` (the course's kernel, bias and ReLU in its epilogue), ``conv.unfused``
(the same kernel storing the convolution, then a bias + ReLU kernel), ``conv.library`` (the fastest library path
that ran; ``params["which"]`` names it), and each library path that ran on its own: ``conv.cudnn`` (cuDNN through
PyTorch; ``params["which"]`` says fused or not) and ``conv.im2col`` (im2col + cuBLAS + bias + ReLU). With
``yours`` (the attendee's kernel factory, index map), ``conv.yours`` too. A record's m, n, k are the implicit
GEMM's (B H W, C_out, 9 C_in); ``params`` hold the shape, the bytes the path must move (``utilities.conv.model``)
and the fraction of the data-sheet HBM bandwidth achieved.

Timing: held samples (``bench.bench(..., hold=True)``) over enough copies of the operands to span three L2 caches.
Errors: max |error| / derived bound on 64 sampled pixels (``utilities.conv.reference``), at most 1 within it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import cupy as cp
import numpy as np

from .. import bench, peaks
from ..errors import bounded_error
from . import model
from . import reference as ref
from .baselines import CudnnConv, Im2colConv, UnfusedConv
from .tensorcore import Conv3x3

# (batch, height, width, C_in, C_out): the published shapes' range (B 4-8, C 32-64, H = W 64-512), the target
# (8 x 512 x 512, 64 -> 64), and wide channels, where the convolution is compute-bound and fusion stops mattering
REPORT_SHAPES = ((4, 64, 64, 32, 32), (8, 128, 128, 64, 64), (8, 256, 256, 64, 64), (4, 512, 512, 32, 32),
                 (8, 512, 512, 64, 64), (8, 64, 64, 256, 256))  # fmt: skip
TARGET = ref.ConvShape(8, 512, 512, 64, 64)
PIXELS_CHECKED = 64


def conv_operands(shape: ref.ConvShape, seed: int) -> tuple[Any, Any, Any]:
    """Random FP16 x, w, bias on the GPU, scaled as ``reference.conv_inputs``'s random case."""
    rng = cp.random.default_rng(seed)

    def normal(dims: tuple[int, ...], scale: float) -> Any:
        return (rng.standard_normal(dims, dtype=cp.float32) * scale).astype(cp.float16)

    return (normal((shape.batch, shape.height, shape.width, shape.c_in), 1.0),
            normal((3, 3, shape.c_in, shape.c_out), 1 / math.sqrt(shape.k)), normal((shape.c_out,), 0.5))  # fmt: skip


def sample_pixels(shape: ref.ConvShape, seed: int) -> np.ndarray:
    """Output pixels to check: the four corners of the first and last image, and random others."""
    rng = np.random.default_rng(seed)
    hw, w = shape.height * shape.width, shape.width
    corners = [0, w - 1, hw - w, hw - 1]
    last = (shape.batch - 1) * hw
    picked = {*corners, *(last + c for c in corners), *rng.integers(0, shape.m, PIXELS_CHECKED).tolist()}
    return np.array(sorted(picked))


def _error(got: Any, inputs: tuple[np.ndarray, ...], pixels: np.ndarray, fused: bool) -> dict[str, Any]:
    r = ref.conv_ref(*inputs, rows=pixels)
    flat = cp.asnumpy(cp.ascontiguousarray(got)).reshape(-1, r.out.shape[1])[pixels]
    return bounded_error(flat, r.out, r.bound if fused else r.bound_unfused, f"FP64 reference, {len(pixels)} pixels")


def conv_records(shape: ref.ConvShape, *, repeats: int = 10, seed: int = 0, yours: Any = None,
                 library: bool = True) -> list[bench.BenchRecord]:  # fmt: skip
    """Every path at ``shape``; ``yours``: (kernel factory, index map) or None; ``library``: the library paths too."""
    set_bytes = model.conv_traffic("fused", shape).bytes
    sets = [conv_operands(shape, seed + i) for i in range(bench.copies_for(set_bytes))]
    outs = [cp.empty((shape.batch, shape.height, shape.width, shape.c_out), cp.float16) for _ in sets]
    plans: dict[str, Callable[..., Any]] = {"fused": Conv3x3(shape), "unfused": UnfusedConv(shape)}
    if yours is not None:
        factory, neighbor = yours
        plans = {"yours": Conv3x3(shape, kernel_factory=factory, neighbor=neighbor), **plans}
    paths = {name: [lambda p=p, s=s, o=o: p(*s, out=o) for s, o in zip(sets, outs, strict=True)]
             for name, p in plans.items()}  # fmt: skip
    which = {name: name for name in plans}
    if library:
        im2col = Im2colConv(shape)
        paths["im2col"] = [lambda s=s, o=o: im2col(*s, out=o) for s, o in zip(sets, outs, strict=True)]
        if CudnnConv.available() is None:
            cudnn = [CudnnConv(shape, s[1], s[2]) for s in sets]
            paths["cudnn"] = [lambda c=c, s=s: c(s[0]) for c, s in zip(cudnn, sets, strict=True)]
            which["cudnn"] = cudnn[0].which
        else:
            print(f"conv: {CudnnConv.available()}")
        which["im2col"] = "im2col + cuBLAS + bias/ReLU"
    pixels = sample_pixels(shape, seed)
    host = tuple(cp.asnumpy(v) for v in sets[0])
    peak = peaks.current_hbm_tbs()
    dims = {"batch": shape.batch, "height": shape.height, "width": shape.width, "c_in": shape.c_in,
            "c_out": shape.c_out}  # fmt: skip
    records = []
    for name, fns in paths.items():
        result = fns[0]()
        counted = {"yours": "fused", "cudnn": "fused" if which.get("cudnn") == "cudnn fused" else "unfused"}
        t = model.conv_traffic(counted.get(name, name), shape)
        params = {**dims, "bytes": t.bytes, "kernels": t.kernels, "which": which[name]}
        rec = bench.bench(
            fns, hold=True, repeats=repeats, name=f"conv.{name}", m=shape.m, n=shape.n, k=shape.k, params=params,
            flops=t.flops, bytes_moved=t.bytes, error=_error(result, host, pixels, fused=name in ("fused", "yours")),
        )  # fmt: skip
        if peak and rec.bandwidth_tbs is not None:
            rec.params["hbm_fraction"] = rec.bandwidth_tbs / peak
        records.append(rec)
    libs = [r for r in records if r.name in ("conv.cudnn", "conv.im2col")]
    if libs:
        best = min(libs, key=lambda r: r.time.median)
        records.append(dataclasses.replace(best, name="conv.library", params=dict(best.params)))
    cp.get_default_memory_pool().free_all_blocks()
    return records


def conv_benchmarks(shapes: Sequence[tuple[int, ...]] = REPORT_SHAPES, *, repeats: int = 10, record: bool = True,
                    show: bool = True) -> list[bench.BenchRecord]:  # fmt: skip
    """Every path at every report shape, recorded to the GPU report."""
    records: list[bench.BenchRecord] = []
    for dims in shapes:
        records += conv_records(ref.ConvShape(*dims), repeats=repeats)
    if record:
        bench.record(records)
    if show:
        print(summary(records))
    return records


def summary(records: Sequence[bench.BenchRecord]) -> str:
    """One line per record, and each shape's fusion gain (unfused / fused) and fused / library ratio."""
    lines = [f"{'name':<14} {'shape':<24} {'us':>9} {'TFLOP/s':>8} {'GB/s':>7} {'err/bound':>9}  which"]
    by_shape: dict[tuple[int, ...], dict[str, float]] = {}
    for r in records:
        p = r.params
        shape = f"B={p['batch']} {p['height']}x{p['width']} {p['c_in']}->{p['c_out']}"
        key = (p["batch"], p["height"], p["width"], p["c_in"], p["c_out"])
        by_shape.setdefault(key, {})[r.name] = r.time.median
        err = f"{r.error['max_elementwise']:.2f}" if r.error else "-"
        lines.append(f"{r.name:<14} {shape:<24} {r.time.median * 1e3:9.1f} {r.tflops:8.1f} "
                     f"{(r.bandwidth_tbs or 0) * 1e3:7.0f} {err:>9}  {p.get('which', '')}")  # fmt: skip
    for key, t in by_shape.items():
        if "conv.fused" in t and "conv.unfused" in t:
            gain = t["conv.unfused"] / t["conv.fused"]
            lib = f", library / fused {t['conv.library'] / t['conv.fused']:.2f}" if "conv.library" in t else ""
            lines.append(f"B={key[0]} {key[1]}x{key[2]} {key[3]}->{key[4]}: unfused / fused {gain:.2f}{lib}")
    return "\n".join(lines)

"""Benchmarks of the convolution track: the fused kernels beside the unfused course paths, the library and a
Triton peer, in one run.

    python -m utilities.conv.benchmarks            # every kernel checked, then the settings of speed_configs()
    python -m utilities.conv.benchmarks --quick    # the same with the plan's default tile only, 5 rounds
    python -m utilities.conv.benchmarks --tiles 128x64x64-t128-d3-g1-s,128x64x64-t128-d2-g1-r

Build first (minutes, in parallel): ``python -m utilities.prebuild --jobs <utilities.prebuild.CONV_SPEED_JOBS>``.

Record names (RESULTS.md), one name per kernel in every function and notebook: ``conv.fused`` (the course's fastest
fused kernel of those timed, ``params["tile"]`` its tile: a pipelined kernel's ``128x64x64-t128-d3-g1-s`` or the halo
kernel's ``h128x64x64-t256``, ``utilities.conv.tensorcore_halo``), ``conv.fused@<tile>`` (each tile timed),
``conv.unfused`` (that kernel storing the convolution, then a bias + ReLU kernel), ``conv.twostage`` (notebook 2c's
exercise kernel: a two-stage K loop), ``conv.twostage.unfused`` (the two-stage kernel storing the convolution, then the
bias + ReLU kernel), ``conv.gather_only@<tile>`` and ``conv.mma_only@<tile>`` (each kernel's default tile doing one part
of its work: where its time goes), ``conv.cudnn`` (cuDNN through PyTorch), ``conv.triton`` (the Triton peer),
``conv.library`` (the fastest library path that ran, ``params["which"]``), ``conv.im2col`` (im2col + cuBLAS + bias +
ReLU, in ``conv_records`` only); ``conv_b2b.fused``, ``conv_b2b.unfused`` and ``conv_b2b.library`` (cuDNN twice) for the
back-to-back chain at the target (64 -> 64 -> 64), at ``defaults.default_b2b_config``'s block (the tensor-copy stream on
Hopper), its unfused path's 3x3 at ``conv.fused``'s default block (``defaults.default_configs``: the unfused path at its
best), with its two kernels alone (``conv_b2b.unfused.3x3``, ``conv_b2b.unfused.1x1``), the halo kernels' chain
(``conv_b2b.halo.fused``, ``conv_b2b.halo.unfused``), and the same for 64 -> 256 -> 64 as ``conv_b2b.wide.*``
(``B2B_WIDE``: the halo kernel does not take it); each holds the run's copy rate and the model's D0 round trip
(``model.fusion_limit``), printed beside the times. With ``yours`` (the attendee's kernel factory, index map),
``conv.yours`` too. ``conv_records`` (notebook 2c's section 5 and the GPU suite) times the two-stage kernel;
``pipelined_records`` (section 6 and ``main``) the pipelined one. The H100 reports of 2026-11-23
(``results/nvidia-h100-80gb-hbm3-conv.json``, ``-conv-notebooks.json``) name the two-stage kernel's records
``conv.fused`` and ``conv.unfused`` (``params["which"]`` "fused", "unfused"): ``figures.path_of`` reads both.

A record's m, n, k are the implicit GEMM's (B H W, C_out, 9 C_in; a back-to-back kernel timed alone, its own
GEMM's); ``params`` hold the shape, the bytes the path
must move (``utilities.conv.model``), the fraction of the data-sheet HBM bandwidth achieved, and for the course's
kernels their registers, spills, shared memory and blocks an SM.

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
from .defaults import copies_left_out, default_b2b_config, default_configs
from .tensorcore import Conv3x3, Kernels

# (batch, height, width, C_in, C_out): the published shapes' range (B 4-8, C 32-64, H = W 64-512), the target
# (8 x 512 x 512, 64 -> 64), and wide channels, where the convolution is compute-bound and fusion stops mattering
REPORT_SHAPES = (
    (4, 64, 64, 32, 32),
    (8, 128, 128, 64, 64),
    (8, 256, 256, 64, 64),
    (4, 512, 512, 32, 32),
    (8, 512, 512, 64, 64),
    (8, 64, 64, 256, 256),
)
TARGET = ref.ConvShape(8, 512, 512, 64, 64)
PIXELS_CHECKED = 64


def conv_operands(shape: ref.ConvShape, seed: int) -> tuple[Any, Any, Any]:
    """Random FP16 x, w, bias on the GPU, scaled as ``reference.conv_inputs``'s random case."""
    rng = cp.random.default_rng(seed)

    def normal(dims: tuple[int, ...], scale: float) -> Any:
        return (rng.standard_normal(dims, dtype=cp.float32) * scale).astype(cp.float16)

    return (
        normal((shape.batch, shape.height, shape.width, shape.c_in), 1.0),
        normal((3, 3, shape.c_in, shape.c_out), 1 / math.sqrt(shape.k)),
        normal((shape.c_out,), 0.5),
    )


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


def conv_records(
    shape: ref.ConvShape, *, repeats: int = 10, seed: int = 0, yours: Any = None, library: bool = True
) -> list[bench.BenchRecord]:
    """Every path at ``shape`` with notebook 2c's two-stage kernel (``conv.twostage``, its unfused path
    ``conv.twostage.unfused``); ``yours``: (kernel factory, index map) or None; ``library``: the library paths too."""
    set_bytes = model.conv_traffic("fused", shape).bytes
    sets = [conv_operands(shape, seed + i) for i in range(bench.copies_for(set_bytes))]
    outs = [cp.empty((shape.batch, shape.height, shape.width, shape.c_out), cp.float16) for _ in sets]
    plans: dict[str, Callable[..., Any]] = {"twostage": Conv3x3(shape), "twostage.unfused": UnfusedConv(shape)}
    if yours is not None:
        factory, neighbor = yours
        plans = {"yours": Conv3x3(shape, kernels=Kernels(conv=factory, neighbor=neighbor)), **plans}
    paths = {
        name: [lambda p=p, s=s, o=o: p(*s, out=o) for s, o in zip(sets, outs, strict=True)] for name, p in plans.items()
    }
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
    dims = dataclasses.asdict(shape)  # the shape's fields, in order
    records = []
    for name, fns in paths.items():
        result = fns[0]()
        t = model.conv_traffic(_traffic_path(name, which.get("cudnn")), shape)
        params = {**dims, "bytes": t.bytes, "kernels": t.kernels, "which": which[name]}
        rec = bench.bench(
            fns,
            hold=True,
            repeats=repeats,
            name=f"conv.{name}",
            m=shape.m,
            n=shape.n,
            k=shape.k,
            params=params,
            flops=t.flops,
            bytes_moved=t.bytes,
            error=_error(result, host, pixels, fused=name in ("twostage", "yours")),
        )
        if peak and rec.bandwidth_tbs is not None:
            rec.params["hbm_fraction"] = rec.bandwidth_tbs / peak
        records.append(rec)
    libs = [r for r in records if r.name in ("conv.cudnn", "conv.im2col")]
    if libs:
        best = min(libs, key=lambda r: r.time.median)
        records.append(dataclasses.replace(best, name="conv.library", params=dict(best.params)))
    cp.get_default_memory_pool().free_all_blocks()
    return records


def _traffic_path(name: str, cudnn_which: str | None) -> str:
    """The path of ``model.conv_traffic`` whose bytes the record ``conv.<name>`` moves."""
    if name == "cudnn":
        return "fused" if cudnn_which == "cudnn fused" else "unfused"
    return {"twostage": "fused", "yours": "fused", "twostage.unfused": "unfused"}.get(name, name)


def conv_benchmarks(
    shapes: Sequence[tuple[int, ...]] = REPORT_SHAPES, *, repeats: int = 10, record: bool = True, show: bool = True
) -> list[bench.BenchRecord]:
    """Every path of ``conv_records`` (the two-stage kernel's) at every report shape, recorded to the GPU report."""
    records: list[bench.BenchRecord] = []
    for dims in shapes:
        records += conv_records(ref.ConvShape(*dims), repeats=repeats)
    if record:
        bench.record(records)
    if show:
        print(summary(records))
    return records


def summary(records: Sequence[bench.BenchRecord]) -> str:
    """One line per record of ``conv_records``, and each shape's fusion gain (the two-stage kernel's unfused path
    over it) and library / two-stage ratio."""
    lines = [f"{'name':<21} {'shape':<24} {'us':>9} {'TFLOP/s':>8} {'GB/s':>7} {'err/bound':>9}  which"]
    by_shape: dict[tuple[int, ...], dict[str, float]] = {}
    for r in records:
        p = r.params
        shape = f"B={p['batch']} {p['height']}x{p['width']} {p['c_in']}->{p['c_out']}"
        key = (p["batch"], p["height"], p["width"], p["c_in"], p["c_out"])
        by_shape.setdefault(key, {})[r.name] = r.time.median
        err = f"{r.error['max_elementwise']:.2f}" if r.error else "-"
        lines.append(
            f"{r.name:<21} {shape:<24} {r.time.median * 1e3:9.1f} {r.tflops:8.1f} "
            f"{(r.bandwidth_tbs or 0) * 1e3:7.0f} {err:>9}  {p.get('which', '')}"
        )
    for key, t in by_shape.items():
        if "conv.twostage" in t and "conv.twostage.unfused" in t:
            gain = t["conv.twostage.unfused"] / t["conv.twostage"]
            lib = f", library / two-stage {t['conv.library'] / t['conv.twostage']:.2f}" if "conv.library" in t else ""
            lines.append(f"B={key[0]} {key[1]}x{key[2]} {key[3]}->{key[4]}: two-stage unfused / fused {gain:.2f}{lib}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------------------
# Issue 29: the pipelined kernels, the Triton peer and the back-to-back chain, interleaved, from one command
# ------------------------------------------------------------------------------------------------------------

B2B_TARGET = ref.B2BShape(8, 512, 512, 64, 64, 64)
# the same pixels with D0 four times as wide as the input: D0's round trip four times the target's (issue 44)
B2B_WIDE = ref.B2BShape(8, 512, 512, 64, 256, 64)


def interleaved(paths: dict[str, list[Callable[[], Any]]], repeats: int) -> dict[str, bench.Timing]:
    """Held samples of every path, one sample of each a round, the first of the round rotating: every path sees
    the same clocks and temperature."""
    names = list(paths)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeats):
        for j in range(len(names)):
            name = names[(r + j) % len(names)]
            times[name] += bench.held_times_ms(paths[name], repeats=1)
    return {n: bench.Timing.from_times(t) for n, t in times.items()}


def _record(
    name: str,
    timing: bench.Timing,
    m: int,
    n: int,
    k: int,
    t: Any,
    params: dict[str, Any],
    error: dict[str, Any] | None,
) -> bench.BenchRecord:
    rec = bench.make_record(
        name, [timing.median], m=m, n=n, k=k, params=params, flops=t.flops, bytes_moved=t.bytes, error=error
    )
    rec.time = timing
    return rec


RESOURCE_KEYS = ("registers", "spills", "smem", "blocks_per_sm")


def pipelined_records(
    shape: ref.ConvShape = TARGET,
    configs: Sequence[Any] = (),
    *,
    repeats: int = 10,
    seed: int = 0,
    diagnostics: bool = False,
) -> list[bench.BenchRecord]:
    """The pipelined kernels at every tile of ``configs`` (default: :func:`default_configs`, the tensor-copy kernel
    and the gathering one where this GPU and shape allow both), the best tile's unfused path, notebook 2c's
    two-stage kernel, cuDNN and the Triton peer, interleaved at ``shape``; ``conv.fused`` is the fastest fused tile.

    ``diagnostics``: also the first tile of each kernel doing only its gathers (``conv.gather_only@<tile>``) and
    only its MMAs (``conv.mma_only@<tile>``), timed in the same rounds: where the whole kernel's time goes (their
    results are wrong by design: no error). Each kernel's record holds its registers, spills, shared memory and
    blocks an SM (``params``)."""
    from . import triton_peer

    cfgs = list(configs) or default_configs(shape)
    if not configs and copies_left_out(shape):
        print(f"conv: the tensor-copy kernel left out: {copies_left_out(shape)}")
    sets = [conv_operands(shape, seed + i) for i in range(bench.copies_for(model.conv_traffic("fused", shape).bytes))]
    outs = [cp.empty((shape.batch, shape.height, shape.width, shape.c_out), cp.float16) for _ in sets]
    plans: dict[str, Any] = {}
    for cfg in cfgs:
        try:
            plans[f"fused@{cfg.spec}"] = tiled_conv(shape, cfg)
        except (ValueError, RuntimeError) as exc:  # a shape the tile cannot take, a GPU without tensor copies
            print(f"conv: tile {cfg.spec} left out: {exc}")
    plans["twostage"] = Conv3x3(shape)
    # the diagnostics of the first tile of each kernel (pipelined, halo)
    firsts = {type(c).__name__: c for c in reversed(cfgs)} if diagnostics else {}
    for cfg in firsts.values():
        for part in ("gather", "mma"):
            try:
                plans[f"{part}_only@{cfg.spec}"] = tiled_conv(shape, cfg, parts=part)
            except (ValueError, RuntimeError) as exc:  # a diagnostic never stops the report
                print(f"conv: the {part}-only diagnostic of {cfg.spec} left out: {exc}")
    paths = {
        name: [lambda p=p, s=s, o=o: p(*s, out=o) for s, o in zip(sets, outs, strict=True)] for name, p in plans.items()
    }
    which: dict[str, str] = {name: name for name in plans}
    if CudnnConv.available() is None:
        cudnn = [CudnnConv(shape, s[1], s[2]) for s in sets]
        paths["cudnn"] = [lambda c=c, s=s: c(s[0]) for c, s in zip(cudnn, sets, strict=True)]
        which["cudnn"] = cudnn[0].which
    else:
        print(f"conv: {CudnnConv.available()}")
    if triton_peer.available() is None and shape.c_in % 16 == 0 and shape.c_out % 16 == 0:
        peer = triton_peer.TritonConv()
        paths["triton"] = [lambda s=s, o=o: peer(*s, o) for s, o in zip(sets, outs, strict=True)]
    else:
        print(f"conv: {triton_peer.available() or 'channels not multiples of 16'}")
    host = tuple(cp.asnumpy(v) for v in sets[0])
    pixels = sample_pixels(shape, seed)
    errors = {}
    for name, fns in list(paths.items()):  # also warms up (builds, autotunes)
        if "_only@" in name:
            try:
                fns[0]()
            except Exception as exc:  # noqa: BLE001 (a diagnostic never stops the report)
                print(f"conv: the diagnostic {name} left out: {type(exc).__name__}: {exc}")
                del paths[name], plans[name]
            errors[name] = None
            continue
        errors[name] = _error(fns[0](), host, pixels, fused=True)
    if "triton" in paths:
        which["triton"] = peer.which  # the autotuner has picked its blocks
    resources = {name: dict(p.resources) for name, p in plans.items() if name != "twostage"}
    resources["twostage"] = plans["twostage"].resources(*sets[0], outs[0])
    timings = interleaved(paths, repeats)
    fused = {n: t for n, t in timings.items() if n.startswith("fused@")}
    best = min(fused, key=lambda n: fused[n].median) if fused else None
    dims = dataclasses.asdict(shape)  # the shape's fields, in order
    records = []
    unfused_timing = None
    if best is not None:  # the unfused path with the best tile, timed beside the best fused kernel
        unfused = UnfusedPipelined(shape, plans[best].cfg)
        upaths = {
            "unfused": [lambda s=s, o=o: unfused(*s, out=o) for s, o in zip(sets, outs, strict=True)],
            best: paths[best],
        }
        errors["unfused"] = _error(upaths["unfused"][0](), host, pixels, fused=False)
        unfused_timing = interleaved(upaths, repeats)["unfused"]
    for name, timing in timings.items():
        counted = "fused" if name != "cudnn" or which.get("cudnn") == "cudnn fused" else "unfused"
        t = model.conv_traffic(counted, shape)
        params = {**dims, "bytes": t.bytes, "which": which.get(name, name)}
        if "@" in name:
            params["tile"] = name.split("@", 1)[1]
        if "_only@" in name:
            params["diagnostic"] = f"{name.split('_only')[0]} only: the rest of the kernel's work left out"
        params.update({k: resources[name][k] for k in RESOURCE_KEYS if k in resources.get(name, {})})
        records.append(_record(f"conv.{name}", timing, shape.m, shape.n, shape.k, t, params, errors[name]))
    if best is not None:
        b = next(r for r in records if r.name == f"conv.{best}")
        records.append(dataclasses.replace(b, name="conv.fused", params=dict(b.params)))
        t = model.conv_traffic("unfused", shape)
        records.append(
            _record(
                "conv.unfused",
                unfused_timing,
                shape.m,
                shape.n,
                shape.k,
                t,
                {**dims, "bytes": t.bytes, "tile": b.params["tile"]},
                errors["unfused"],
            )
        )
    libs = [r for r in records if r.name == "conv.cudnn"]
    if libs:
        records.append(dataclasses.replace(libs[0], name="conv.library", params=dict(libs[0].params)))
    cp.get_default_memory_pool().free_all_blocks()
    return records


def tiled_conv(shape: ref.ConvShape, cfg: Any, **kwargs: Any) -> Any:
    """The plan of a tile spec's kernel: the halo kernel for a ``HaloConfig``, the tensor-copy kernel for a
    ``TmaConfig``, else the pipelined one that gathers."""
    from .halo import HaloConfig
    from .layout import TmaConfig

    if isinstance(cfg, HaloConfig):
        from .tensorcore_halo import HaloConv

        return HaloConv(shape, cfg=cfg, **kwargs)
    if isinstance(cfg, TmaConfig):
        from .tensorcore_persistent import TmaConv

        return TmaConv(shape, cfg=cfg, **kwargs)
    from .tensorcore_persistent import PipelinedConv

    return PipelinedConv(shape, cfg=cfg, **kwargs)


def parse_tile(spec: str) -> Any:
    """A tile spec of any kernel: ``h128x64x64-t256`` (halo), ``tma128x64x64-t128-d2-g1-s`` (tensor copies),
    ``128x64x64-t128-d3-g1-s`` (pipelined, gathers)."""
    from .halo import HaloConfig
    from .layout import TMA_PREFIX, PipeConfig, TmaConfig

    text = spec.strip()
    if text.startswith(TMA_PREFIX):
        return TmaConfig.parse(text)
    return HaloConfig.parse(text) if text.startswith("h") else PipeConfig.parse(text)


class UnfusedPipelined:
    """The pipelined (or halo) kernel storing the convolution (``fused=False``), then the bias + ReLU kernel."""

    def __init__(self, shape: ref.ConvShape, cfg: Any):
        self.shape = shape
        self.conv = tiled_conv(shape, cfg, fused=False)
        self.p = cp.empty((shape.batch, shape.height, shape.width, shape.c_out), cp.float16)

    def __call__(self, x: Any, w: Any, bias: Any, out: Any = None) -> Any:
        from .. import cublas

        out = cp.empty_like(self.p) if out is None else out
        self.conv(x, w, bias, out=self.p)
        cublas.bias_relu(self.p, bias, out)
        return out


def b2b_operands(shape: ref.B2BShape, seed: int) -> tuple[Any, Any, Any, Any]:
    """Random FP16 x, w0, w1, bias1 on the GPU, scaled as ``reference.b2b_inputs``'s random case."""
    x, w0, _ = conv_operands(shape.first, seed)
    rng = cp.random.default_rng(seed + 1)
    w1 = (rng.standard_normal((shape.c_mid, shape.c_out), dtype=cp.float32) / math.sqrt(shape.c_mid)).astype(cp.float16)
    return x, w0, w1, (rng.standard_normal(shape.c_out, dtype=cp.float32) / 2).astype(cp.float16)


def b2b_records(
    shape: ref.B2BShape = B2B_TARGET,
    cfg: Any = None,
    *,
    repeats: int = 10,
    seed: int = 0,
    name: str = "conv_b2b",
    copy_tbs: float | None = None,
    halo: bool = False,
    unfused_cfg: Any = None,
) -> list[bench.BenchRecord]:
    """``<name>.fused``, ``<name>.unfused``, its two kernels alone (``<name>.unfused.3x3``, ``<name>.unfused.1x1``),
    with ``halo`` the halo kernels' chain where it takes the shape (``<name>.halo.fused``, ``<name>.halo.unfused``: its
    3x3 kernel, then the pipelined 1x1; the speed run's, not notebook 2d's) and ``<name>.library`` (cuDNN twice,
    where PyTorch has it), interleaved at ``shape``; errors against the FP64 chain on sampled pixels. ``copy_tbs``:
    the run's copy rate (``peaks.measure_copy_bandwidth``, measured here if None), kept in each record's ``params``
    with the model's D0 round trip (``model.fusion_limit``). ``cfg``: the fused kernel's block (default
    :func:`default_b2b_config`). ``unfused_cfg``: the unfused path's 3x3 block (default the first of
    :func:`default_configs`, ``conv.fused``'s: the unfused path at its best, whatever the fused kernel's block)."""
    from .baselines import CudnnB2B
    from .tensorcore_persistent import ConvB2B, UnfusedConvB2B

    copy_tbs = peaks.measure_copy_bandwidth() if copy_tbs is None else copy_tbs
    traffic = model.b2b_traffic("fused", shape)
    sets = [b2b_operands(shape, seed + i) for i in range(bench.copies_for(traffic.bytes))]
    outs = [cp.empty((shape.batch, shape.height, shape.width, shape.c_out), cp.float16) for _ in sets]
    cfg = cfg or default_b2b_config(shape)
    unfused_cfg = unfused_cfg or default_configs(shape.first)[0]
    plans = {"fused": ConvB2B(shape, cfg=cfg), "unfused": UnfusedConvB2B(shape, cfg=unfused_cfg)}
    if halo:
        plans.update(halo_b2b_plans(shape))
    paths = {
        path: [lambda p=p, s=s, o=o: p(*s, out=o) for s, o in zip(sets, outs, strict=True)] for path, p in plans.items()
    }
    un = plans["unfused"]  # its kernels alone, in the same rounds: what the 1x1 kernel costs is what fusion removes
    paths["unfused.3x3"] = [lambda s=s: un.conv3(s[0], s[1], un.zero, out=un.d0) for s in sets]
    paths["unfused.1x1"] = [
        lambda s=s, o=o: un.conv1(un.d0, s[2], s[3], out=o) for s, o in zip(sets, outs, strict=True)
    ]
    which = {
        "fused": plans["fused"].cfg.spec,
        "unfused": "pipelined 3x3 + ReLU, then pipelined 1x1 + bias + ReLU",
        "halo.fused": f"the halo kernel, {plans['halo.fused'].cfg.spec}" if "halo.fused" in plans else "",
        "halo.unfused": "halo 3x3 + ReLU, then pipelined 1x1 + bias + ReLU",
        "unfused.3x3": f"the unfused path's 3x3 + ReLU alone ({un.conv3.cfg.spec})",
        "unfused.1x1": f"the unfused path's 1x1 + bias + ReLU alone ({un.conv1.cfg.spec})",
    }
    if CudnnConv.available() is None:
        libs = [CudnnB2B(s[1], s[2], s[3]) for s in sets]
        paths["library"] = [lambda c=c, s=s: c(s[0]) for c, s in zip(libs, sets, strict=True)]
        which["library"] = libs[0].which
    else:
        print(f"conv_b2b: {CudnnConv.available()}")
    pixels = sample_pixels(shape.first, seed)
    host = tuple(cp.asnumpy(v) for v in sets[0])
    r = ref.conv_b2b_ref(*host, rows=pixels)
    errors: dict[str, Any] = {}
    for path, fns in paths.items():
        if path.startswith("unfused."):  # one kernel of a path checked whole: warm it up, nothing to compare
            fns[0]()
            errors[path] = None
            continue
        got = cp.asnumpy(cp.ascontiguousarray(fns[0]())).reshape(-1, shape.c_out)[pixels]
        errors[path] = bounded_error(got, r.d1, r.bound_d1, f"FP64 chain, {len(pixels)} pixels")
    timings = interleaved(paths, repeats)
    limit = model.fusion_limit(shape, copy_tbs=copy_tbs, unfused_ms=timings["unfused"].median)
    kernels = model.b2b_kernel_traffic(shape)
    gemms = {"3x3": (shape.c_mid, 9 * shape.c_in), "1x1": (shape.c_out, shape.c_mid)}
    dims = dataclasses.asdict(shape)  # the shape's fields, in order
    records = []
    for path, timing in timings.items():
        part = path.split(".", 1)[1] if path.startswith("unfused.") else None
        fused = path in ("fused", "halo.fused")
        t = kernels[part] if part else model.b2b_traffic("fused" if fused else "unfused", shape)
        params = {**dims, "bytes": t.bytes, "which": which[path], "copy_tbs": copy_tbs, "d0_ms": limit.d0_ms}
        if fused:
            params.update({k: plans[path].resources[k] for k in RESOURCE_KEYS if k in plans[path].resources})
            params["floor_ms"] = limit.limit_ms  # the model's fused floor: the unfused time less D0's round trip
        if path == "halo.fused":  # its own floor: its own unfused path less D0's round trip
            own = model.fusion_limit(shape, copy_tbs=copy_tbs, unfused_ms=timings["halo.unfused"].median)
            params["floor_ms"] = own.limit_ms
        if part:
            params["diagnostic"] = "one kernel of the unfused path, timed alone"
        n, k = gemms.get(part, (shape.c_out, 9 * shape.c_in))  # a kernel alone: its own GEMM's N and K
        records.append(_record(f"{name}.{path}", timing, shape.m, n, k, t, params, errors[path]))
    cp.get_default_memory_pool().free_all_blocks()
    return records


def halo_b2b_plans(shape: ref.B2BShape) -> dict[str, Any]:
    """The halo kernel's chain at ``shape`` where it takes it: ``halo.fused`` (one kernel) and ``halo.unfused``
    (its 3x3 kernel, then the pipelined 1x1); nothing where it does not (a line says why)."""
    from .tensorcore_halo import HaloConv, HaloConvB2B
    from .tensorcore_persistent import UnfusedConvB2B

    try:
        fused = HaloConvB2B(shape)
        return {"halo.fused": fused, "halo.unfused": UnfusedConvB2B(shape, conv3=HaloConv(shape.first, cfg=fused.cfg))}
    except ValueError as exc:
        print(f"conv_b2b: the halo kernel left out at {shape.label}: {exc}")
        return {}


def _numpy_run(plan: Any) -> Callable[..., Any]:
    """A checker's runner for ``plan``: NumPy operands in, the output (NaN where nothing was written) out."""

    def run(*args: Any) -> Any:
        s = plan.shape
        out = cp.full((s.batch, s.height, s.width, s.c_out), np.nan, cp.float16)  # an unwritten tile shows
        return cp.asnumpy(plan(*(cp.asarray(v) for v in args), out=out))

    return run


def correctness(configs: Sequence[Any] = ()) -> list[str]:
    """Every kernel of the run through the course's checkers at their small shapes, before anything is timed:
    one line each; raises the first CheckFailure."""
    from . import check, triton_peer
    from .halo import HaloConfig
    from .layout import PipeConfig, TmaConfig
    from .tensorcore_persistent import PipelinedConv

    lines = []
    for cfg in [c for c in configs if isinstance(c, HaloConfig)]:
        lines.append(halo_correctness(cfg))
    for cfg in [c for c in configs if isinstance(c, TmaConfig)]:
        lines.append(tma_correctness(cfg))
    for cfg in [c for c in configs if not isinstance(c, (HaloConfig, TmaConfig))] or [PipeConfig()]:
        shape = check.CONV_SHAPE if check.CONV_SHAPE.m % cfg.tile_m == 0 else check.CONV_SHAPE_256
        cfg_n = dataclasses.replace(cfg, tile_n=min(cfg.tile_n, shape.c_out))
        try:
            plan = PipelinedConv(shape, cfg=cfg_n)
        except ValueError as exc:
            lines.append(f"conv.fused@{cfg.spec}: left out ({exc})")
            continue
        check.check_conv(_numpy_run(plan), shape=shape, seed=31)
        # two blocks a column tile: each walks several row tiles (the ring across tiles, the output in the ring)
        check.check_conv(_numpy_run(PipelinedConv(shape, cfg=cfg_n, blocks=2)), shape=shape, seed=38)
        check.check_conv(_numpy_run(UnfusedPipelined(shape, cfg_n)), shape=shape, fused=False, seed=32)
        lines.append(
            f"conv.fused@{cfg.spec} (one block a row tile, and two walking them all) and its unfused path: passed"
        )
    shape = check.CONV_SHAPE
    check.check_conv(_numpy_run(Conv3x3(shape)), shape=shape, seed=33)
    lines.append("conv.twostage: passed")
    if triton_peer.available() is None:
        peer = triton_peer.TritonConv()

        def run_peer(x: Any, w: Any, bias: Any) -> Any:
            out = cp.full((*x.shape[:3], w.shape[3]), np.nan, cp.float16)
            return cp.asnumpy(peer(cp.asarray(x), cp.asarray(w), cp.asarray(bias), out))

        check.check_conv(run_peer, shape=shape, seed=34)
        lines.append("conv.triton: passed")
    lines.append(b2b_correctness(default_b2b_config(B2B_TARGET), "conv_b2b"))
    if any(isinstance(c, HaloConfig) for c in configs):
        lines.append(halo_b2b_correctness())
    return lines


def halo_b2b_correctness() -> str:
    """The halo back-to-back kernel through the checker at ``halo.HALO_B2B_CHECKS`` (D0 kept and checked first,
    two blocks walking the row tiles; then without D0), and its unfused path at the first: one line."""
    from . import check
    from .halo import HALO_B2B_CHECKS, HaloConfig
    from .tensorcore_halo import HaloConv, HaloConvB2B
    from .tensorcore_persistent import UnfusedConvB2B

    for i, (shape, fields) in enumerate(HALO_B2B_CHECKS):
        cfg = HaloConfig(tile_n=shape.c_mid, **(fields or {}))
        kept = HaloConvB2B(shape, cfg=cfg, keep_d0=True, blocks=2)
        check.check_conv_b2b(_numpy_run(kept), stages=kept.stages, shape=shape, seed=75 + i)
        check.check_conv_b2b(_numpy_run(HaloConvB2B(shape, cfg=cfg)), shape=shape, seed=77 + i)
    shape = HALO_B2B_CHECKS[0][0]
    unfused = UnfusedConvB2B(shape, conv3=HaloConv(shape.first, cfg=HaloConfig(tile_n=shape.c_mid)))
    check.check_conv_b2b(_numpy_run(unfused), shape=shape, seed=79)
    shapes = ", ".join(s.label for s, _ in HALO_B2B_CHECKS)
    return (
        f"conv_b2b.halo.fused at {shapes} (with D0 kept and two blocks walking, and without) and its unfused "
        "path: passed"
    )


def tma_correctness(cfg: Any) -> str:
    """The tensor-copy kernel with ``cfg`` through the checker at ``check.TMA_SHAPES`` (one block a row tile, and two
    walking them all), and its unfused path at the first: one line, a line saying why it was left out (a GPU before
    Hopper), or the first CheckFailure."""
    from ..machinery import tma
    from . import check
    from .tensorcore_persistent import TmaConv

    why = tma.unavailable()
    if why is not None:
        return f"conv.fused@{cfg.spec}: left out ({why})"
    for i, shape in enumerate(check.TMA_SHAPES):
        c = dataclasses.replace(cfg, tile_n=min(cfg.tile_n, shape.c_out))
        check.check_conv(_numpy_run(TmaConv(shape, cfg=c)), shape=shape, seed=80 + i)
        check.check_conv(_numpy_run(TmaConv(shape, cfg=c, blocks=2)), shape=shape, seed=90 + i)
    shape = check.TMA_SHAPES[0]
    check.check_conv(_numpy_run(UnfusedPipelined(shape, cfg)), shape=shape, fused=False, seed=85)
    shapes = ", ".join(s.label for s in check.TMA_SHAPES)
    return f"conv.fused@{cfg.spec} at {shapes} (one block a row tile, and two walking them all), unfused: passed"


def halo_correctness(cfg: Any) -> str:
    """The halo kernel with ``cfg``'s threads and TK through the checker at ``halo.HALO_CHECKS`` (one block a row
    tile, and two walking them all), and its unfused path at the first: one line, or the first CheckFailure."""
    from . import check
    from .halo import HALO_CHECKS
    from .tensorcore_halo import HaloConv

    for i, (shape, fields) in enumerate(HALO_CHECKS):
        c = dataclasses.replace(cfg, **(fields or {}))
        c = dataclasses.replace(c, tile_n=min(c.tile_n, shape.c_out))
        check.check_conv(_numpy_run(HaloConv(shape, cfg=c)), shape=shape, seed=50 + i)
        check.check_conv(_numpy_run(HaloConv(shape, cfg=c, blocks=2)), shape=shape, seed=60 + i)
    shape = HALO_CHECKS[0][0]
    check.check_conv(_numpy_run(UnfusedPipelined(shape, cfg)), shape=shape, fused=False, seed=70)
    shapes = ", ".join(s.label for s, _ in HALO_CHECKS)
    return f"conv.fused@{cfg.spec} at {shapes} (one block a row tile, and two walking them all), unfused: passed"


def b2b_check_shape(cfg: Any) -> ref.B2BShape:
    """Where the checker takes the back-to-back kernel at ``cfg``: ``check.B2B_SHAPE``, or ``check.B2B_WIDE_SHAPE``
    for a block as wide as the wide chain's D0; their ``TMA_`` twins (row tiles that are boxes) for tensor copies."""
    from . import check
    from .layout import TmaConfig

    copies = isinstance(cfg, TmaConfig)
    if cfg.tile_n == check.B2B_WIDE_SHAPE.c_mid:
        return check.TMA_B2B_WIDE_SHAPE if copies else check.B2B_WIDE_SHAPE
    return check.TMA_B2B_SHAPE if copies else check.B2B_SHAPE


def b2b_correctness(cfg: Any, name: str) -> str:
    """The back-to-back kernel at ``cfg`` through the checker at :func:`b2b_check_shape`: D0 kept and checked first
    (one block a row tile, then two walking them all), then without D0; and the unfused path with the 3x3 block
    :func:`b2b_records` gives it there. One line, or the first CheckFailure."""
    from . import check
    from .tensorcore_persistent import ConvB2B, UnfusedConvB2B

    shape = b2b_check_shape(cfg)
    c = dataclasses.replace(cfg, tile_n=shape.c_mid)
    for seed, blocks in ((35, None), (39, 2)):
        kept = ConvB2B(shape, cfg=c, keep_d0=True, blocks=blocks)
        check.check_conv_b2b(_numpy_run(kept), stages=kept.stages, shape=shape, seed=seed)
    check.check_conv_b2b(_numpy_run(ConvB2B(shape, cfg=c)), shape=shape, seed=36)
    unfused = UnfusedConvB2B(shape, cfg=default_configs(shape.first)[0])
    check.check_conv_b2b(_numpy_run(unfused), shape=shape, seed=37)
    return (
        f"{name}.fused@{cfg.spec} at {shape.label} (D0 kept with one block a row tile and two walking them all, "
        f"and without) and {name}.unfused ({unfused.conv3.cfg.spec}): passed"
    )


def main(argv: Sequence[str] | None = None) -> int:
    import argparse
    import os
    import sys
    from pathlib import Path

    from .. import report
    from ..machinery import buildcache
    from .halo import HaloConfig
    from .layout import PipeConfig, TmaConfig, speed_configs

    parser = argparse.ArgumentParser(description="The convolution track's report: every kernel checked, then timed.")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="check every kernel, then the target with the default tile only, 5 rounds, no diagnostics",
    )
    parser.add_argument(
        "--tiles",
        default="",
        help="comma-separated tile specs (layout.PipeConfig.spec, layout.TmaConfig.spec, halo.HaloConfig.spec); "
        "default: the tensor-copy kernel's default (on Hopper), layout.speed_configs() and the halo kernel's default "
        "(the plans' default tiles with --quick)",
    )
    parser.add_argument(
        "--b2b-tiles",
        default="",
        help="comma-separated PipeConfig or TmaConfig specs (tma...: the 3x3's A tiles by tensor copies, fused and "
        "unfused): the back-to-back chain at the target also with these blocks, or the wide chain (64 -> 256 -> 64) "
        "for a block 256 wide, each checked first (records conv_b2b@<spec>.* or conv_b2b.wide@<spec>.*, beside the "
        "plans' defaults)",
    )
    parser.add_argument("--repeats", type=int, default=10, help="interleaved rounds")
    parser.add_argument("--out", default="results", help="folder of the report (<gpu>-conv2.json and .md)")
    parser.add_argument("--no-check", action="store_true", help="skip the correctness pass (not recommended)")
    args = parser.parse_args(argv)
    buildcache.install()
    if args.tiles:
        configs = [parse_tile(t) for t in args.tiles.split(",")]
    else:
        copies = [c for c in default_configs(TARGET) if isinstance(c, TmaConfig)]  # where this GPU has them
        configs = [*copies, PipeConfig(), HaloConfig()] if args.quick else [*copies, *speed_configs(), HaloConfig()]
    b2b_tiles = [parse_tile(t) for t in args.b2b_tiles.split(",") if t]
    repeats = 5 if args.quick else args.repeats
    notes = []
    wide = True
    if not args.no_check:
        for line in correctness(configs):
            print(line, flush=True)
            notes.append(line)
        try:
            line = b2b_correctness(default_b2b_config(B2B_WIDE), "conv_b2b.wide")
        except Exception as exc:  # noqa: BLE001 (the wide chain never stops the target's report: it is left out)
            line, wide = f"conv_b2b.wide left out, not timed: {type(exc).__name__}: {exc}", False
        print(line, flush=True)
        notes.append(line)
        for cfg in b2b_tiles:
            notes.append(b2b_correctness(cfg, "conv_b2b"))
            print(notes[-1], flush=True)
    records = pipelined_records(TARGET, configs, repeats=repeats, diagnostics=not args.quick)
    copy_tbs = peaks.measure_copy_bandwidth()  # the back-to-back model's copy rate, one for both shapes
    print(f"copy rate (device-to-device, reads and writes counted): {copy_tbs:.3f} TB/s", flush=True)
    notes.append(f"copy rate: {copy_tbs:.3f} TB/s (peaks.measure_copy_bandwidth)")
    halo = any(isinstance(c, HaloConfig) for c in configs)  # the halo chain beside the pipelined one
    records += b2b_records(B2B_TARGET, None, repeats=repeats, copy_tbs=copy_tbs, halo=halo)  # the plans' defaults:
    try:  # prebuilt (CONV_SPEED_JOBS)
        if wide:
            records += b2b_records(B2B_WIDE, None, repeats=repeats, name="conv_b2b.wide", copy_tbs=copy_tbs)
    except Exception as exc:  # noqa: BLE001 (as above)
        notes.append(f"conv_b2b.wide left out: {type(exc).__name__}: {exc}")
        print(notes[-1], flush=True)
    for cfg in b2b_tiles:  # prebuild with --jobs conv_b2b:64x64x64@<spec> (64 -> 64 -> 64)
        wide = cfg.tile_n == B2B_WIDE.c_mid  # the wide chain's fused kernel at cfg; the unfused paths at their best
        name, shape = (f"conv_b2b.wide@{cfg.spec}", B2B_WIDE) if wide else (f"conv_b2b@{cfg.spec}", B2B_TARGET)
        records += b2b_records(shape, cfg, repeats=repeats, copy_tbs=copy_tbs, name=name)
    print(run_summary(records, targets=True))
    bench.record(records)
    gpu = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    cc = cp.cuda.Device().compute_capability
    json_path, md_path = report.write_report(
        records,
        [],
        gpu=gpu,
        compute_capability=(int(cc[0]), int(cc[1:])),
        command="python -m utilities.conv.benchmarks " + " ".join(sys.argv[1:] if argv is None else argv),
        versions=report.collect_versions(),
        out_dir=args.out,
        notes=notes,
    )
    for path in (json_path, md_path):
        path.rename(Path(args.out) / f"{path.stem}-conv2{path.suffix}")
    print(f"report: {os.path.join(args.out, json_path.stem)}-conv2.json")
    return 0


def run_summary(records: Sequence[bench.BenchRecord], *, targets: bool = False) -> str:
    """The run's records, what each kernel got of an SM, the errors, and the ratios that compare the paths (same
    run, same shapes); ``targets``: each ratio beside the course's target for it (the speed run's report)."""
    t = {r.name: r.time.median for r in records}
    lines = [f"{'name':<40} {'ms':>8} {'20-80% ms':>17} {'TFLOP/s':>8} {'err/bound':>9}  which"]
    for r in records:
        band = f"{r.time.q20:.4f}-{r.time.q80:.4f}" if r.time.q20 is not None else "-"
        err = f"{r.error['max_elementwise']:.2f}" if r.error else "-"
        lines.append(
            f"{r.name:<40} {r.time.median:8.4f} {band:>17} {r.tflops:8.1f} {err:>9}  "
            f"{r.params.get('which', r.params.get('tile', ''))}"
        )

    def ratio(a: str, b: str, target: float | None, what: str) -> None:
        if a in t and b in t:
            got = t[b] / t[a]
            shown = targets and target is not None
            goal = f" (target {target}x: {'met' if got >= target else 'not met'})" if shown else ""
            lines.append(f"{what}: {got:.2f}x{goal}")

    for r in records:
        if "blocks_per_sm" in r.params and r.name != "conv.fused":  # (conv.fused repeats the best tile's record)
            p = r.params
            lines.append(
                f"{r.name}: {p['registers']} registers, {p['spills']} bytes spilled, {p['smem']} bytes of "
                f"shared memory, {p['blocks_per_sm']} blocks an SM"
            )
    outside = [r.name for r in records if r.error and r.error["max_elementwise"] > 1]
    lines.append(
        f"sampled errors outside their bounds: {', '.join(outside)}"
        if outside
        else "every sampled error within its bound (err/bound <= 1)"
    )
    for tile in model.split_tiles(t):  # the pipelined kernel's, and the halo kernel's
        split = model.time_split(t, tile)
        if split is not None:
            lines.append(model.format_time_split(split))
    ratio("conv.fused", "conv.twostage", 1.0, "fused vs 2c's two-stage kernel (two-stage time / fused time)")
    ratio("conv.fused", "conv.cudnn", 0.5, "fused vs cuDNN (cuDNN time / fused time)")
    ratio("conv.fused", "conv.triton", 1.0, "fused vs Triton (Triton time / fused time)")
    ratio("conv.fused", "conv.unfused", 1.0, "fused vs its unfused path")
    ratio("conv_b2b.fused", "conv_b2b.unfused", 1.12, "back-to-back fused vs unfused")
    ratio("conv_b2b.fused", "conv_b2b.library", None, "back-to-back fused vs cuDNN twice (cuDNN time / fused time)")
    ratio("conv_b2b.wide.fused", "conv_b2b.wide.unfused", None, "back-to-back 64->256->64 fused vs unfused")
    ratio("conv_b2b.halo.fused", "conv_b2b.halo.unfused", 1.12, "back-to-back, halo kernels: fused vs unfused")
    ratio("conv_b2b.halo.fused", "conv_b2b.fused", None, "back-to-back: halo fused vs pipelined fused")
    if "conv_b2b.halo.fused" in t:
        floor = next(r for r in records if r.name == "conv_b2b.halo.fused").params["floor_ms"]
        got = t["conv_b2b.halo.fused"] / floor
        goal = f" (target <= 1.10: {'met' if got <= 1.10 else 'not met'})" if targets else ""
        lines.append(f"back-to-back, halo: fused time / the model's fused floor {floor:.4f} ms: {got:.2f}{goal}")
    lines += model.b2b_model_lines(records)
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())

"""Build the course's kernels ahead of a session, in parallel processes, into the on-disk build cache.

libmathdx generates code in one thread per process, so a many-core GPU host builds several kernels at once only
from several processes. An instructor runs this once before a workshop (``./course prebuild``); the notebooks
then find every kernel in the cache (``utilities.machinery.buildcache``)::

    python -m utilities.prebuild                     # every kernel the notebooks, their checks and the tests use
    python -m utilities.prebuild --jobs fused:2048x2048x2048,b2b:576x64x128
    python -m utilities.prebuild --list              # the jobs, one a line, and stop
    python -m utilities.prebuild --export course.bundle [--max-part-mb 15]   # what a launch reads, in a file (or parts)
    python -m utilities.prebuild --import course.bundle                      # ... on another machine, instead
    python -m utilities.prebuild --arch sm_90 [--jobs ...]                   # on a CPU, without a GPU
    python -m utilities.prebuild --arch sm_90 --export course.bundle         # ... and its bundle
    python -m utilities.prebuild --keys keys.json    # ... and each job's kernels, keys and what each key holds

The checks build an attendee's kernel at every block of their contract (issue 41); the jobs include the course's twin
of each (:func:`check_jobs`, read from the check modules), so that a check only links the attendee's kernel against
libmathdx code in the cache.

It checks the machine first (the preflight table, then one line saying why it cannot build here), prints a line
as each kernel finishes (kernels done of all, elapsed time, an estimate of what is left), and a table of build
times last. Jobs start longest first, by the times the last prebuild on this machine measured (kept beside the
build cache), else by kind.

``--export`` writes the build cache as a bundle (``utilities.machinery.buildcache.bundle``) with a manifest of this
machine's GPU architecture and code generators; ``--import`` on another machine checks both, and refuses a bundle
made for another architecture or stack, a corrupt one or a partial one, saying why. ``--compare`` prints what other
compressions would make of the cache.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from .machinery import codegen_workers


def parse_shape(text: str) -> tuple[int, ...]:
    """``"576x64x128"`` -> (576, 64, 128)."""
    return tuple(int(x) for x in text.lower().split("x"))


# --- the block a job names (plain Python: read without a GPU, by the tests and by kernel_of) -----------------------

PRIMER_FIELDS = ("tile_m", "tile_n", "tile_k", "threads")  # primer:tile@64x64x32x64 (TileConfig)
GEMM_FIELDS = ("tile_m", "tile_n", "tile_k", "threads")  # gemm_bias_relu:...@64x128x64x128 (BlockConfig)
CONV_FIELDS = ("tile_m", "tile_n", "tile_k", "threads")  # conv:128x64@64x32x32x64 (ConvConfig)
OZAKI_FIELDS = ("tile_m", "tile_n", "tile_k", "threads", "depth")  # fused:300x136x392@64x64x64x128x2 (OzakiConfig)
B2B_FIELDS = ("tile_m", "threads", "depth")  # b2b:288x128x64@64x256-k32 (BlockConfig; -k: the K tile)
MULTIPASS_FIELDS = ("tile_m", "tile_n", "threads")  # multipass:float16:8@64x64x128-n16 (PassConfig; -n: N passes)
SUFFIXES = {"b2b": {"k": "tile_k"}, "multipass": {"n": "passes"}}


def parse_block(text: str, fields: tuple[str, ...], least: int | None = None, suffixes: dict | None = None) -> dict:
    """A job's block as its config's fields: ``"64x256x3"`` with ``fields`` (tile_m, threads, depth) ->
    {"tile_m": 64, "threads": 256, "depth": 3}; ``least`` leading fields required (default: all of them), the rest
    left to the config's defaults; ``suffixes`` names fields written after the sizes (``"64x256-k32"``, with
    {"k": "tile_k"}). Empty text: {}. A ValueError names what is wrong."""
    if not text:
        return {}
    sizes, *rest = text.lower().split("-")
    values = parse_shape(sizes)
    need = len(fields) if least is None else least
    if not need <= len(values) <= len(fields):
        count = str(need) if need == len(fields) else f"{need} to {len(fields)}"
        raise ValueError(f"block {text!r}: {count} sizes ({'x'.join(fields)}), got {len(values)}")
    block = dict(zip(fields, values, strict=False))
    for part in rest:
        name = (suffixes or {}).get(part[:1])
        if name is None or not part[1:].isdigit() or name in block:
            known = ", ".join(f"-{letter}N ({field})" for letter, field in (suffixes or {}).items()) or "none"
            raise ValueError(f"block {text!r}: {part!r} is not a suffix of this kind (its suffixes: {known})")
        block[name] = int(part[1:])
    return block


# --- one build per job kind (each runs in a process of its own) ---------------------------------------------------


def _ozaki(variant: str, spec: str, slices: int) -> None:
    import cupy as cp

    from .ozaki.tensorcore import OzakiConfig, OzakiGemm

    shape, _, block = spec.partition("@")  # fused:300x136x392@64x64x64x128x2: the shape, a 64 x 64 x 64 tile, ...
    m, n, k = parse_shape(shape)  # the shape picks the plain kernels (the slicing's padded K), not the cuBLASDx one
    cfg = OzakiConfig(**parse_block(block, OZAKI_FIELDS)) if block else None  # None: the GPU's tile (tile_config)
    OzakiGemm(m, n, k, slices, variant, cfg=cfg)(cp.zeros((m, k)), cp.zeros((k, n)))


def _b2b(kind: str, spec: str, slices: int) -> None:
    import cupy as cp

    from .fusion.tensorcore import BackToBack, BlockConfig
    from .fusion.tensorcore_persistent import PersistentBackToBack

    shape, _, block = spec.partition("@")  # b2b_persistent:64x256x64@32x128x3: row tile 32, 128 threads, depth 3;
    k0, n0, n1 = parse_shape(shape)  # b2b:288x128x64@64x256-k32: K tiles of 32. The kernel does not depend on M
    fields = parse_block(block, B2B_FIELDS, least=2, suffixes=SUFFIXES["b2b"])
    cfg = BlockConfig(**fields) if fields else None
    m = 4 * (cfg.tile_m if cfg else 128)
    if kind == "b2b_persistent":
        plan = PersistentBackToBack(m, k0, n0, n1, cfg=cfg)
    else:
        plan = BackToBack(m, k0, n0, n1, keep_d0=kind == "b2b_keep", cfg=cfg)
    z = cp.zeros
    plan(z((m, k0), cp.float16), z((k0, n0), cp.float16), z((n0, n1), cp.float16), z((m, n1), cp.float16))


def _b2b_pipelined(kind: str, spec: str, slices: int) -> None:
    import cupy as cp

    from .fusion.tensorcore_persistent import PipelineConfig, PipelinedBackToBack

    shape, _, block = spec.partition("@")
    dims = parse_shape(shape)
    nb, m, k0, n0, n1 = dims if len(dims) == 5 else (1, *dims)  # K0, N0, N1 and the block pick the kernel
    z = cp.zeros
    cfg = PipelineConfig(**dict(zip(("tile_m", "threads", "tile_k", "depth"), parse_shape(block), strict=True)))
    plan = PipelinedBackToBack(z((nb, m, k0), cp.float16), z((nb, k0, n0), cp.float16), n1, cfg)
    plan(z((nb, n0, n1), cp.float16), z((nb, m, n1), cp.float16))


def _gemm_bias_relu(kind: str, spec: str, slices: int) -> None:
    import cupy as cp

    from .fusion.tensorcore import BlockConfig, GemmBiasRelu

    shape, _, block = spec.partition("@")  # gemm_bias_relu:256x256x256@64x128x64x128: a 64 x 128 x 64 tile, 128 threads
    m, n, k = parse_shape(shape)
    cfg = BlockConfig(**parse_block(block, GEMM_FIELDS)) if block else None
    plan = GemmBiasRelu(m, n, k, cfg=cfg)
    plan(cp.zeros((m, k), cp.float16), cp.zeros((k, n), cp.float16), cp.zeros(n, cp.float16))


def parse_counts(text: str) -> list[int]:
    """``"7"`` -> [7], ``"1-7"`` -> [1, ..., 7], ``"7+12"`` -> [7, 12]: slice or moduli counts of a job."""
    counts: list[int] = []
    for part in text.split("+"):
        first, _, last = part.partition("-")
        counts += range(int(first), int(last or first) + 1)
    return counts


def _normal(m: int, n: int, seed: int) -> object:
    import cupy as cp

    from .inputs import normal

    return cp.asarray(normal(m, n, seed))


def _slicing(kind: str, spec: str, slices: int) -> None:
    """slicing:K@COUNTS: Ozaki-I's slicing kernels (plain numba, one per K and slice count) for every count, e.g.
    slicing:8192@1-7; ozaki_auto:MxNxK: the statistics and choice kernels of Ozaki-I with its count chosen on the
    device, at that shape (they depend on K), and the slicing of the count they choose."""
    from .ozaki.tensorcore import OzakiGemm

    if kind == "ozaki_auto":
        m, n, k = parse_shape(spec)
        OzakiGemm(m, n, k, "auto", "fused")(_normal(m, k, 1), _normal(k, n, 2))
        return
    size, _, counts = spec.partition("@")
    k = int(size)
    a, b = _normal(128, k, 1), _normal(k, 128, 2)
    for count in parse_counts(counts):
        OzakiGemm(128, 128, k, count, "fused").slice(a, b)


def _ozaki2(kind: str, spec: str, slices: int) -> None:
    """ozaki2:K@COUNTS: Ozaki-II's kernels for each moduli count at that K (the residues of rows depend on K), digits
    early and late, and the residues of rows from known statistics (an automatic count's); ozaki2_auto:MxNxK: its
    statistics and choice at that shape, and the count they choose."""
    from .ozaki2.tensorcore import Ozaki2Gemm

    if kind == "ozaki2_auto":
        m, n, k = parse_shape(spec)
        Ozaki2Gemm(m, n, k, "auto")(_normal(m, k, 1), _normal(k, n, 2))
        return
    size, _, counts = spec.partition("@")
    k = int(size)
    a, b = _normal(128, k, 1), _normal(k, 128, 2)
    for count in parse_counts(counts):
        for digits in ("early", "late"):
            plan = Ozaki2Gemm(128, 128, k, count, digits=digits)
            plan(a, b)
        # the residues of rows whose statistics a choice found (moduli="auto" at any shape with this K: the count
        # follows the inputs, so a notebook's auto plan may take any count of the range)
        plan.stats.compute(a, b)
        plan.scale(a, b, columns_known=True, rows_known=True)


def _conv(kind: str, spec: str, slices: int) -> None:
    import cupy as cp

    from .conv.reference import ConvShape
    from .conv.tensorcore import Conv3x3

    if kind.startswith("conv_tma"):
        _conv_tma(kind, spec)
        return
    if kind.startswith("conv_pipe") or kind.startswith("conv_b2b") or kind == "conv_1x1":
        _conv_pipelined(kind, spec)
        return
    if kind.startswith("conv_halo_b2b"):
        _conv_halo_b2b(kind, spec)
        return
    if kind.startswith("conv_halo"):
        _conv_halo(kind, spec)
        return
    from .conv.tensorcore import ConvConfig

    channels, _, block = spec.partition("@")  # conv:64x64: the plan's tile for those channels (ConvConfig.for_shape);
    c_out, c_in = parse_shape(channels)  # conv:128x64@64x32x32x64: that block. One build serves every image size
    cfg = ConvConfig(**parse_block(block, CONV_FIELDS)) if block else None
    height = max(128, cfg.tile_m if cfg else 128) // 16  # 16 pixels a row: whole row tiles
    x, w = cp.zeros((1, height, 16, c_in), cp.float16), cp.zeros((3, 3, c_in, c_out), cp.float16)
    plan = Conv3x3(ConvShape(1, height, 16, c_in, c_out), fused=kind == "conv", cfg=cfg)
    plan(x, w, cp.zeros(c_out, cp.float16))


def _conv_pipelined(kind: str, spec: str) -> None:
    """conv_pipe[_unfused]:64x64@128x64x64-t128-d3-g1-s (C_out x C_in, tile), conv_pipe_gather and conv_pipe_mma
    (the speed run's diagnostics: one part of the work each), conv_1x1:64x64@... (1x1 + bias + ReLU),
    conv_b2b[_keep]:64x64x64@... (C_in x C_mid x C_out; a tile tma... for the 3x3's A by tensor copies): one build
    serves every image size."""
    import cupy as cp

    from .conv.layout import TMA_PREFIX, PipeConfig, TmaConfig, one_by_one_config
    from .conv.reference import B2BShape, ConvShape
    from .conv.tensorcore_persistent import ConvB2B, PipelinedConv

    dims, _, tile = spec.partition("@")
    sizes = parse_shape(dims)
    copies = tile.startswith(TMA_PREFIX)
    cfg = (TmaConfig if copies else PipeConfig).parse(tile) if tile else None
    if kind == "conv_1x1" and cfg is None:  # the unfused back-to-back path's (UnfusedConvB2B)
        cfg = one_by_one_config(PipeConfig(), sizes[1], sizes[0])
    rows = (cfg.tile_m if cfg else 128) // 16  # 2 x rows x 8 pixels: whole row tiles
    # tensor copies: one image row a tile (a box); gathers: 2 x rows x 8 pixels, whole row tiles
    height, width = (1, cfg.tile_m) if copies else (rows, 8)
    if kind.startswith("conv_b2b"):
        c_in, c_mid, c_out = sizes
        if copies and not tma_available():
            return
        shape = B2BShape(2, height, width, c_in, c_mid, c_out)
        x = cp.zeros((2, height, width, c_in), cp.float16)
        ConvB2B(shape, cfg=cfg, keep_d0=kind == "conv_b2b_keep")(
            x,
            cp.zeros((3, 3, c_in, c_mid), cp.float16),
            cp.zeros((c_mid, c_out), cp.float16),
            cp.zeros(c_out, cp.float16),
        )
        return
    c_out, c_in = sizes
    taps = 1 if kind == "conv_1x1" else 9
    w = cp.zeros((3, 3, c_in, c_out) if taps == 9 else (c_in, c_out), cp.float16)
    parts = {"conv_pipe_gather": "gather", "conv_pipe_mma": "mma"}.get(kind, "all")
    plan = PipelinedConv(
        ConvShape(2, rows, 8, c_in, c_out), fused=kind != "conv_pipe_unfused", cfg=cfg, taps=taps, parts=parts
    )
    plan(cp.zeros((2, rows, 8, c_in), cp.float16), w, cp.zeros(c_out, cp.float16))


def tma_available() -> bool:
    """Whether this GPU (or the CPU build's target) has tensor copies; says so when not."""
    from .machinery import tma

    why = tma.unavailable()
    if why is not None:  # before Hopper: the notebooks and the speed run leave these kernels out too
        print(f"prebuild: tensor-copy kernels left out: {why}")
    return why is None


def _conv_tma(kind: str, spec: str) -> None:
    """conv_tma[_unfused|_gather|_mma]:64x64@128x64x64-t128-d2-g1-s (C_out x C_in, tile): the pipelined kernel with
    its A tiles by tensor copies (``conv.tensorcore_tma``); one build serves every image size its boxes fit."""
    import cupy as cp

    from .conv.layout import TMA_PREFIX, TmaConfig
    from .conv.reference import ConvShape

    if not tma_available():
        return
    from .conv.tensorcore_persistent import TmaConv

    dims, _, tile = spec.partition("@")
    c_out, c_in = parse_shape(dims)
    cfg = TmaConfig.parse(tile if tile.startswith(TMA_PREFIX) else TMA_PREFIX + tile) if tile else None
    width = cfg.tile_m if cfg else 128  # one image row a tile: a box of the tile's width
    parts = {"conv_tma_gather": "gather", "conv_tma_mma": "mma"}.get(kind, "all")
    plan = TmaConv(ConvShape(2, 1, width, c_in, c_out), fused=kind != "conv_tma_unfused", cfg=cfg, parts=parts)
    w = cp.zeros((3, 3, c_in, c_out), cp.float16)
    plan(cp.zeros((2, 1, width, c_in), cp.float16), w, cp.zeros(c_out, cp.float16))


def _conv_halo(kind: str, spec: str) -> None:
    """conv_halo[_unfused|_gather|_mma]:64x64@h128x64x64-t256 (C_out x C_in, tile): the halo kernel, one build for
    every image whose width is a multiple of the tile's rows."""
    import cupy as cp

    from .conv.halo import HaloConfig
    from .conv.reference import ConvShape
    from .conv.tensorcore_halo import HaloConv

    dims, _, tile = spec.partition("@")
    c_out, c_in = parse_shape(dims)
    cfg = HaloConfig.parse(tile) if tile else None
    width = cfg.tile_m if cfg else 128
    parts = {"conv_halo_gather": "gather", "conv_halo_mma": "mma"}.get(kind, "all")
    plan = HaloConv(ConvShape(2, 2, width, c_in, c_out), fused=kind != "conv_halo_unfused", cfg=cfg, parts=parts)
    w = cp.zeros((3, 3, c_in, c_out), cp.float16)
    plan(cp.zeros((2, 2, width, c_in), cp.float16), w, cp.zeros(c_out, cp.float16))


def _conv_halo_b2b(kind: str, spec: str) -> None:
    """conv_halo_b2b[_keep]:64x64x64[@h128x64x64-t256] (C_in x C_mid x C_out, tile; its N is C_mid)."""
    import cupy as cp

    from .conv.halo import HaloConfig
    from .conv.reference import B2BShape
    from .conv.tensorcore_halo import HaloConvB2B

    dims, _, tile = spec.partition("@")
    c_in, c_mid, c_out = parse_shape(dims)
    cfg = HaloConfig.parse(tile) if tile else HaloConfig(tile_n=c_mid)
    shape = B2BShape(2, 2, cfg.tile_m, c_in, c_mid, c_out)
    HaloConvB2B(shape, cfg=cfg, keep_d0=kind == "conv_halo_b2b_keep")(
        cp.zeros((2, 2, cfg.tile_m, c_in), cp.float16),
        cp.zeros((3, 3, c_in, c_mid), cp.float16),
        cp.zeros((c_mid, c_out), cp.float16),
        cp.zeros(c_out, cp.float16),
    )


def _multipass(kind: str, spec: str, slices: int) -> None:
    from .multipass.benchmarks import TEST_SHAPE, random_operands
    from .multipass.config import PassConfig
    from .multipass.tensorcore import PassGemm, PipelineGemm

    dtype, value = spec.split(":")
    if kind == "multipass":  # one build serves every size; multipass:float16:8@64x64x128-n16: that block, N = 16
        fused, _, block = value.partition("@")
        m, n, k = TEST_SHAPE
        cfg = PassConfig(
            dtype, fused=int(fused), **parse_block(block, MULTIPASS_FIELDS, suffixes=SUFFIXES["multipass"])
        )
        PassGemm(m, n, k, cfg)(*random_operands(m, n, k, dtype))
    else:  # one build per dtype serves every size (shape-generic pipelines: utilities.machinery.pipelines)
        size = int(value)
        m, n, k = (size, size, size) if size != TEST_SHAPE[0] else TEST_SHAPE
        PipelineGemm(*random_operands(m, n, k, dtype), dtype)()


def _primer(kind: str, spec: str, slices: int) -> None:
    import cupy as cp

    from .plans import TileConfig
    from .primer.tensorcore import StackSum, TileGemm

    what, _, block = spec.partition("@")  # primer:tile, the exercise's kernel (primer:tile@64x64x32x64: at that
    if what == "tile":  # block); primer:stack, the device-pipeline kernel
        plan = TileGemm(256, 384, cfg=TileConfig(**parse_block(block, PRIMER_FIELDS)) if block else None)
        plan(cp.zeros((plan.m, plan.k), cp.float16), cp.zeros((plan.k, plan.n), cp.float16))
    elif spec == "stack":
        StackSum(cp.zeros((2, 128, 128), cp.int8), cp.zeros((2, 128, 128), cp.int8))()
    else:
        raise ValueError(f"primer:{spec}: the primer's jobs are primer:tile[@TMxTNxTKxTHREADS] and primer:stack")


BUILDERS: dict[str, Callable[[str, str, int], None]] = {
    "unfused": lambda kind, spec, slices: _ozaki(kind, spec, slices),
    "partial": lambda kind, spec, slices: _ozaki(kind, spec, slices),
    "fused": lambda kind, spec, slices: _ozaki(kind, spec, slices),
    "b2b": _b2b,
    "b2b_keep": _b2b,
    "b2b_persistent": _b2b,
    "b2b_pipelined": _b2b_pipelined,
    "gemm_bias_relu": _gemm_bias_relu,
    "conv": _conv,
    "conv_unfused": _conv,
    "conv_pipe": _conv,
    "conv_pipe_unfused": _conv,
    "conv_pipe_gather": _conv,
    "conv_pipe_mma": _conv,
    "conv_1x1": _conv,
    "conv_b2b": _conv,
    "conv_b2b_keep": _conv,
    "conv_tma": _conv,
    "conv_tma_unfused": _conv,
    "conv_tma_gather": _conv,
    "conv_tma_mma": _conv,
    "conv_halo": _conv,
    "conv_halo_unfused": _conv,
    "conv_halo_gather": _conv,
    "conv_halo_mma": _conv,
    "conv_halo_b2b": _conv,
    "conv_halo_b2b_keep": _conv,
    "multipass": _multipass,
    "pipeline": _multipass,
    "primer": _primer,
    "slicing": _slicing,
    "ozaki_auto": _slicing,
    "ozaki2": _ozaki2,
    "ozaki2_auto": _ozaki2,
}
# Seconds a kind took in the prebuild of results/nvidia-h100-80gb-hbm3-builds.md (16 builds at a time): the order and
# the estimates of the first prebuild on a machine; later ones use what this machine measured. Data, not prose.
KIND_SECONDS = {
    "unfused": 185,
    "partial": 70,
    "fused": 80,
    "b2b": 315,
    "b2b_keep": 315,
    "b2b_persistent": 330,
    "b2b_pipelined": 355,
    "gemm_bias_relu": 200,
    "conv": 175,
    "conv_unfused": 165,
    "conv_pipe": 175,  # not measured yet: as the two-stage kernel
    "conv_pipe_unfused": 165,
    "conv_pipe_gather": 120,
    "conv_pipe_mma": 165,
    "conv_1x1": 165,
    "conv_b2b": 250,
    "conv_b2b_keep": 250,
    "conv_tma": 175,  # not measured yet: as the pipelined kernel
    "conv_tma_unfused": 165,
    "conv_tma_gather": 120,
    "conv_tma_mma": 165,
    "conv_halo": 175,  # not measured yet: as the pipelined kernel
    "conv_halo_unfused": 165,
    "conv_halo_gather": 120,
    "conv_halo_mma": 165,
    "conv_halo_b2b": 250,  # not measured yet: as the pipelined back-to-back kernel
    "conv_halo_b2b_keep": 250,
    "pipeline": 190,
    "multipass": 125,
    "primer": 120,  # a guess: not yet measured
    "slicing": 30,  # plain numba kernels: guesses, not yet measured
    "ozaki_auto": 30,
    "ozaki2": 60,
    "ozaki2_auto": 30,
}

# What the notebooks, the tests and the GPU report build: one job per distinct kernel. Device pipelines are
# shape-generic (utilities.machinery.pipelines), so the Ozaki-I, pipelined GEMM and pipelined back-to-back
# kernels built at one small shape serve every shape; the other kernels take their sizes at run time.
OZAKI_JOBS = "unfused:256x256x384,partial:256x256x384,fused:256x256x384"
FUSION_JOBS = (
    "b2b:576x64x128,b2b:64x256x64,b2b_keep:576x64x128,b2b_keep:64x256x64,gemm_bias_relu:512x128x256,"
    "b2b_persistent:64x256x64@32x128x3,b2b_persistent:576x64x128@128x256x3,b2b_pipelined:2560x64x256x64@64x128x32x2"
)
MULTIPASS_JOBS = (
    "multipass:int8:1,multipass:int8:2,multipass:int8:4,multipass:int8:8,multipass:float16:1,multipass:float16:2,"
    "multipass:float16:4,multipass:float16:8,pipeline:int8:256,pipeline:float16:256"
)
# The halo kernel at its checks' tiles (utilities.conv.benchmarks.HALO_CHECKS, tests/test_conv_gpu.py): C_out x C_in
# with the plan's default block (C_out picks its 64 or 32 columns, nothing more), two halos a tile, 64-pixel tiles;
# the back-to-back kernel at halo.HALO_B2B_CHECKS, with D0 kept and without
HALO_JOBS = (
    "conv_halo:64x64,conv_halo_unfused:64x64,conv_halo:32x128,conv_halo:64x64@h64x64x64-t256,"
    "conv_halo_b2b:64x64x64,conv_halo_b2b_keep:64x64x64,conv_halo_b2b:64x64x128@h64x64x64-t256,"
    "conv_halo_b2b_keep:64x64x128@h64x64x64-t256"
)
# The back-to-back kernel's default blocks on tensor copies (utilities.conv.benchmarks.default_b2b_config on Hopper:
# layout.with_tensor_copies of layout.b2b_config, at the target's widths and at the wide chain's; a test holds them)
TMA_B2B_TILE = "tma128x64x64-t128-d2-g1-s-b3-w"
TMA_B2B_WIDE_TILE = "tma64x256x32-t256-d2-g1-s"
CONV_JOBS = (  # (C_out x C_in: the tile's widths; the pipelined kernels and 2c's diagnostics at the plan's default
    # tile; the back-to-back kernel at the target's channels and at the checks' (C_out = 128); on tensor copies, left
    # out before Hopper: the plan's default (the filters by copies too), the kernel with only A by copies (2c's
    # section 6 names it, the GPU tests check it) and 2d's timed back-to-back kernel)
    "conv:64x64,conv_unfused:64x64,conv:32x32,conv_unfused:32x32,conv_pipe:64x64,conv_pipe_unfused:64x64,"
    "conv_pipe_gather:64x64,conv_pipe_mma:64x64,conv_tma:64x64,conv_tma_unfused:64x64,conv_tma_gather:64x64,"
    "conv_tma_mma:64x64,conv_tma:64x64@tma128x64x64-t128-d2-g1-s,conv_1x1:64x64,conv_b2b:64x64x64,"
    f"conv_b2b:64x64x128,conv_b2b_keep:64x64x128,conv_b2b:64x64x64@{TMA_B2B_TILE},{HALO_JOBS}"
)
# Every kernel `python -m utilities.conv.benchmarks` builds (utilities.conv.layout.speed_configs: the default tile
# first), for --jobs before that run: each setting fused and unfused, the default's two diagnostics, 2c's two-stage
# kernel, and the back-to-back kernels of its checks and of its timing, at the target and 64 -> 256 -> 64.
CONV_SPEED_TILES = (
    "128x64x64-t128-d2-g1-s",
    "128x64x64-t128-d2-g1-s-b3",
    "128x64x64-t128-d3-g1-s",
    "128x64x64-t128-d2-g1-r",
)
CONV_SPEED_JOBS = ",".join(
    [f"conv_pipe:64x64@{t}" for t in CONV_SPEED_TILES]
    + [f"conv_pipe_unfused:64x64@{t}" for t in CONV_SPEED_TILES]
    + [f"conv_pipe_gather:64x64@{CONV_SPEED_TILES[0]}", f"conv_pipe_mma:64x64@{CONV_SPEED_TILES[0]}"]
    + ["conv_1x1:64x64", "conv:64x64", "conv_b2b:64x64x64", "conv_b2b:64x64x128", "conv_b2b_keep:64x64x128"]
    + ["conv_b2b:64x256x64", "conv_b2b_keep:64x256x64", "conv_1x1:64x256"]  # the wide chain (its 3x3: conv_pipe's)
    + ["conv_halo_gather:64x64", "conv_halo_mma:64x64"]  # the halo kernel's diagnostics (its kernels: CONV_JOBS)
    # on tensor copies (Hopper): the back-to-back defaults' checks and the wide chain (its unfused 3x3: conv_tma's);
    # the tensor-copy kernel's four at the default tile are CONV_JOBS'
    + [f"conv_b2b:64x64x128@{TMA_B2B_TILE}", f"conv_b2b_keep:64x64x128@{TMA_B2B_TILE}"]
    + [f"conv_b2b:64x256x64@{TMA_B2B_WIDE_TILE}", f"conv_b2b_keep:64x256x64@{TMA_B2B_WIDE_TILE}", "conv_tma:256x64"]
)
PRIMER_JOBS = "primer:tile,primer:stack"  # notebook 0's two kernels
# The plain numba kernels of the Ozaki tracks, at every K and count the notebooks use: slicing per K and slice count
# (3b-3d's checks at K = 392 and their race runs' 3 slices, their 8192^3 runs, 3c's and 3d's sweeps, 4b's Ozaki-I
# beside Ozaki-II); Ozaki-II per K
# and moduli count (4b at 512, 2048 and 8192, with margin around the counts its inputs choose); the statistics and
# choices of both automatic plans at the sizes 4b runs them.
PLAIN_JOBS = (
    "slicing:392@3+7+12,slicing:2048@3-10,slicing:4096@7,slicing:8192@1-7,"
    "ozaki_auto:2048x2048x2048,ozaki_auto:8192x8192x8192,"
    "ozaki2:512@14-17,ozaki2:2048@12-18,ozaki2:8192@14-16,"
    "ozaki2_auto:512x512x512,ozaki2_auto:2048x2048x2048,ozaki2_auto:8192x8192x8192"
)
LEVER_JOBS = "gemm_bias_relu:256x256x256@64x128x64x128,b2b:576x64x128@64x128"  # 2a's and 2b's stretch levers
OZAKI_VARIANTS = ("unfused", "partial", "fused")


def _dims(block: dict, fields: tuple[str, ...], where: str = "") -> str:
    """The sizes of ``block`` in the order of ``fields``, as a job writes them (``64x64x32x64``)."""
    missing = [name for name in fields if name not in block]
    if missing:
        raise ValueError(f"{where or 'a block'} {block} names no {', '.join(missing)}: its prebuild job needs it")
    return "x".join(str(block[name]) for name in fields)


def check_jobs() -> list[str]:
    """The course's twin of every kernel an exercise's check builds: one job per block of each check module's
    contract (issue 41: every size of a kernel's block at two values), read from the modules when called, so that
    a block added to a contract gets its job. Each builds the course's kernel with the ``Matmul`` (sizes, dtype,
    threads, arrangement) and pipeline the check's plan gives the attendee's kernel at that block, at the check's
    sizes: a check then links the attendee's kernel against code in the cache, in seconds, instead of having
    libmathdx generate it, in minutes.

    The contracts: ``primer.check.CONFIGS``, ``multipass.check.CONFIGS``, ``fusion.check.GEMM_CONFIGS`` and
    ``B2B_CONFIGS``, ``conv.check.CONV_CONFIGS`` and ``CONV_B2B_CONFIGS`` (2d keeps D0), and 3b's, 3c's and 3d's
    two: their plan's own block (the GPU's tile) and ``ozaki.check.OTHER_TILE`` (with 7 slices: the prebuild's
    default ``--slices``)."""
    from .conv import check as conv
    from .conv.layout import PipeConfig, b2b_config
    from .fusion import check as fusion
    from .multipass import check as multipass
    from .multipass.config import PassConfig
    from .ozaki import check as ozaki
    from .primer import check as primer

    jobs = [f"primer:tile@{_dims(c, PRIMER_FIELDS, 'primer.check.CONFIGS')}" for c in primer.CONFIGS]
    for dtype, fields in multipass.CONFIGS.items():
        p = PassConfig(dtype, **fields)
        jobs.append(f"multipass:{dtype}:{p.fused}@{p.tile_m}x{p.tile_n}x{p.threads}-n{p.passes}")
    m, n, k = fusion.GEMM_SHAPE
    for c in fusion.GEMM_CONFIGS:
        jobs.append(f"gemm_bias_relu:{m}x{n}x{k}@{_dims(c, GEMM_FIELDS, 'fusion.check.GEMM_CONFIGS')}")
    for c in fusion.B2B_CONFIGS:
        _, k0, n0, n1 = c["shape"]
        b = c["block"]
        block = _dims(b, ("tile_m", "threads"), "fusion.check.B2B_CONFIGS") + (f"x{b['depth']}" if "depth" in b else "")
        block += f"-k{b['tile_k']}" if "tile_k" in b else ""
        jobs.append(f"{'b2b_keep' if c['keep_d0'] else 'b2b'}:{k0}x{n0}x{n1}@{block}")
    s = conv.CONV_SHAPE
    jobs += [f"conv:{s.c_out}x{s.c_in}@{_dims(c, CONV_FIELDS, 'conv.check.CONV_CONFIGS')}" for c in conv.CONV_CONFIGS]
    s = conv.B2B_SHAPE  # the notebook's plans: PipeConfig(tile_n=C_mid, **fields), or the plan's default, D0 kept
    for fields in conv.CONV_B2B_CONFIGS:
        cfg = PipeConfig(tile_n=s.c_mid, **fields) if fields else b2b_config(s.c_mid, s.c_out)
        jobs.append(f"conv_b2b_keep:{s.c_in}x{s.c_mid}x{s.c_out}@{cfg.spec}")
    m, n, k = ozaki.GEMM_SHAPES[0]  # the plan's own block (the GPU's tile): the shape picks the plain kernels only
    jobs += [f"{variant}:{m}x{n}x{k}" for variant in OZAKI_VARIANTS]
    m, n, k = ozaki.GEMM_SHAPES[-1]  # the shape the check runs OTHER_TILE at: it picks the slicing's padded K
    tile = _dims(ozaki.OTHER_TILE, OZAKI_FIELDS, "ozaki.check.OTHER_TILE")
    return jobs + [f"{variant}:{m}x{n}x{k}@{tile}" for variant in OZAKI_VARIANTS]


# The block a job without one builds: its plan's default, for kernel_of. The plans of the primer, 2a, 2b and 2c live
# in modules that need a GPU to import, so theirs are written out here; tests/test_tooling_prebuild_coverage.py holds
# each to its plan's source.
PRIMER_TILE = {"tile_m": 128, "tile_n": 128, "tile_k": 64, "threads": 128}  # primer.tensorcore.TILE_CONFIG
EPILOGUE_BLOCK = {"tile_m": 128, "tile_n": 128, "tile_k": 64, "threads": 128}  # fusion.tensorcore.EPILOGUE_BLOCK


def b2b_default(n0: int, n1: int) -> dict[str, int]:
    """``BackToBack``'s block without a ``cfg``: 128 rows where N0 and N1 allow, else 64; BlockConfig's others."""
    return {"tile_m": 128 if max(n0, n1) <= 128 else 64, "threads": 128, "depth": 3, "tile_k": 64}


def conv_default(c_out: int, c_in: int) -> dict[str, int]:
    """``Conv3x3``'s block without a ``cfg`` (``ConvConfig.for_shape``): 64-wide tiles where the channels allow."""
    return {
        "tile_m": 128,
        "tile_n": 64 if c_out % 64 == 0 else 32,
        "tile_k": 64 if c_in % 64 == 0 else 32,
        "threads": 128,
    }


def kernel_of(job: str) -> str:
    """What a job builds, as one string: its kind, the sizes that pick its cuBLASDx kernel and the whole block (a job
    without one: its plan's default), without the sizes that pick nothing (M, images, channels beside the tile):
    two jobs with one ``kernel_of`` build the same code. ``b2b:576x64x128@64x128`` -> ``b2b:64x128@64x128-k64``
    (N0 x N1, rows x threads, the K tile; the streaming kernels have two stages whatever the depth). Kinds without
    a block (and the plain numba kernels) are their job."""
    kind, _, spec = job.partition(":")
    shape, _, block = spec.partition("@")
    if kind == "primer" and shape == "tile":
        return f"primer:tile@{_dims(parse_block(block, PRIMER_FIELDS) or PRIMER_TILE, PRIMER_FIELDS)}"
    if kind == "gemm_bias_relu":
        return f"{kind}@{_dims(parse_block(block, GEMM_FIELDS) or EPILOGUE_BLOCK, GEMM_FIELDS)}"
    if kind in ("b2b", "b2b_keep"):
        _, n0, n1 = parse_shape(shape)
        b = {**b2b_default(n0, n1), **parse_block(block, B2B_FIELDS, least=2, suffixes=SUFFIXES["b2b"])}
        return f"{kind}:{n0}x{n1}@{b['tile_m']}x{b['threads']}-k{b['tile_k']}"
    if kind in ("conv", "conv_unfused"):
        c_out, c_in = parse_shape(shape)
        return f"{kind}@{_dims(parse_block(block, CONV_FIELDS) or conv_default(c_out, c_in), CONV_FIELDS)}"
    if kind in ("conv_b2b", "conv_b2b_keep"):  # C_in picks the K stages, C_mid and C_out the two GEMMs
        from .conv.layout import TMA_PREFIX, PipeConfig, TmaConfig, b2b_config

        cfg = (TmaConfig if block.startswith(TMA_PREFIX) else PipeConfig).parse(block) if block else None
        return f"{kind}:{shape}@{(cfg or b2b_config(*parse_shape(shape)[1:])).spec}"
    if kind == "multipass":  # one phase's Matmul: N (passes) picks nothing
        from .multipass.config import PassConfig

        dtype, _, fused = shape.partition(":")
        fields = parse_block(block, MULTIPASS_FIELDS, suffixes=SUFFIXES["multipass"])
        p = PassConfig(dtype, fused=int(fused), **fields)
        return f"multipass:{dtype}:{p.tile_m}x{p.tile_n}x{p.phase_k}x{p.threads}"
    if kind in OZAKI_VARIANTS:  # no block: the GPU's tile (ozaki.simt.tile_config), which no other job names
        return f"{kind}@{_dims(parse_block(block, OZAKI_FIELDS), OZAKI_FIELDS) if block else 'gpu'}"
    return job


def missing_twins(jobs: str) -> list[str]:
    """The jobs of :func:`check_jobs` whose kernel (:func:`kernel_of`) none of ``jobs`` (comma-separated) builds."""
    built = {kernel_of(job) for job in jobs.split(",") if job}
    twins = []
    for job in check_jobs():
        if kernel_of(job) not in built:
            built.add(kernel_of(job))
            twins.append(job)
    return twins


# Every job but the checks' twins, then the twins those lack (today: the second block of each exercise's contract).
NOTEBOOK_JOBS = f"{OZAKI_JOBS},{FUSION_JOBS},{LEVER_JOBS},{CONV_JOBS},{MULTIPASS_JOBS},{PRIMER_JOBS},{PLAIN_JOBS}"
CHECK_JOBS = ",".join(missing_twins(NOTEBOOK_JOBS))
COURSE_JOBS = f"{NOTEBOOK_JOBS},{CHECK_JOBS}" if CHECK_JOBS else NOTEBOOK_JOBS


@functools.cache
def check_kernels() -> frozenset[str]:
    """:func:`kernel_of` every job of :func:`check_jobs`: the kernels an attendee's edit is linked beside."""
    return frozenset(kernel_of(job) for job in check_jobs())


def build_one(job: str, slices: int) -> None:
    """Build one job (``kind:spec``) into the build cache, in this process (on the CPU when ``$COURSE_CPU_BUILD``
    names a GPU architecture: ``utilities.machinery.cpu_build``).

    A check's twin (:func:`check_kernels`) is typed even when the cache holds it (fast dispatch records it but does
    not serve it), and the libmathdx code it links is kept in the cache (``buildcache.keeping_code``): after a
    launch-only import only its digest is there, and an attendee's edited kernel, which links the same code, would
    generate it first (minutes in a check). Elsewhere the cache holds the code already, and the job costs its
    typing."""
    from .machinery import cpu_build

    if cpu_build.target():
        cpu_build.enter()
    import cupy as cp

    from .machinery import buildcache
    from .machinery.buildcache import dispatch

    kind, _, spec = job.partition(":")
    if kind not in BUILDERS:
        raise ValueError(f"unknown kernel kind {kind!r} in job {job!r}: one of {', '.join(BUILDERS)}")
    twin = kernel_of(job) in check_kernels()
    if twin:
        os.environ[dispatch.ENV] = dispatch.RECORD  # typed, so that the code it links is seen; its record still left
    buildcache.install()
    with buildcache.keeping_code() if twin else contextlib.nullcontext():
        BUILDERS[kind](kind, spec, slices)
        cp.cuda.Device().synchronize()


# --- scheduling, progress and the report ----------------------------------------------------------------------


def _times_file() -> Path | None:
    from .machinery.buildcache.store import default_cache_dir

    root = default_cache_dir()
    return None if root is None else root / "prebuild-seconds.json"


def measured_seconds() -> dict[str, float]:
    """The seconds each job took in this machine's last prebuilds (empty when there were none)."""
    path = _times_file()
    try:
        return {str(k): float(v) for k, v in json.loads(path.read_text()).items()} if path else {}
    except (OSError, ValueError, AttributeError):
        return {}


def _save_seconds(seconds: dict[str, float]) -> None:
    path = _times_file()
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**measured_seconds(), **seconds}, indent=1, sort_keys=True))
    except OSError:
        pass  # an estimate for the next run is a convenience, never a reason to fail


RUN_FILE = "prebuild-run.json"  # beside the cache: when the last prebuild started, its jobs, whether all built


def _record_run(root: Path | None, record: dict[str, Any]) -> None:
    if root is None:
        return
    try:
        root.mkdir(parents=True, exist_ok=True)
        (root / RUN_FILE).write_text(json.dumps(record, indent=1))
    except OSError:
        pass  # what an export may leave out: a convenience, never a reason to fail


def last_full_run(root: Path) -> tuple[float | None, str]:
    """When the last prebuild of every course job started (and perhaps more: a speed run's kernels), if all of them
    built (else None, and why not)."""
    try:
        record = json.loads((root / RUN_FILE).read_text())
    except (OSError, ValueError):
        return None, f"no prebuild recorded in {root} (run python -m utilities.prebuild first)"
    if not set(COURSE_JOBS.split(",")) <= set(record.get("jobs", [])):
        return None, "the last prebuild left out jobs of the course's: every job must run, or its cubins go"
    if not record.get("built"):
        return None, "the last prebuild did not build every job"
    return float(record["started"]), ""


def order(jobs: list[str], known: dict[str, float]) -> list[str]:
    """Longest first (known seconds, else the kind's typical seconds), so that no long build starts last."""
    return sorted(jobs, key=lambda job: -known.get(job, KIND_SECONDS.get(job.partition(":")[0], 120)))


def _clock(seconds: float) -> str:
    return f"{int(seconds) // 60} min {int(seconds) % 60:02d} s" if seconds >= 60 else f"{seconds:.0f} s"


def progress_line(
    done: int, total: int, job: str, seconds: float, elapsed: float, left: float | None, note: str = ""
) -> str:
    """One line per finished build: how many of how many, which, its time (and ``note``: the build cache's counts),
    elapsed, and what is left."""
    estimate = "" if left is None else f", about {_clock(left)} left"
    note = f" ({note})" if note else ""
    return f"prebuild: [{done}/{total}] {job}: {seconds:.0f} s{note}; {_clock(elapsed)} elapsed{estimate}"


STATS = "prebuild-stats: "  # a job's last line: its build cache counts, for the progress line
KEYS_MARK = "prebuild-keys: "  # a job's line before it: each kernel it looked up, its key, recipe and whether it linked


def job_keys() -> list[dict]:
    """Each kernel this process looked up in the build cache, in order: ``buildcache.linking.key_record`` and
    ``linked`` (not served: linked here)."""
    from .machinery.buildcache import linking

    linked = set(linking.COURSE_LINKED_KEYS)
    return [{**linking.key_record(name, key), "linked": key in linked} for name, key in linking.KEYS]


def job_output(stdout: str) -> tuple[str, list[dict]]:
    """What a job's process printed: its build cache counts (for the progress line; "" if none) and its kernels'
    keys (:func:`job_keys`; [] if none)."""
    lines = stdout.splitlines()
    said = [line.removeprefix(STATS) for line in lines if line.startswith(STATS)]
    told = [line.removeprefix(KEYS_MARK) for line in lines if line.startswith(KEYS_MARK)]
    return (said[-1] if said else ""), (json.loads(told[-1]) if told else [])


def write_keys(path: Path, keys: dict[str, list[dict]]) -> None:
    """``--keys``: every job's :func:`job_keys`, by job, as JSON (beside a GPU proof's logs, or a CPU bundle): the same
    job's kernels keyed on two machines can be compared part by part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dict(sorted(keys.items())), indent=1))


def build_workers(cores: int) -> int:
    """Code generation workers for each job: a quarter of the cores (at least two). The jobs share the cores through
    slots (``codegen_workers.Slots``, one per core and per 3 GiB), so a job generates with that many workers only
    when the cores are free: a long job, alone once the others are done, no longer generates one function after
    another (the prebuild's longest path: ``instructor-notes/machinery.md``)."""
    return max(2, cores // 4)


def _slots(count: int) -> codegen_workers.Slots | None:
    """``count`` slots in a folder of this run's, for the jobs' code generation workers to share (None where the
    system has no ``flock``: each job then generates with its own workers)."""
    try:
        import fcntl  # noqa: F401  (the slots' locks)
    except ImportError:
        return None
    return codegen_workers.Slots(tempfile.mkdtemp(prefix="prebuild-slots-"), count)


def estimate_left(
    pending: list[str],
    running: dict[str, float],
    known: dict[str, float],
    parallel: int,
    now: float,
    finished: dict[str, float] | None = None,
) -> float:
    """Seconds until every build is done: the work left shared among ``parallel`` processes, but never less than
    the longest single build still to finish.

    A job's cost is its known seconds (else its kind's typical seconds), scaled by how this run's ``finished`` builds
    compared with their expected costs (builds side by side take longer than alone). A running build already past
    its cost is given a quarter of its elapsed time more.
    """

    def cost(job: str) -> float:
        return known.get(job, KIND_SECONDS.get(job.partition(":")[0], 120))

    finished = finished or {}
    scale = sum(finished.values()) / sum(cost(job) for job in finished) if finished else 1.0
    remaining = []
    for job, start in running.items():
        elapsed = now - start
        expected = cost(job) * scale
        remaining.append(expected - elapsed if expected - elapsed > 0.1 * expected else max(0.25 * elapsed, 10.0))
    remaining += [cost(job) * scale for job in pending]
    if not remaining:
        return 0.0
    return max(sum(remaining) / max(1, parallel), max(remaining))


def report_table(results: list[tuple[str, float, bool]]) -> str:
    """The build times, longest first, and the total."""
    width = max(len(job) for job, _, _ in results)
    lines = [f"{'kernel':<{width}}  {'seconds':>7}  built"]
    for job, seconds, ok in sorted(results, key=lambda r: -r[1]):
        lines.append(f"{job:<{width}}  {seconds:7.1f}  {'yes' if ok else 'FAILED'}")
    return "\n".join(lines)


def _cannot_build_here(arch: tuple[int, int] | None = None) -> str | None:
    """The preflight's table and verdict; the reason a GPU build cannot run here, or None. With ``arch``, a build
    on the CPU for that GPU architecture (``utilities.machinery.cpu_build``): the reason it cannot run here."""
    if arch is not None:
        from .machinery import cpu_build

        return cpu_build.unavailable()
    from .preflight import PreflightError, preflight

    try:
        preflight(require_gpu=True, require_mathdx=True)
    except PreflightError as error:
        return str(error)
    return None


# How each kind's spec reads, for --help; a kind without one here is listed as KIND:SPEC.
SPEC_FORMS = {
    "unfused": "MxNxK[@TMxTNxTKxTHREADSxDEPTH]",
    "partial": "MxNxK[@TMxTNxTKxTHREADSxDEPTH]",
    "fused": "MxNxK[@TMxTNxTKxTHREADSxDEPTH]",
    "b2b": "K0xN0xN1[@TMxTHREADS[xDEPTH][-kTK]]",
    "b2b_keep": "K0xN0xN1[@TMxTHREADS[xDEPTH][-kTK]]",
    "b2b_persistent": "K0xN0xN1[@TMxTHREADS[xDEPTH][-kTK]]",
    "b2b_pipelined": "[BATCHx]MxK0xN0xN1@TMxTHREADSxTKxDEPTH",
    "conv": "COUTxCIN[@TMxTNxTKxTHREADS]",
    "conv_unfused": "COUTxCIN[@TMxTNxTKxTHREADS]",
    "conv_pipe": "COUTxCIN[@TILE] (TILE as utilities.conv.layout's spec, e.g. 128x64x64-t128-d3-g1-s)",
    "conv_pipe_unfused": "COUTxCIN[@TILE]",
    "conv_pipe_gather": "COUTxCIN[@TILE]",
    "conv_pipe_mma": "COUTxCIN[@TILE]",
    "conv_1x1": "COUTxCIN[@TILE]",
    "conv_b2b": "CINxCMIDxCOUT[@TILE]",
    "conv_b2b_keep": "CINxCMIDxCOUT[@TILE]",
    "conv_tma": "COUTxCIN[@TILE] (TILE as utilities.conv.layout's spec, e.g. 128x64x64-t128-d2-g1-s, or tma...-w)",
    "conv_tma_unfused": "COUTxCIN[@TILE]",
    "conv_tma_gather": "COUTxCIN[@TILE]",
    "conv_tma_mma": "COUTxCIN[@TILE]",
    "conv_halo": "COUTxCIN[@TILE] (TILE as utilities.conv.halo's spec, e.g. h128x64x64-t256)",
    "conv_halo_unfused": "COUTxCIN[@TILE]",
    "conv_halo_gather": "COUTxCIN[@TILE]",
    "conv_halo_mma": "COUTxCIN[@TILE]",
    "conv_halo_b2b": "CINxCMIDxCOUT[@TILE] (TILE as utilities.conv.halo's spec; its N is C_mid)",
    "conv_halo_b2b_keep": "CINxCMIDxCOUT[@TILE]",
    "multipass": "int8|float16:F[@TMxTNxTHREADS[-nN]] (N passes, default 8)",
    "pipeline": "int8|float16:SIZE",
    "primer": "tile[@TMxTNxTKxTHREADS]|stack",
    "gemm_bias_relu": "MxNxK[@TMxTNxTKxTHREADS]",
    "slicing": "K@COUNTS (COUNTS: 7, 1-7 or 7+12)",
    "ozaki_auto": "MxNxK",
    "ozaki2": "K@COUNTS",
    "ozaki2_auto": "MxNxK",
}


def kinds_help() -> str:
    """Every job kind of :data:`BUILDERS`, one a line, with the form of its spec."""
    return "job kinds:\n" + "\n".join(f"  {kind}:{SPEC_FORMS.get(kind, 'SPEC')}" for kind in BUILDERS)


# --- the build cache as a bundle, to carry to other machines --------------------------------------------------------


def machine(arch: tuple[int, int] | None = None) -> dict[str, object]:
    """What a bundle must match: this machine's compute capability (the preflight's GPU, or ``arch`` for a bundle
    built on a CPU) and code generators."""
    from .machinery import buildcache

    if arch is not None:  # the stand-in driver first: libmathdx's version, which every key holds, asks for one
        from .machinery import cpu_build

        cpu_build.enter(arch)
        return {"compute_capability": f"{arch[0]}.{arch[1]}", "environment": buildcache.generator_environment()}
    from .preflight import probe_gpus

    gpus, problem, _ = probe_gpus()
    if not gpus:
        raise SystemExit(f"prebuild: a bundle belongs to a GPU architecture, and this machine has no GPU: {problem}")
    cc = gpus[0].cc
    return {"compute_capability": f"{cc[0]}.{cc[1]}", "environment": buildcache.generator_environment()}


def bundle_command(
    export: str | None,
    into: str | None,
    max_part_mb: float | None,
    compare: bool,
    with_ltoir: bool = False,
    arch: tuple[int, int] | None = None,
    only_this_run: bool = False,
) -> int:
    """``--export``, ``--import`` and ``--compare``: one line each of what was done, sizes included."""
    from .machinery.buildcache import DiskCache, bundle, default_cache_dir

    root = default_cache_dir()
    if root is None:
        print("prebuild: the build cache is off (COURSE_BUILD_CACHE=off)", file=sys.stderr)
        return 2
    cache = DiskCache(root)
    mib = 2**20
    if compare:
        for what, size in bundle.compression_table(cache):
            print(f"{size / mib:9.1f} MiB  {what}")
    if export:
        facts = machine(arch)
        for kind, (count, size) in sorted(bundle.breakdown(cache).items()):
            print(f"prebuild: {count:5d} entries, {size / mib:8.1f} MiB: {kind}")
        manifest = {**facts, "date": time.strftime("%Y-%m-%d")}
        limit = int(max_part_mb * mib) if max_part_mb else None
        since = None
        if only_this_run:
            since, why = last_full_run(root)
            if since is None:
                print(f"prebuild: --only-this-run: {why}", file=sys.stderr)
                return 1
        try:
            done = bundle.export(cache, Path(export), manifest, limit, with_ltoir=with_ltoir, fresh_since=since)
        except bundle.BundleError as error:
            print(f"prebuild: {error}", file=sys.stderr)
            return 1
        print(f"prebuild: {done.summary()}")
    if into:
        started = time.perf_counter()
        try:
            written, present = bundle.import_(cache, Path(into), machine(arch))
        except bundle.BundleError as error:
            print(f"prebuild: not imported: {error}", file=sys.stderr)
            return 1
        print(
            f"prebuild: imported {written} entries ({present} were there) into {root} "
            f"in {time.perf_counter() - started:.1f} s"
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m utilities.prebuild",
        description=__doc__.splitlines()[0],
        epilog=kinds_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--jobs", default=COURSE_JOBS, help="comma-separated jobs, one process each (default: all)")
    parser.add_argument("--slices", type=int, default=7, help="slices of the Ozaki-I jobs (default 7)")
    parser.add_argument("--parallel", type=int, default=os.cpu_count() or 4, help="builds at a time (default: cores)")
    parser.add_argument("--list", action="store_true", help="print the jobs in the order they would start, and stop")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # worker mode
    parser.add_argument("--export", metavar="FILE", help="write the build cache as a bundle to FILE, and stop")
    parser.add_argument("--import", dest="into", metavar="FILE", help="import a bundle (FILE or FILE.part1), and stop")
    parser.add_argument("--max-part-mb", type=float, default=None, help="--export: parts of at most this size")
    parser.add_argument("--compare", action="store_true", help="print what other compressions make of the cache")
    parser.add_argument(
        "--keys",
        metavar="FILE",
        help="write each job's kernels, their keys and what each key was made of to FILE (JSON)",
    )
    parser.add_argument(
        "--arch",
        metavar="sm_90",
        help="build on this machine's CPU for that GPU architecture, without a GPU (kernels typed and linked, never "
        "launched: utilities.machinery.cpu_build); with --export, the architecture the bundle is for",
    )
    parser.add_argument(
        "--with-ltoir",
        action="store_true",
        help="--export: carry libmathdx's generated code too (ten times larger; a kernel the bundle lacks then only "
        "links); by default a bundle holds what a launch of its kernels reads",
    )
    parser.add_argument(
        "--only-this-run",
        action="store_true",
        help="--export: leave out the cubins the last prebuild of every job did not touch (kernels of code changed "
        "since: a cache that built many commits holds them)",
    )
    args = parser.parse_args(argv)
    from .machinery import cpu_build

    try:
        arch = cpu_build.target(args.arch) if args.arch else None
    except ValueError as error:
        parser.error(str(error))
    if args.only_this_run and not args.export:
        parser.error("--only-this-run goes with --export")
    if args.export or args.into or args.compare:
        return bundle_command(
            args.export, args.into, args.max_part_mb, args.compare, args.with_ltoir, arch, args.only_this_run
        )
    jobs = [job for job in args.jobs.split(",") if job]
    unknown = [job for job in jobs if job.partition(":")[0] not in BUILDERS]
    if unknown:
        parser.error(f"unknown job kind in {', '.join(unknown)}: kinds are {', '.join(BUILDERS)}")
    known = measured_seconds()
    jobs = order(jobs, known)
    if args.list:
        print("\n".join(jobs))
        return 0
    if args.one:
        (job,) = jobs
        build_one(job, args.slices)
        from .machinery import buildcache

        stats = buildcache.stats()
        print(KEYS_MARK + json.dumps(job_keys()), flush=True)
        print(STATS + (stats.summary() if stats else "build cache off"), flush=True)
        return 0
    why = _cannot_build_here(arch)
    if why:
        print(f"prebuild: cannot build the course's kernels on this machine.\n{why}", file=sys.stderr)
        return 2
    parallel = max(1, min(args.parallel, len(jobs)))
    print(f"prebuild: {len(jobs)} kernels, {parallel} at a time", flush=True)
    env = dict(os.environ)  # each build generates its code in worker processes of its own: share the cores
    given = env.get("COURSE_BUILD_JOBS")
    slots = _slots(codegen_workers.machine_slots())  # one a core, and per 3 GiB of memory
    if slots is not None:
        env[codegen_workers.SLOTS_ENV] = str(slots.folder)
    from .machinery.buildcache.store import default_cache_dir

    root, run = default_cache_dir(), {"started": time.time(), "jobs": jobs, "built": False}
    _record_run(root, run)
    try:
        code = _run_jobs(jobs, args, env, given, parallel, known, arch)
    finally:
        if slots is not None:
            shutil.rmtree(slots.folder, ignore_errors=True)
    _record_run(root, {**run, "built": code == 0})
    return code


def _run_jobs(
    jobs: list[str],
    args: argparse.Namespace,
    env: dict[str, str],
    given: str | None,
    parallel: int,
    known: dict[str, float],
    arch: tuple[int, int] | None,
) -> int:
    """The prebuild's jobs, ``parallel`` at a time, each in a process of its own; progress lines, then the table."""
    from .machinery import cpu_build

    if arch is not None:  # each job builds on the CPU (cpu_build): typed, generated, linked, never launched
        env[cpu_build.ENV] = f"{arch[0]}.{arch[1]}"
        print(f"prebuild: on the CPU, for sm_{arch[0]}{arch[1]} (no GPU needed; nothing is launched)", flush=True)
    start = time.perf_counter()
    running: dict[str, float] = {}

    notes: dict[str, str] = {}
    keys: dict[str, list[dict]] = {}

    def worker(job: str) -> tuple[str, float, bool]:
        began = time.perf_counter()
        running[job] = began
        cmd = [sys.executable, "-m", "utilities.prebuild", "--one", "--jobs", job, "--slices", str(args.slices)]
        workers = given or str(build_workers(codegen_workers.usable_cores()))
        done = subprocess.run(cmd, env={**env, "COURSE_BUILD_JOBS": workers}, capture_output=True, text=True)
        running.pop(job, None)
        if done.returncode:
            print(f"prebuild: {job} failed:\n{done.stderr[-3000:]}", file=sys.stderr, flush=True)
        notes[job], keys[job] = job_output(done.stdout)
        return job, time.perf_counter() - began, done.returncode == 0

    results: list[tuple[str, float, bool]] = []
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        futures = [pool.submit(worker, job) for job in jobs]
        for future in as_completed(futures):
            results.append(future.result())
            job, seconds, _ = results[-1]
            now = time.perf_counter()
            pending = [j for j in jobs if j not in running and j not in {r[0] for r in results}]
            finished = {j: t for j, t, ok in results if ok}
            left = (
                estimate_left(pending, dict(running), known, parallel, now, finished)
                if len(results) < len(jobs)
                else None
            )
            note = notes.get(job, "")
            print(progress_line(len(results), len(jobs), job, seconds, now - start, left, note), flush=True)
    _save_seconds({job: seconds for job, seconds, ok in results if ok})
    if args.keys:
        write_keys(Path(args.keys), keys)
        print(f"prebuild: each job's kernels and keys in {args.keys}", flush=True)
    failed = [job for job, _, ok in results if not ok]
    print(report_table(results))
    print(
        f"prebuild: {len(jobs) - len(failed)} of {len(jobs)} kernels built in {_clock(time.perf_counter() - start)}"
        + (f"; failed: {', '.join(failed)}" if failed else ""),
        flush=True,
    )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

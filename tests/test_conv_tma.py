"""The tensor-copy convolution (``utilities.conv.tensorcore_tma``) and its machinery (``utilities.machinery.tma``).

On a CPU: which box a row tile needs, and the shapes refused with their fix; every tap's A tile as the copy engine
writes it (a NumPy model of a tiled box with zero fill and the 64- or 128-byte swizzle, from the PTX ISA's
definitions) equal, bit for bit, to the tile the gathering kernel writes (its own index map and the swizzle
``machinery.swizzle`` measured); the intrinsics compiled to PTX and assembled for sm_90a where ptxas is installed.
On a GPU: the kernel against the course's checker, at tiles inside one image row and tiles of whole rows.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest

from utilities.conv import check, simt
from utilities.conv.reference import ConvShape
from utilities.machinery.tma import Box, box_of


def gathered_tile(x: np.ndarray, m0: int, tap: int, taps: int, c0: int, tile_m: int, tile_k: int) -> np.ndarray:
    """The A tile (FP16 places of shared memory) the pipelined kernel's gather writes for tap ``tap`` of the row tile
    at pixel ``m0``: its index map (``simt.pixel_coords``, ``tap_mask``, ``tap_offset``), 16-byte chunks placed by
    the measured swizzle (``chunk ^ ((chunk >> 3) & (chunks a row - 1))``)."""
    _, height, width, channels = x.shape
    flat = x.reshape(-1)
    cpr = tile_k // 8
    tile = np.zeros(tile_m * tile_k, np.float16)
    for row in range(tile_m):
        m = m0 + row
        if taps == 1:
            ok, src = 1, m
        else:
            h, w = simt.pixel_coords.py_func(m, height, width)
            ok = (simt.tap_mask.py_func(h, w, height, width) >> tap) & 1
            src = m + simt.tap_offset.py_func(tap, width) * ok
        for unit in range(cpr):
            chunk = row * cpr + unit
            dst = (chunk ^ ((chunk >> 3) & (cpr - 1))) * 8
            if ok:
                tile[dst : dst + 8] = flat[src * channels + c0 + unit * 8 : src * channels + c0 + unit * 8 + 8]
    return tile


def copied_tile(x: np.ndarray, coords: tuple[int, int, int, int], box: Box, swizzle_bytes: int) -> np.ndarray:
    """The box at ``coords`` (c, w, h, b) as a tiled tensor copy writes it: elements innermost first, zeros outside
    the tensor, then each 16-byte chunk's index (address bits 4 and up) XORed with the 128-byte row's index within
    its group of 8 (``swizzle_bytes`` 128: bits 7-9, three bits) or 4 (64: bits 7-8, two bits)."""
    batch, height, width, channels = x.shape
    c0, w0, h0, b = coords
    dense = np.zeros((box.rows, box.width, box.channels), np.float16)
    for hh in range(box.rows):
        for ww in range(box.width):
            h, w = h0 + hh, w0 + ww
            if 0 <= b < batch and 0 <= h < height and 0 <= w < width:
                dense[hh, ww] = x[b, h, w, c0 : c0 + box.channels]
    raw = dense.reshape(-1).view(np.uint8)
    out = np.zeros_like(raw)
    bits = {128: 7, 64: 3}[swizzle_bytes]
    offsets = np.arange(raw.size)
    out[offsets ^ (((offsets >> 7) & bits) << 4)] = raw
    return out.view(np.float16)


def test_a_tensor_copy_spec_names_its_kernel_and_parses_back():
    from utilities.conv.layout import PipeConfig, TmaConfig

    cfg = TmaConfig(depth=3, blocks=3)
    assert cfg.spec == "tma128x64x64-t128-d3-g1-s-b3" and TmaConfig.parse(cfg.spec) == cfg
    both = TmaConfig(filter_copies=True)
    assert both.spec == "tma128x64x64-t128-d2-g1-s-w" and TmaConfig.parse(both.spec) == both
    with pytest.raises(ValueError, match="streamed filters"):
        TmaConfig(resident=True, filter_copies=True)
    assert TmaConfig() != PipeConfig()  # two kernels: their records must not share a name
    with pytest.raises(ValueError, match="starts with 'tma'"):
        TmaConfig.parse("128x64x64-t128-d2-g1-s")
    with pytest.raises(ValueError, match="tile spec looks like"):
        PipeConfig.parse(cfg.spec)


def test_with_tensor_copies_fetches_the_filters_only_where_their_layout_was_measured():
    from utilities.conv.layout import FILTER_COPY_STAGES, PipeConfig, with_tensor_copies

    assert FILTER_COPY_STAGES == ((64, 64),)  # tools/smem_layout_probe.py --operand b measured 64 x 64 only
    cfg = PipeConfig(depth=3, blocks=3)
    assert with_tensor_copies(cfg).spec == "tma" + cfg.spec + "-w"  # every other field kept
    assert not with_tensor_copies(PipeConfig(tile_n=32)).filter_copies  # rows of 64 bytes: not measured
    assert not with_tensor_copies(PipeConfig(tile_k=32)).filter_copies
    assert not with_tensor_copies(PipeConfig(resident=True)).filter_copies  # no stream of filters to copy


def test_the_defaults_take_tensor_copies_where_this_gpu_has_them(monkeypatch):
    from utilities import prebuild
    from utilities.conv import defaults, layout
    from utilities.conv.reference import B2BShape
    from utilities.machinery import tma

    target, rows = ConvShape(8, 512, 512, 64, 64), ConvShape(2, 24, 24, 64, 64)
    b2b, wide = B2BShape(8, 512, 512, 64, 64, 64), B2BShape(8, 512, 512, 64, 256, 64)
    # here (no GPU): the gathering blocks, and a reason
    assert "no GPU" in defaults.copies_left_out(target)
    assert [c.spec for c in defaults.default_configs(target)] == ["128x64x64-t128-d2-g1-s"]
    assert defaults.default_b2b_config(b2b) == layout.b2b_config(64, 64)
    monkeypatch.setattr(tma, "unavailable", lambda: None)  # as on Hopper
    assert defaults.copies_left_out(target) is None
    specs = [c.spec for c in defaults.default_configs(target)]
    assert specs == ["tma128x64x64-t128-d2-g1-s-w", "128x64x64-t128-d2-g1-s"]  # the faster first: conv.fused's
    assert defaults.default_b2b_config(b2b).spec == prebuild.TMA_B2B_TILE == "tma128x64x64-t128-d2-g1-s-b3-w"
    assert defaults.default_b2b_config(wide).spec == prebuild.TMA_B2B_WIDE_TILE  # 256 wide: filters by cp.async
    # row tiles across image rows are no boxes: the gathers, and the fix named
    assert "gathering kernel" in defaults.copies_left_out(rows)
    assert [c.spec for c in defaults.default_configs(rows)] == ["128x64x64-t128-d2-g1-s"]
    # what the speed run and 2d time on Hopper is prebuilt (2d's in the course's jobs)
    assert f"conv_b2b:64x64x64@{prebuild.TMA_B2B_TILE}" in prebuild.CONV_JOBS.split(",")
    speed = set(prebuild.CONV_SPEED_JOBS.split(","))
    for kind in ("conv_b2b", "conv_b2b_keep"):
        assert f"{kind}:64x64x128@{prebuild.TMA_B2B_TILE}" in speed  # the checks' (check.TMA_B2B_SHAPE)
        assert f"{kind}:64x256x64@{prebuild.TMA_B2B_WIDE_TILE}" in speed
    assert "conv_tma:256x64" in speed  # the wide chain's unfused 3x3


def test_without_a_gpu_there_are_no_tensor_copies():
    from utilities.machinery import tma

    assert "no GPU to ask" in (tma.unavailable() or "")


def test_a_row_tile_is_one_box_or_refused_with_the_fix():
    assert box_of(512, 512, 128, 64) == Box(64, 128, 1)  # the target: four tiles an image row
    assert box_of(8, 32, 128, 64) == Box(64, 32, 4)  # four whole rows a tile
    assert box_of(4, 64, 64, 32).nbytes == 64 * 32 * 2
    with pytest.raises(ValueError, match="H a multiple of 128 / W"):
        box_of(6, 32, 128, 64)  # a tile of four rows would straddle two images
    with pytest.raises(ValueError, match="gathering kernel"):
        box_of(24, 24, 128, 64)  # the 2c check's shape: tiles start mid-row
    with pytest.raises(ValueError, match="tile_k 32 or 64"):
        box_of(8, 128, 128, 16)


# (shape, tile_m, tile_k, taps): tiles inside a row (two a row), tiles of whole rows, K stages of 32 channels
# (two a tap), a 1x1 convolution; every shape has its image's top, bottom, left and right edges in some tile
CASES = [
    (ConvShape(2, 3, 256, 64, 64), 128, 64, 9),
    (ConvShape(2, 8, 32, 64, 64), 128, 64, 9),
    (ConvShape(1, 4, 128, 64, 32), 128, 32, 9),
    (ConvShape(2, 4, 16, 64, 64), 64, 64, 9),
    (ConvShape(2, 2, 128, 64, 64), 128, 64, 1),
]


@pytest.mark.parametrize(("shape", "tile_m", "tile_k", "taps"), CASES)
def test_every_tensor_copy_writes_the_tile_the_gather_writes(shape, tile_m, tile_k, taps):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((shape.batch, shape.height, shape.width, shape.c_in)).astype(np.float16)
    box = box_of(shape.height, shape.width, tile_m, tile_k)
    stages = taps * shape.c_in // tile_k
    for m0 in range(0, shape.m, tile_m):
        for stage in range(stages):
            tap, c0 = simt.stage_tap.py_func(stage * tile_k, shape.c_in)
            w, h, b = simt.box_coords.py_func(m0, tap, taps, shape.height, shape.width)
            got = copied_tile(x, (c0, w, h, b), box, 2 * tile_k)
            want = gathered_tile(x, m0, tap, taps, c0, tile_m, tile_k)
            np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16), err_msg=f"{m0=} {tap=} {c0=}")


def test_the_model_tells_a_wrong_swizzle_or_a_wrong_corner():
    """The comparison above fails where the copy is wrong: the 64-byte swizzle for rows of 128 bytes, no swizzle,
    or the box one pixel off (a tap's column or row offset lost)."""
    x = np.random.default_rng(3).standard_normal((1, 3, 128, 64)).astype(np.float16)
    box = box_of(3, 128, 128, 64)
    want = gathered_tile(x, 0, 4, 9, 0, 128, 64)  # the middle tap: no padding read
    w, h, b = simt.box_coords.py_func(0, 4, 9, 3, 128)
    assert np.array_equal(copied_tile(x, (0, w, h, b), box, 128), want)
    assert not np.array_equal(copied_tile(x, (0, w, h, b), box, 64), want)
    assert not np.array_equal(copied_tile(x, (0, w + 1, h, b), box, 128), want)
    assert not np.array_equal(copied_tile(x, (0, w, h - 1, b), box, 128), want)
    plain = np.zeros((128, 64), np.float16)
    plain[:] = x[0, 1, :, :]
    assert not np.array_equal(plain.reshape(-1), want)


INTRINSICS_KERNEL = """
import os, sys
os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
from types import SimpleNamespace
import numba.cuda.dispatcher
import numpy as np
from numba import cuda, types
numba.cuda.dispatcher.get_current_device = lambda: SimpleNamespace(compute_capability=(9, 0))
from utilities.machinery import tma

BAR = 16384  # FP16 index: after two slots of 8192


@cuda.jit
def ring(tmap, out, n):
    smem = cuda.shared.array(shape=(0,), dtype=np.float16, alignment=1024)
    tid = cuda.threadIdx.x
    if tid == 0:
        tma.acquire_map(tmap, 0)
        tma.acquire_map(tmap, 128)
        tma.barrier_init(smem, BAR, 1)
        tma.barrier_init(smem, BAR + 4, 1)
        tma.fence_barrier_init()
    cuda.syncthreads()
    total = 0.0
    for p in range(n):
        slot = p % 2
        if tid == 0:
            tma.fence_async_shared()
            tma.expect_bytes(smem, BAR + 4 * slot, 16384)
            tma.load_4d(smem, slot * 8192, tmap, 0, p - 1, 1, 0, BAR + 4 * slot)
            tma.load_2d(smem, 16384 + 8 + slot * 4096, tmap, 128, 0, 64 * p, BAR + 4 * slot)
        tma.wait_parity(smem, BAR + 4 * slot, (p // 2) & 1)
        total += float(smem[slot * 8192 + tid])
        cuda.syncthreads()
    out[tid] = total


ptx, _ = cuda.compile_ptx(ring.py_func, (types.uint8[::1], types.float64[::1], types.int32), cc=(9, 0))
open(sys.argv[1] + "/ring.ptx", "w").write(ptx)
print("ok")
"""


def test_the_intrinsics_compile_to_tensor_copies_and_transaction_barriers(tmp_path, ptx_written):
    ptx = ptx_written(INTRINSICS_KERNEL)["ring.ptx"]
    for instruction in (
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
        "mbarrier.init.shared::cta.b64",
        "mbarrier.arrive.expect_tx.shared::cta.b64",
        "mbarrier.try_wait.parity.shared::cta.b64",
        "fence.proxy.tensormap::generic.acquire.gpu",
        "fence.mbarrier_init.release.cluster",
        "fence.proxy.async.shared::cta",
    ):
        assert instruction in ptx, instruction
    ptxas = shutil.which("ptxas")
    if ptxas:  # every wait's loop label is local to its braces: two waits in one function assemble
        out = subprocess.run(
            [ptxas, "-arch=sm_90a", str(tmp_path / "ring.ptx"), "-o", str(tmp_path / "k.o")],
            capture_output=True,
            text=True,
        )
        assert out.returncode == 0 or re.search(r"Unsupported \.version", out.stderr), out.stderr


# ------------------------------------------------------------------------------------------------------------
# On a GPU
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("shape", check.TMA_SHAPES, ids=lambda s: s.label)
@pytest.mark.parametrize("blocks", [None, 2])
@pytest.mark.parametrize("filters", [False, True], ids=["filters-cp-async", "filters-by-copies"])
def test_the_tensor_copy_kernel_passes_the_checker(gpu, shape, blocks, filters):
    import cupy as cp

    from utilities.conv.layout import TmaConfig
    from utilities.conv.tensorcore_persistent import TmaConv

    plan = TmaConv(shape, cfg=None if filters else TmaConfig(), blocks=blocks)  # the default fetches the filters too
    assert plan.cfg.filter_copies == filters

    def run(x, w, bias):
        out = cp.full((shape.batch, shape.height, shape.width, shape.c_out), np.nan, cp.float16)
        plan(cp.asarray(x), cp.asarray(w), cp.asarray(bias), out=out)
        return cp.asnumpy(out)

    verdict = check.check_conv(run, shape=shape, seed=11)
    assert verdict, verdict.why


@pytest.mark.gpu
def test_the_unfused_tensor_copy_kernel_stores_the_convolution_alone(gpu):
    import cupy as cp

    from utilities.conv import reference as ref
    from utilities.conv.tensorcore_persistent import TmaConv

    shape = check.TMA_SHAPES[1]  # tiles of whole rows: every box hangs over the left and right edges
    x = ref.conv_inputs(shape, "random", 3)
    got = cp.asnumpy(TmaConv(shape, fused=False)(*(cp.asarray(v) for v in x.args()))).reshape(shape.m, -1)
    r = ref.conv_ref(*x.args())
    assert np.all(np.abs(got.astype(np.float64) - r.conv) <= r.bound_conv)
    assert (got < 0).any(), "no ReLU: the convolution alone has negative entries"


@pytest.mark.gpu
@pytest.mark.parametrize("blocks", [None, 2])
@pytest.mark.parametrize("filters", [False, True], ids=["filters-cp-async", "filters-by-copies"])
def test_the_back_to_back_kernel_with_tensor_copies_passes_the_checker(gpu, blocks, filters):
    import cupy as cp

    from utilities.conv.layout import TmaConfig, b2b_config, with_tensor_copies
    from utilities.conv.tensorcore_persistent import ConvB2B

    shape = check.TMA_B2B_SHAPE
    base = b2b_config(shape.c_mid, shape.c_out)
    plain = TmaConfig(**{f: getattr(base, f) for f in base.__dataclass_fields__})
    cfg = with_tensor_copies(base) if filters else plain
    assert cfg.filter_copies == filters
    plan = ConvB2B(shape, cfg=cfg, keep_d0=True, blocks=blocks)

    def run(x, w0, w1, bias1):
        return cp.asnumpy(plan(*(cp.asarray(v) for v in (x, w0, w1, bias1))))

    verdict = check.check_conv_b2b(run, stages=plan.stages, shape=shape, seed=13)
    assert verdict, verdict.why


@pytest.mark.gpu
def test_the_tensor_copy_plan_refuses_a_tile_across_rows(gpu):
    from utilities.conv.check import CONV_SHAPE
    from utilities.conv.tensorcore_persistent import TmaConv

    with pytest.raises(ValueError, match="gathering kernel"):
        TmaConv(CONV_SHAPE)

"""The halo kernel's address arithmetic and plan on a CPU (``utilities.conv.halo``, ``simt.halo_copy``): every
16-byte copy of a row tile's halo, replayed in NumPy from the device function the kernel calls, fills a halo whose
nine windows are the implicit GEMM's A tiles exactly, at both ends of an image row, of the image and of the batch,
and between two row tiles of one image row. The kernel itself runs only on a GPU (``tests/test_conv_gpu.py``)."""

from __future__ import annotations

import numpy as np
import pytest

from utilities.conv import halo, simt
from utilities.conv import reference as ref


def fill_halo(x: np.ndarray, cfg: halo.HaloConfig, m0: int, c0: int) -> tuple[np.ndarray, np.ndarray]:
    """The halo of the row tile starting at output pixel m0, channels c0 ... c0 + TK, as the kernel's copies write
    it (a NaN where no copy writes), and how often each FP16 value was written."""
    b, height, width, c_in = x.shape
    flat = x.reshape(-1)
    h0, w0 = simt.pixel_coords.py_func(m0, height, width)
    smem = np.full(cfg.halo_size, np.nan, np.float16)
    writes = np.zeros(cfg.halo_size, np.int64)
    for k in range(cfg.copies):
        dst, src, ok, unit = simt.halo_copy.py_func(
            k, m0, h0, w0, height, width, cfg.tile_k // 8, cfg.halo_width, cfg.ld
        )
        start = src * c_in + c0 + unit * 8
        assert 0 <= start and start + 8 <= flat.size, "every copy's address lies inside x, read or not"
        assert dst % 8 == 0 and 0 <= dst and dst + 8 <= cfg.halo_size
        smem[dst : dst + 8] = flat[start : start + 8] if ok else 0
        writes[dst : dst + 8] += 1
    return smem, writes


def window(smem: np.ndarray, cfg: halo.HaloConfig, tap: int) -> np.ndarray:
    """Tap ``tap``'s A tile as the kernel's GEMM reads it: TM rows of TK values, ``ld`` apart, from halo row r,
    pixel s."""
    r, s = divmod(tap, 3)
    at = (r * cfg.halo_width + s) * cfg.ld
    rows = [smem[at + i * cfg.ld : at + i * cfg.ld + cfg.tile_k] for i in range(cfg.tile_m)]
    return np.stack(rows)


@pytest.mark.parametrize(
    ("shape", "spec"),
    [
        (ref.ConvShape(3, 3, 128, 64, 8), "h128x64x64-t256"),  # every tile: both ends of an image row
        (ref.ConvShape(2, 4, 128, 64, 8), "h64x64x64-t256"),  # two tiles a row: the halo reaches into the other
        (ref.ConvShape(2, 3, 64, 64, 8), "h64x64x32-t128"),  # two halos a tile (TK = 32)
        (ref.ConvShape(2, 1, 128, 32, 8), "h128x64x32-t128"),  # one-row images: both image edges in every halo
    ],
    ids=lambda v: v if isinstance(v, str) else v.label,
)
def test_each_taps_window_of_the_halo_is_the_implicit_gemms_a_tile(shape, spec):
    cfg = halo.HaloConfig.parse(spec)
    x = ref.conv_inputs(shape, "random", 5).x
    a = ref.im2col_rows(x)  # (B H W) x (9 C_in), column tap C_in + c
    for tile in range(shape.m // cfg.tile_m):
        m0 = tile * cfg.tile_m
        for c0 in range(0, shape.c_in, cfg.tile_k):
            smem, writes = fill_halo(x, cfg, m0, c0)
            assert set(np.unique(writes)) <= {0, 1}, "no value is written twice"
            for tap in range(halo.TAPS):
                k0 = tap * shape.c_in + c0
                want = a[m0 : m0 + cfg.tile_m, k0 : k0 + cfg.tile_k]
                np.testing.assert_array_equal(window(smem, cfg, tap).astype(np.float64), want, err_msg=f"tap {tap}")


def test_the_windows_read_only_what_the_copies_wrote():
    """The 8 values of padding after each pixel are never read, and everything read was written."""
    cfg = halo.HaloConfig()
    x = ref.conv_inputs(ref.ConvShape(1, 3, 128, 64, 8), "random", 1).x
    _, writes = fill_halo(x, cfg, 128, 0)
    read = np.zeros(cfg.halo_size, bool)
    for tap in range(halo.TAPS):
        r, s = divmod(tap, 3)
        for i in range(cfg.tile_m):
            at = (r * cfg.halo_width + s + i) * cfg.ld
            read[at : at + cfg.tile_k] = True
    assert writes[read].min() == 1
    assert not read[writes == 0].any()


def test_eight_window_rows_start_in_eight_bank_groups():
    """What the padding buys: ``ldmatrix`` reads eight rows of 16 bytes at once; their starts (``ld`` FP16 values
    apart, in the halo and in a filter stage) fall in the eight 16-byte groups of the 128-byte bank line, so no two
    conflict."""
    for tile_k in (32, 64):
        for tile_n in range(16, 129, 16):
            cfg = halo.HaloConfig(tile_k=tile_k, tile_n=tile_n)
            for ld in (cfg.ld, cfg.ld_b):
                groups = {(i * ld * 2 // 16) % 8 for i in range(8)}
                assert groups == set(range(8)), (tile_k, tile_n, ld)


def test_spec_round_trip_and_errors():
    for spec in ("h128x64x64-t256", "h64x32x32-t128"):
        assert halo.HaloConfig.parse(spec).spec == spec
    with pytest.raises(ValueError, match="looks like h128x64x64-t256"):
        halo.HaloConfig.parse("128x64x64-t128-d3-g1-s")
    with pytest.raises(ValueError, match="tile_k must be 32 or 64"):
        halo.HaloConfig(tile_k=16)
    with pytest.raises(ValueError, match="tile_m must be 64 or 128"):
        halo.HaloConfig(tile_m=256)


def plan(shape: ref.ConvShape, cfg: halo.HaloConfig) -> halo.HaloLayout:
    tm, tn, tk = cfg.tile
    return halo.halo_layout(cfg, halo.chunks(shape.c_in, cfg), (tk - 1) * cfg.ld_b + tn, 2 * tm * tn)


def test_the_target_fits_one_block_an_sm_and_its_buffers_do_not_overlap():
    cfg = halo.HaloConfig()
    shape = ref.ConvShape(8, 512, 512, 64, 64)
    lay = plan(shape, cfg)
    spans = [(lay.halo, cfg.halo_size), (lay.halo + lay.halo_step, cfg.halo_size)]
    spans += [(lay.b + s * lay.b_step, 63 * 72 + 64) for s in range(9)]
    assert lay.c_in_halo and 2 * 128 * 64 <= cfg.halo_size, "the FP32 output tile in a halo buffer"
    spans.sort()
    for (a, n), (b, _) in zip(spans, spans[1:], strict=False):
        assert a + n <= b, "buffers overlap"
    assert all(a % 512 == 0 for a, _ in spans), "every buffer on a 1 KiB boundary"
    assert spans[-1][0] + spans[-1][1] <= lay.end
    halo.halo_constraints(shape, cfg, lay)  # fits
    assert 190 * 1024 < lay.nbytes <= 200 * 1024, lay.nbytes


def test_an_output_tile_wider_than_a_halo_gets_a_buffer_of_its_own():
    cfg = halo.HaloConfig(tile_k=32)  # a halo of 32 channels: 31,200 bytes; the FP32 tile 32,768
    lay = plan(ref.ConvShape(1, 4, 128, 64, 64), cfg)
    assert not lay.c_in_halo and lay.c >= lay.b + 17 * lay.b_step and lay.c % 512 == 0
    assert lay.end >= lay.c + 2 * 128 * 64


def test_shapes_it_cannot_take_are_refused_with_the_fix():
    cfg = halo.HaloConfig()
    with pytest.raises(ValueError, match="width = 100 is not a multiple of the row tile's 128 pixels.*PipelinedConv"):
        shape = ref.ConvShape(1, 4, 100, 64, 64)
        halo.halo_constraints(shape, cfg, plan(shape, cfg))
    with pytest.raises(ValueError, match="C_in = 48 is not a multiple"):
        halo.chunks(48, cfg)
    with pytest.raises(ValueError, match="C_out = 96 must be a multiple"):
        shape = ref.ConvShape(1, 4, 128, 64, 96)
        halo.halo_constraints(shape, cfg, plan(shape, cfg))
    wide = halo.HaloConfig(tile_n=128)
    with pytest.raises(ValueError, match="KiB of shared memory.*narrower tile_n"):
        shape = ref.ConvShape(1, 4, 128, 128, 128)
        halo.halo_constraints(shape, wide, plan(shape, wide))


def test_the_prebuild_builds_the_kernel_of_every_halo_check():
    """The GPU tests and the speed run's checks find their halo kernels built (a kernel is picked by the tile, the
    threads and C_in / TK: C_out beyond the tile's columns picks nothing), and each fits its shared memory."""
    from utilities import prebuild
    from utilities.conv.halo import HALO_CHECKS

    jobs = set(prebuild.CONV_JOBS.split(","))
    for shape, fields in HALO_CHECKS:
        cfg = halo.HaloConfig(**(fields or {}))
        default = halo.HaloConfig(tile_n=cfg.tile_n)  # the plan's block for C_out = tile_n
        job = f"conv_halo:{cfg.tile_n}x{shape.c_in}" + (f"@{cfg.spec}" if cfg != default else "")
        assert job in jobs, job
        halo.halo_constraints(shape, cfg, plan(shape, cfg))
    assert {"conv_halo_unfused:64x64"} <= jobs
    speed = set(prebuild.CONV_SPEED_JOBS.split(","))
    assert {"conv_halo_gather:64x64", "conv_halo_mma:64x64"} <= speed


def b2b_plan(shape: ref.B2BShape, cfg: halo.HaloConfig) -> tuple[halo.HaloB2BLayout, int]:
    """The back-to-back plan with the padded layouts' sizes (as libmathdx reports them), and D0's size."""
    tm, c_mid, c_out = cfg.tile_m, shape.c_mid, shape.c_out
    sb = (cfg.tile_k - 1) * cfg.ld_b + c_mid
    sw = (c_mid - 1) * (c_out + halo.PAD) + c_out
    sd = (tm - 1) * (c_mid + halo.PAD) + c_mid
    return halo.halo_b2b_layout(cfg, halo.chunks(shape.c_in, cfg), sb, sw, sd, 2 * tm * c_out), sd


def test_the_back_to_back_plan_puts_d0_and_d1_in_the_halo_buffer_a_tile_last_read():
    shape = ref.B2BShape(8, 512, 512, 64, 64, 64)
    cfg = halo.HaloConfig(tile_n=64)
    lay, sd = b2b_plan(shape, cfg)
    assert lay.c_in_halo and lay.c >= sd and lay.c % 512 == 0 and lay.c + 2 * 128 * 64 <= cfg.halo_size
    assert lay.w1 >= lay.b + 8 * lay.b_step + 63 * 72 + 64 and lay.end >= lay.w1 + 63 * 72 + 64
    halo.halo_b2b_constraints(shape, cfg, lay, sd)
    assert lay.nbytes == 200 * 1024


def test_a_back_to_back_output_wider_than_the_halo_gets_its_own_buffer():
    shape, fields = halo.HALO_B2B_CHECKS[1]
    cfg = halo.HaloConfig(tile_n=shape.c_mid, **fields)
    lay, sd = b2b_plan(shape, cfg)
    assert not lay.c_in_halo and lay.c >= lay.w1 and lay.end >= lay.c + 2 * 64 * 128
    halo.halo_b2b_constraints(shape, cfg, lay, sd)


def test_back_to_back_chains_it_cannot_hold_are_refused_with_the_fix():
    shape = ref.B2BShape(1, 4, 128, 64, 64, 64)
    lay, sd = b2b_plan(shape, halo.HaloConfig(tile_n=64))
    with pytest.raises(ValueError, match="must be C_mid = 64"):
        halo.halo_b2b_constraints(shape, halo.HaloConfig(tile_n=32), lay, sd)
    wide = ref.B2BShape(1, 4, 128, 64, 64, 256)
    lay, sd = b2b_plan(wide, halo.HaloConfig())
    with pytest.raises(ValueError, match="C_out = 256 must be 32, 64 or 128: use ConvB2B"):
        halo.halo_b2b_constraints(wide, halo.HaloConfig(), lay, sd)
    deep = ref.B2BShape(1, 4, 128, 128, 64, 64)  # 18 resident filter stages beside two halos
    lay, sd = b2b_plan(deep, halo.HaloConfig())
    with pytest.raises(ValueError, match="KiB of shared memory"):
        halo.halo_b2b_constraints(deep, halo.HaloConfig(), lay, sd)


def test_tiles_whose_rows_do_not_spread_over_the_threads_are_refused_before_a_build():
    """48 channels are 6 units: 256 threads do not split into whole rows of them (the epilogue would skip some);
    96 output channels of a chain likewise; 16 channels over 256 threads at 64 rows leave no row for some."""
    assert halo.spreads(128, 64, 256) and halo.spreads(64, 128, 256) and halo.spreads(128, 32, 128)
    assert not halo.spreads(128, 48, 256) and not halo.spreads(64, 16, 256) and not halo.spreads(128, 96, 256)
    narrow = halo.HaloConfig(tile_n=48)
    shape = ref.ConvShape(1, 4, 128, 64, 48)
    with pytest.raises(ValueError, match="does not spread over 256 threads"):
        halo.halo_constraints(shape, narrow, plan(shape, narrow))
    chain = ref.B2BShape(1, 4, 128, 64, 64, 96)
    lay, sd = b2b_plan(chain, halo.HaloConfig())
    with pytest.raises(ValueError, match="C_out = 96 must be 32, 64 or 128"):
        halo.halo_b2b_constraints(chain, halo.HaloConfig(), lay, sd)
    mid = ref.B2BShape(1, 4, 128, 64, 48, 64)  # D0's 48 channels: its copies for the checker would skip rows
    cfg = halo.HaloConfig(tile_n=48)
    lay, sd = b2b_plan(mid, cfg)
    with pytest.raises(ValueError, match="does not spread"):
        halo.halo_b2b_constraints(mid, cfg, lay, sd)


def test_the_prebuild_builds_the_kernels_of_every_back_to_back_check():
    from utilities import prebuild

    jobs = set(prebuild.HALO_JOBS.split(","))
    for shape, fields in halo.HALO_B2B_CHECKS:
        cfg = halo.HaloConfig(tile_n=shape.c_mid, **(fields or {}))
        dims = f"{shape.c_in}x{shape.c_mid}x{shape.c_out}" + (f"@{cfg.spec}" if fields else "")
        assert {f"conv_halo_b2b:{dims}", f"conv_halo_b2b_keep:{dims}"} <= jobs, dims
        b2b_plan(shape, cfg)
    assert set(prebuild.HALO_JOBS.split(",")) <= set(prebuild.CONV_JOBS.split(","))


@pytest.mark.parametrize(("tile", "threads"), [((128, 64), 256), ((64, 128), 256), ((128, 32), 128)])
@pytest.mark.parametrize("fused", [True, False])
def test_the_epilogue_adds_each_channels_bias_and_rounds_once(tile, threads, fused):
    """The halo kernels' epilogue in numba's simulator: every value of the FP32 tile, plus its channel's bias and
    ReLU (fused), rounded once to FP16 into its row and channel of the output, past ``col0``; nothing else written."""
    from numba import cuda

    tm, tn = tile
    epilogue = simt.make_epilogue(tm, tn, threads, fused)

    @cuda.jit
    def kernel(staged, bias, out, row0, col0):
        epilogue(staged, 0, bias, out, row0, col0)

    rng = np.random.default_rng(tm + tn)
    staged = (rng.standard_normal(tm * tn) * 40).astype(np.float32)  # some past FP16's 65504 after the bias
    staged[:3] = [65519.0, -0.0, 1e-8]  # a round-to-nearest edge, a signed zero, an FP16 underflow
    bias = rng.standard_normal(2 * tn).astype(np.float16)
    out = np.full((3 * tm, 3 * tn), np.nan, np.float16)
    kernel[1, threads](staged, bias, out, tm, tn)
    acc = staged.reshape(tm, tn)
    want = np.maximum(acc + bias[tn:].astype(np.float32), 0) if fused else acc
    np.testing.assert_array_equal(out[tm : 2 * tm, tn : 2 * tn], want.astype(np.float16))
    out[tm : 2 * tm, tn : 2 * tn] = np.nan
    assert np.isnan(out).all(), "nothing written outside the tile"

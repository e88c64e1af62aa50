"""The pipelined implicit GEMM's CPU side: configurations and their shared-memory plans, the gather's addressing
(every thread's 16-byte copies of a stage fill the swizzled A tile with the implicit GEMM's rows, zeros in the
padding), and the asynchronous copy compiled to PTX (assembled by ptxas where it is installed)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from utilities.conv import layout, simt
from utilities.conv import reference as ref


def test_spec_round_trip_and_errors():
    for cfg in layout.speed_configs():
        assert layout.PipeConfig.parse(cfg.spec) == cfg
    with pytest.raises(ValueError, match="looks like"):
        layout.PipeConfig.parse("128x64")
    with pytest.raises(ValueError, match="tile_k must be one of"):
        layout.PipeConfig(tile_k=128)
    with pytest.raises(ValueError, match="depth must be 2 to 8"):
        layout.PipeConfig(depth=1)
    with pytest.raises(ValueError, match="does not divide the 9 K stages"):
        layout.check_group(layout.PipeConfig(group=2), 9)
    with pytest.raises(ValueError, match="not a multiple of the K stage"):
        layout.stages(9, 48, 32)


def test_layouts_do_not_overlap_and_fit_at_the_target():
    extra = [
        layout.PipeConfig.parse(t)
        for t in ("64x64x64-t128-d4-g1-s", "128x64x32-t128-d4-g2-r", "256x64x64-t256-d3-g1-r", "128x64x32-t128-d3-g1-s")
    ]
    for cfg in layout.speed_configs() + extra:
        n = layout.stages(9, 64, cfg.tile_k)
        layout.check_group(cfg, n)
        sa, sb, sc = cfg.tile_m * cfg.tile_k, cfg.tile_k * cfg.tile_n, cfg.tile_m * cfg.tile_n
        L = layout.pipe_layout(cfg, n, sa, sb, sc)
        slots, b_slots = cfg.depth * cfg.group, n if cfg.resident else cfg.depth * cfg.group
        spans = [(L.a + i * L.a_step, sa) for i in range(slots)] + [(L.b + i * L.b_step, sb) for i in range(b_slots)]
        if L.c_in_ring:  # the output tile fits the A slots of any one phase, which are contiguous
            for phase in range(cfg.depth):
                first = L.a + phase * cfg.group * L.a_step
                assert first + sc <= L.a + (phase + 1) * cfg.group * L.a_step and first + sc <= L.b
        else:
            spans.append((L.c, sc))
        spans.sort()
        assert all(a + size <= b for (a, size), (b, _) in zip(spans, spans[1:], strict=False))
        assert all(start % 512 == 0 for start, _ in spans) and spans[-1][0] + spans[-1][1] <= L.end
        layout.check_fits(L, cfg)
    big = layout.PipeConfig(tile_m=256, threads=256, depth=5, resident=True)
    with pytest.raises(ValueError, match="stream the filters"):
        layout.check_fits(layout.pipe_layout(big, 9, 256 * 64, 64 * 64, 256 * 64), big)


def test_the_speed_settings_differ_in_blocks_per_sm():
    """The settings the speed run measures, the default first: four, four, three and two blocks an SM by their
    shared memory; the launch bounds then leave each thread at least the register floor (128 at 128 threads and four
    blocks), so each runs what its shared memory allows, except the second, which asks for three."""
    got, asked = [], []
    for cfg in layout.speed_configs():
        L = layout.pipe_layout(cfg, 9, cfg.tile_m * 64, 64 * 64, cfg.tile_m * 64)
        assert L.c_in_ring, "one convolution stages its output in the ring: 16 KiB less a block"
        got.append(layout.blocks_per_sm(L.nbytes))
        asked.append(layout.min_blocks(cfg, L.nbytes))
        floor = layout.REGISTERS_PER_SM // (cfg.threads * asked[-1]) >= layout.REGISTER_FLOOR
        assert asked[-1] <= got[-1] and (floor or cfg.blocks)
    assert got == [4, 4, 3, 2] and asked == [4, 3, 3, 2] and layout.speed_configs()[0] == layout.PipeConfig()
    assert layout.min_blocks(layout.PipeConfig(), 48 * 1024) == 4
    assert layout.min_blocks(layout.PipeConfig(threads=256, tile_m=256), 48 * 1024) == 2  # the floor caps them


def test_a_spec_can_ask_for_blocks_an_sm():
    """``-bN`` sets the launch bounds' blocks an SM, capped by what the shared memory allows; without it the spec
    and the rule are as before."""
    four = layout.PipeConfig.parse("128x64x64-t128-d2-g1-s-b4")
    assert four.blocks == 4 and four.spec == "128x64x64-t128-d2-g1-s-b4"
    assert layout.PipeConfig.parse(four.spec) == four and layout.PipeConfig().spec == "128x64x64-t128-d2-g1-s"
    assert layout.min_blocks(four, 48 * 1024) == 4 and layout.min_blocks(four, 72 * 1024) == 3
    assert layout.min_blocks(layout.PipeConfig.parse("128x64x64-t128-d2-g1-s-b3"), 48 * 1024) == 3
    assert layout.min_blocks(layout.PipeConfig.parse("64x256x32-t256-d2-g1-s-b1"), 104 * 1024) == 1
    with pytest.raises(ValueError, match="blocks must be 1 to 8"):
        layout.PipeConfig(blocks=9)
    with pytest.raises(ValueError, match="-bN"):
        layout.PipeConfig.parse("128x64x64-t128-d2-g1-s-b")


@pytest.mark.parametrize(
    "spec, kib, blocks, in_ring",
    [
        ("128x64x64-t128-d3-g1-s", 80, 2, True),
        ("128x64x64-t128-d2-g1-s", 56, 4, True),
        ("128x64x32-t128-d4-g1-s", 72, 3, False),
        ("64x256x32-t256-d2-g1-s", 104, 2, False),
    ],
)
def test_the_back_to_back_plan_stages_d0_and_its_output_in_the_ring_where_they_fit(
    spec: str, kib: int, blocks: int, in_ring: bool
):
    """D0 (GEMM 1's A) and then the output tile go into the A slots of the phase the K loop read last where one
    phase's A slots hold them (a 64-channel K stage: 16 KiB, as D0's tile), else into one buffer of their own; W1
    always has its own. With a ring of two, 56 KiB: four blocks an SM."""
    cfg = layout.PipeConfig.parse(spec)
    n = layout.stages(9, 64, cfg.tile_k)
    c_mid = 256 if cfg.tile_n == 256 else 64
    tm = cfg.tile_m
    sa, sb, sc, sd, sw = tm * cfg.tile_k, cfg.tile_k * cfg.tile_n, tm * 64, tm * c_mid, c_mid * 64
    L = layout.pipe_layout(cfg, n, sa, sb, sc, sd, sw)
    assert L.c_in_ring == in_ring and L.c == L.d0
    if in_ring:
        assert L.d0 == -1 and L.w1 >= L.b + cfg.depth * L.b_step
        for phase in range(cfg.depth):  # any phase's A slots, contiguous, hold both tiles
            first = L.a + phase * cfg.group * L.a_step
            assert first + max(sc, sd) <= min(L.a + (phase + 1) * cfg.group * L.a_step, L.b)
    else:
        assert L.d0 >= L.b + cfg.depth * L.b_step and L.w1 >= L.d0 + max(sc, sd)
    assert L.w1 + sw <= L.end and L.nbytes == kib * 1024 and layout.blocks_per_sm(L.nbytes) == blocks
    assert layout.min_blocks(cfg, L.nbytes) == blocks


def swizzled(tile_k: int):
    mask = tile_k // 8 - 1
    return lambda chunk: chunk ^ ((chunk >> 3) & mask)  # utilities.machinery.swizzle's measured layout


def gather_stage(x: np.ndarray, cfg: layout.PipeConfig, row0: int, k0: int) -> tuple[np.ndarray, np.ndarray]:
    """What every thread's copies put into one A stage (the kernel's ``issue``, through the same device
    functions, in the same order: rows and masks once per tile, tap once per stage, then a bit test per copy),
    read back through the swizzle as a TM x TK tile; and how often each 16-byte chunk was written."""
    b, height, width, c_in = x.shape
    flat = x.reshape(-1)
    cpr, rpp, sw = cfg.chunks_per_row, cfg.threads // cfg.chunks_per_row, swizzled(cfg.tile_k)
    smem = np.full(cfg.tile_m * cfg.tile_k, np.nan, np.float16)
    writes = np.zeros(cfg.tile_m * cpr, int)
    tap, c0 = simt.stage_tap.py_func(k0, c_in)
    shift = simt.tap_offset.py_func(tap, width)
    for tid in range(cfg.threads):
        for i in range(cfg.loads_per_thread):
            row, unit = simt.chunk_row.py_func(tid, i, cpr, rpp)
            m = row0 + row
            inside = simt.tap_mask.py_func(*simt.pixel_coords.py_func(m, height, width), height, width)
            ok = (inside >> tap) & 1
            src, nbytes = m + shift * ok, 16 * ok  # the copy: nbytes of 16 read, the rest zeros
            dst = sw(row * cpr + unit) * 8
            start = src * c_in + c0 + unit * 8
            assert 0 <= start and start + 8 <= flat.size, "every copy's address lies inside x, read or not"
            smem[dst : dst + 8] = flat[start : start + 8] if nbytes == 16 else 0
            writes[sw(row * cpr + unit)] += 1
    tile = np.empty((cfg.tile_m, cfg.tile_k), np.float16)
    for row in range(cfg.tile_m):
        for col in range(cfg.tile_k):
            tile[row, col] = smem[sw(row * cpr + col // 8) * 8 + col % 8]
    return tile, writes


@pytest.mark.parametrize(
    "spec", ["128x64x64-t128-d3-g1-r", "64x64x64-t128-d4-g1-s", "256x64x64-t256-d3-g1-r", "128x64x32-t128-d4-g2-r"]
)
def test_every_thread_s_copies_fill_the_stage_with_the_implicit_gemm_rows(spec):
    cfg = layout.PipeConfig.parse(spec)
    shape = ref.ConvShape(3, 9, 14, 64, 8)  # a 126-pixel image: every row tile straddles two images
    x = ref.conv_inputs(shape, "random", 3).x
    a = ref.im2col_rows(x)
    tiles = [0, shape.m // cfg.tile_m - 1]
    for row0 in (t * cfg.tile_m for t in tiles):
        for k0 in range(0, shape.k, cfg.tile_k):
            tile, writes = gather_stage(x, cfg, row0, k0)
            assert (writes == 1).all(), "each 16-byte chunk of the stage is written once"
            np.testing.assert_array_equal(tile.astype(np.float64), a[row0 : row0 + cfg.tile_m, k0 : k0 + cfg.tile_k])


def test_tap_masks_and_offsets_are_the_index_map():
    for b, height, width in ((2, 5, 7), (1, 1, 1), (3, 4, 1), (1, 3, 3), (1, 1, 6)):
        for m in range(b * height * width):
            inside = simt.tap_mask.py_func(*simt.pixel_coords.py_func(m, height, width), height, width)
            for tap in range(9):
                got = m + simt.tap_offset.py_func(tap, width) if (inside >> tap) & 1 else -1
                assert got == ref.neighbor(m, *divmod(tap, 3), height, width), (b, height, width, m, tap)


def test_a_stage_starts_at_its_tap_and_channel():
    for c_in, tile_k in ((64, 64), (64, 32), (128, 32), (32, 32)):
        for k0 in range(0, 9 * c_in, tile_k):
            assert simt.stage_tap.py_func(k0, c_in) == divmod(k0, c_in)


GATHER_KERNEL = """
import os, sys
os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
from types import SimpleNamespace
import numba.cuda.dispatcher
import numpy as np
from numba import cuda, int32, int64, types
numba.cuda.dispatcher.get_current_device = lambda: SimpleNamespace(compute_capability=(9, 0))
from utilities.conv.simt import chunk_row, pixel_coords, stage_tap, tap_mask, tap_offset
from utilities.machinery import cp_async, swizzle
SW = swizzle.a_tile(64)
WAIT = cp_async.wait_prior(1)

def gather_kernel(x, out, height, width):
    # the kernel's issue() without cuBLASDx: one stage of a 128 x 64 tile, 128 threads, copies and groups
    smem = cuda.shared.array(8192, dtype=np.float16, alignment=1024)
    tid = int32(cuda.threadIdx.x)
    c_in = int32(x.shape[0] // (out.shape[0] // 64))
    tap, c0 = stage_tap(int32(64 * 4), c_in)
    shift = int32(tap_offset(int32(tap), width))
    for i in range(8):
        row, unit = chunk_row(tid, i, 8, 16)
        m = int32(cuda.blockIdx.x * 128 + row)
        h, w = pixel_coords(m, height, width)
        ok = int32((tap_mask(int32(h), int32(w), height, width) >> tap) & 1)
        dst = int32(SW(int32(row * 8 + unit)) * 8)
        cp_async.copy16(smem, dst, x, int64(int32(m + shift * ok)) * c_in + int32(c0 + unit * 8), ok * 16)
    cp_async.commit()
    cp_async.commit()
    WAIT()
    cuda.syncthreads()
    out[tid] = smem[tid]

for cc in ((8, 0), (9, 0)):
    ptx, _ = cuda.compile_ptx(gather_kernel, (types.float16[::1], types.float16[::1], types.int32, types.int32), cc=cc)
    open(sys.argv[1] + f"/gather_sm{cc[0]}{cc[1]}.ptx", "w").write(ptx)
print("ok")
"""


def test_the_gather_compiles_to_cp_async_and_assembles(tmp_path, ptx_written):
    for name, ptx in ptx_written(GATHER_KERNEL).items():
        # one cp.async per copy (8, unrolled, or 1 in a loop), its size in a register: no branch to a zero fill
        assert ptx.count("cp.async.ca.shared.global") in (1, 8) and "16, %r" in ptx
        assert ptx.count("cp.async.commit_group;") == 2 and "cp.async.wait_group 1;" in ptx
        ptxas = shutil.which("ptxas")
        if ptxas:  # the PTX ISA version numba writes may be newer than this ptxas knows: the instructions are not
            text = re.sub(r"^\.version \d+\.\d+", ".version 8.0", ptx, flags=re.M)
            (tmp_path / "lowered.ptx").write_text(text)
            arch = "sm_" + Path(name).stem.split("_sm")[1]
            out = subprocess.run(
                [ptxas, f"-arch={arch}", str(tmp_path / "lowered.ptx"), "-o", str(tmp_path / "k.o")],
                capture_output=True,
                text=True,
            )
            assert out.returncode == 0, out.stderr


def test_the_prebuild_builds_every_kernel_the_speed_run_builds():
    from utilities import prebuild

    assert prebuild.CONV_SPEED_TILES == tuple(c.spec for c in layout.speed_configs())
    jobs = prebuild.CONV_SPEED_JOBS.split(",")
    for cfg in layout.speed_configs():
        assert f"conv_pipe:64x64@{cfg.spec}" in jobs and f"conv_pipe_unfused:64x64@{cfg.spec}" in jobs
    default = layout.speed_configs()[0].spec
    assert f"conv_pipe_gather:64x64@{default}" in jobs and f"conv_pipe_mma:64x64@{default}" in jobs
    for job in jobs + prebuild.CONV_JOBS.split(","):
        assert job.split(":")[0] in prebuild.BUILDERS


def test_time_split_says_how_much_the_parts_overlap():
    from utilities.conv import model

    tile = layout.speed_configs()[0].spec
    times = {f"conv.fused@{tile}": 1.0, f"conv.gather_only@{tile}": 0.7, f"conv.mma_only@{tile}": 0.5, "conv.x": 9.0}
    split = model.time_split(times)
    assert split["tile"] == tile and abs(split["overlap"] - 0.2) < 1e-12 and abs(split["hidden"] - 0.4) < 1e-12
    serial = model.time_split({**times, f"conv.fused@{tile}": 1.2})
    assert abs(serial["overlap"]) < 1e-12 and "0% of the shorter part" in model.format_time_split(serial)
    assert model.time_split({f"conv.fused@{tile}": 1.0, f"conv.gather_only@{tile}": 0.7}) is None
    assert model.time_split({"conv.fused": 1.0}) is None


def test_the_back_to_back_block_holds_a_256_wide_d0_in_64_values_a_thread():
    """The target's block is the 3x3 kernel's asking for three blocks an SM (the speed run's second setting); a D0
    of 256 channels takes 64 rows
    over 256 threads: 64 FP32 accumulators a thread for D0, as the target's 128 x 64 over 128 threads, and a
    plan of 104 KiB (cuBLASDx's tiles as dense as their element counts; D0's buffer takes the output tile too), two
    blocks an SM by shared memory."""
    from utilities import prebuild

    three = layout.PipeConfig(tile_n=64, blocks=layout.B2B_BLOCKS)
    assert layout.b2b_config(64, 64) == three == layout.speed_configs()[1] and layout.B2B_BLOCKS == 3
    assert layout.one_by_one_config(layout.PipeConfig(), 256, 64).spec == "128x64x64-t128-d3-g1-s"
    assert layout.b2b_config(64, 128) == three
    assert layout.b2b_config(128, 128) == layout.PipeConfig(tile_n=128, blocks=3)
    wide = layout.b2b_config(256, 64)
    assert wide.spec == "64x256x32-t256-d2-g1-s"
    assert layout.b2b_accumulators(wide, 256) == 64 == layout.b2b_accumulators(layout.PipeConfig(), 64)
    n_stages = layout.stages(9, 64, wide.tile_k)
    L = layout.pipe_layout(wide, n_stages, 64 * 32, 32 * 256, 64 * 64, 64 * 256, 256 * 64)
    assert L.nbytes == 104 * 1024 and layout.blocks_per_sm(L.nbytes) == 2
    layout.check_fits(L, wide)
    shape = ref.B2BShape(8, 512, 512, 64, 256, 64)
    layout.b2b_constraints(shape, wide)
    with pytest.raises(ValueError, match=r"256 FP32 accumulators a thread of 128.*64x256x32-t256-d2-g1-s"):
        layout.b2b_constraints(shape, layout.PipeConfig(tile_n=256))
    with pytest.raises(ValueError, match="multiple of 32 up to 256"):
        layout.b2b_constraints(ref.B2BShape(8, 512, 512, 64, 288, 64), wide)
    with pytest.raises(ValueError, match="not a multiple of the row tile 64"):
        layout.b2b_constraints(ref.B2BShape(1, 5, 5, 64, 256, 64), wide)
    assert prebuild.kernel_of("conv_b2b:64x256x64") == f"conv_b2b:64x256x64@{wide.spec}"
    assert prebuild.kernel_of("conv_b2b:64x64x64") == "conv_b2b:64x64x64@128x64x64-t128-d2-g1-s-b3"
    jobs = prebuild.CONV_SPEED_JOBS.split(",")
    assert {"conv_b2b:64x256x64", "conv_b2b_keep:64x256x64", "conv_1x1:64x256"} <= set(jobs)


def test_every_speed_setting_has_a_check_shape_its_blocks_divide():
    """``correctness`` checks each setting before it is timed: at check.CONV_SHAPE, or at the 256-pixel blocks'
    own shape, with several row tiles and a tile that starts mid-row."""
    from utilities.conv import check

    for cfg in layout.speed_configs():
        shape = check.CONV_SHAPE if check.CONV_SHAPE.m % cfg.tile_m == 0 else check.CONV_SHAPE_256
        assert shape.m % cfg.tile_m == 0 and shape.m // cfg.tile_m >= 4 and cfg.tile_m % shape.width
        assert shape.c_out % min(cfg.tile_n, shape.c_out) == 0

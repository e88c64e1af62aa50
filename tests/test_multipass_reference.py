"""The multi-pass track on the CPU: references, the FP32 bound, the checker against emulated kernels, the config."""

from __future__ import annotations

import numpy as np
import pytest

from utilities import checker
from utilities import multipass as mp
from utilities.checker import PLACEHOLDER, CheckFailure
from utilities.multipass import check


def emulate(
    a: np.ndarray,
    bt: np.ndarray,
    phase_k: int,
    *,
    skip: int | None = None,
    wrong_buffer: bool = False,
    no_swap: bool = False,
    shift: int = 0,
) -> np.ndarray:
    """The kernel's phase loop in NumPy (two buffers, prefetch of phase g + 1), with optional mistakes."""
    k = a.shape[1]
    phases = k // phase_k
    wide = np.int64 if a.dtype == np.int8 else np.float32

    def load(k0: int) -> tuple[np.ndarray, np.ndarray]:
        pa, pb = np.zeros((a.shape[0], phase_k), a.dtype), np.zeros((bt.shape[0], phase_k), bt.dtype)
        width = max(0, min(phase_k, k - k0))
        pa[:, :width], pb[:, :width] = a[:, k0 : k0 + width], bt[:, k0 : k0 + width]
        return pa, pb

    buffers = [load(0), None]
    cur = 0
    acc = np.zeros((a.shape[0], bt.shape[0]), wide)
    for g in range(phases):
        if g + 1 < phases:
            buffers[1 - cur] = load((g + 1) * phase_k + shift)
        if g != skip:
            pa, pb = buffers[1 - cur] if wrong_buffer and buffers[1 - cur] is not None else buffers[cur]
            acc += pa.astype(wide) @ pb.astype(wide).T
        if not no_swap:
            cur = 1 - cur
    return acc.astype(np.int32 if a.dtype == np.int8 else np.float32)


# --- references and inputs ------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", mp.CASES)
def test_int8_reference_is_exact_on_every_case(case):
    a, bt = mp.operands(case, 16, 12, 256, "int8", 3)
    assert a.dtype == bt.dtype == np.int8 and a.flags.c_contiguous and bt.flags.c_contiguous
    want = sum(a[:, j].astype(np.int64)[:, None] * bt[:, j].astype(np.int64)[None, :] for j in range(256))
    np.testing.assert_array_equal(mp.reference(a, bt), want)
    assert mp.reference(a, bt).dtype == np.int32


def test_int8_extremes_reach_the_extreme_sums():
    k = 1024
    c = mp.reference(*mp.operands("all -128", 4, 4, k, "int8", 0))
    assert (c == k * 128 * 128).all()
    c = mp.reference(*mp.operands("all 127", 4, 4, k, "int8", 0))
    assert (c == k * 127 * 127).all()
    c = mp.reference(*mp.operands("mixed extremes", 4, 4, k, "int8", 0))
    assert c[0, 0] == k * 2**14 and c[0, 1] == -k * 128 * 127


def test_reference_rejects_overflow_and_mixed_dtypes():
    a = np.full((2, 2**17 + 64), -128, np.int8)
    with pytest.raises(OverflowError):
        mp.reference(a, a)
    with pytest.raises(TypeError):
        mp.reference(np.zeros((2, 4), np.int8), np.zeros((2, 4), np.float16))
    with pytest.raises(ValueError, match="B\\^T"):
        mp.reference(np.zeros((2, 4), np.int8), np.zeros((4, 2), np.int8))


def test_phase_products_add_up_to_the_reference():
    a, bt = mp.operands("random", 8, 8, 512, "int8", 5)
    parts = mp.phase_products(a, bt, 64)
    assert parts.shape == (8, 8, 8)
    np.testing.assert_array_equal(parts.sum(axis=0), mp.reference(a, bt))


# --- the FP32 bound -------------------------------------------------------------------------------------------


def _fp32_sum(a: np.ndarray, bt: np.ndarray, order: np.ndarray) -> np.ndarray:
    acc = np.zeros((a.shape[0], bt.shape[0]), np.float32)
    for j in order:
        acc += a[:, j].astype(np.float32)[:, None] * bt[:, j].astype(np.float32)[None, :]
    return acc


@pytest.mark.parametrize("case", mp.CASES)
def test_fp32_bound_holds_for_fp32_accumulation_in_any_order(case):
    k = 512
    a, bt = mp.operands(case, 8, 6, k, "float16", 11)
    want, bound = mp.reference(a, bt), mp.fp32_bound(a, bt)
    rng = np.random.default_rng(0)
    for order in (np.arange(k), np.arange(k)[::-1], rng.permutation(k)):
        err = np.abs(_fp32_sum(a, bt, order).astype(np.float64) - want)
        assert (err <= bound).all()
    phased = emulate(a, bt, 64).astype(np.float64)
    assert (np.abs(phased - want) <= bound).all()


def test_fp32_bound_is_not_vacuous():
    a, bt = mp.operands("random", 16, 16, 1024, "float16", 2)
    bound = mp.fp32_bound(a, bt)
    scale = np.abs(a.astype(np.float64)) @ np.abs(bt.astype(np.float64)).T
    assert (bound < 1e-3 * scale).all()  # about 1.2e-4 |A||B| at k = 1024
    missing = emulate(a, bt, 128, skip=3).astype(np.float64)
    assert (np.abs(missing - mp.reference(a, bt)) > bound).any()
    with pytest.raises(ValueError):
        mp.gamma(2**25)


# --- the checker ----------------------------------------------------------------------------------------------

SHAPES = ((64, 32, 512),)


@pytest.mark.parametrize("dtype", mp.DTYPES)
def test_checker_passes_a_correct_phase_loop(dtype, capsys):
    phase_k = 4 * mp.PASS_K[dtype]
    result = check.check_pass_gemm(lambda a, bt: emulate(a, bt, phase_k), dtype, phase_k=phase_k, shapes=SHAPES, seed=7)
    assert result.status == "passed" and result.cases == (4 if dtype == "int8" else 5)  # FP16: a NaN and an Inf too
    assert "seed 7" in capsys.readouterr().out


def test_checker_prints_a_fresh_seed(capsys):
    check.check_pass_gemm(lambda a, bt: emulate(a, bt, 64), "int8", shapes=((32, 32, 128),), cases=["random"])
    assert "seed" in capsys.readouterr().out


def test_untouched_skeleton_is_not_implemented(capsys, define):
    skeleton = define(f"def make_multipass_kernel(MM):\n    pass  {PLACEHOLDER}\n", "make_multipass_kernel")
    result = check.check_pass_gemm(
        lambda a, bt: np.zeros((a.shape[0], bt.shape[0]), np.int32), "int8", shapes=SHAPES, exercise=skeleton
    )
    assert result.status == "not implemented" and not result
    assert "not implemented yet" in capsys.readouterr().out


BROKEN = {
    "skips the last phase": ({"skip": 7}, "the last phase is missing"),
    "skips phase 3": ({"skip": 3}, "phase 3 of 8 is missing"),
    "executes the prefetched buffer": ({"wrong_buffer": True}, "executed the buffer being prefetched"),
    "never swaps": ({"no_swap": True}, "only phase 0"),
    "prefetch offset one pass late": ({"shift": 32}, "the offset of the prefetch"),
}


@pytest.mark.parametrize("dtype", mp.DTYPES)
@pytest.mark.parametrize("mistake", list(BROKEN))
def test_checker_names_the_stage_and_the_phase_of_a_broken_loop(dtype, mistake):
    kwargs, hint = BROKEN[mistake]
    phase_k = 64 if dtype == "int8" else 64  # 8 phases of k = 512 for both dtypes
    with pytest.raises(checker.CheckFailure) as info:
        check.check_pass_gemm(
            lambda a, bt: emulate(a, bt, phase_k, **kwargs), dtype, phase_k=phase_k, shapes=SHAPES, seed=1
        )
    assert info.value.stage == "C"
    message = str(info.value)
    assert "stage 'C'" in message and "at (row " in message and "expected" in message and hint in message


def emulate_unguarded(a, bt, phase_k, *, offset=None, prefetches=None):
    """The kernel's loop as a GPU runs it: no guard on the loads (K past the end reads the next row, row-major with
    leading dimension k, and past the array's end garbage), FP16 products summed in FP32; ``offset(g)`` is the K the
    prefetch at iteration g starts at, ``prefetches(g, phases)`` whether it prefetches."""
    k, phases = a.shape[1], a.shape[1] // phase_k
    offset = offset or (lambda g: (g + 1) * phase_k)
    prefetches = prefetches or (lambda g, count: g + 1 < count)
    wide = np.int64 if a.dtype == np.int8 else np.float32

    def load(x, k0):
        flat = np.concatenate([x.ravel(), np.full(4 * phase_k, 77, x.dtype)])  # 77: what lies past the array
        at = np.arange(x.shape[0])[:, None] * k + k0 + np.arange(phase_k)[None, :]
        return flat[at].astype(wide)

    buffers, cur = [(load(a, 0), load(bt, 0)), None], 0
    acc = np.zeros((a.shape[0], bt.shape[0]), wide)
    for g in range(phases):
        if prefetches(g, phases):
            buffers[1 - cur] = (load(a, offset(g)), load(bt, offset(g)))
        pa, pb = buffers[cur]
        acc += pa @ pb.T
        cur = 1 - cur
    return acc.astype(np.int32 if a.dtype == np.int8 else np.float32)


def _contract_blocks():
    for dtype, fields in check.CONFIGS.items():
        cfg = mp.PassConfig(dtype, **fields)
        yield dtype, cfg.phase_k, (cfg.tile_m, cfg.tile_n)


@pytest.mark.parametrize("dtype, phase_k, tile", list(_contract_blocks()))
def test_a_count_of_16_phases_written_into_the_loop_fails_at_each_block(dtype, phase_k, tile):
    shapes = check.pass_gemm_shapes(phase_k, tile)
    assert max(k // phase_k for _, _, k in shapes) > 16
    right = lambda a, bt: emulate_unguarded(a, bt, phase_k)  # noqa: E731
    assert check.check_pass_gemm(right, dtype, phase_k=phase_k, tile=tile).status == "passed"
    with pytest.raises(CheckFailure) as info:
        check.check_pass_gemm(
            lambda a, bt: emulate_unguarded(a, bt, phase_k, prefetches=lambda g, count: g + 1 < 16),
            dtype, phase_k=phase_k, tile=tile, seed=3,
        )  # fmt: skip
    assert info.value.stage == "C" and f"{check.MANY_PHASES} phases" in str(info.value)


@pytest.mark.parametrize("dtype, phase_k, tile", list(_contract_blocks()))
@pytest.mark.parametrize("mistake", ["phase g again", "half a phase too far"])
def test_a_prefetch_offset_is_named_as_a_gpu_without_a_guard_computes_it(dtype, phase_k, tile, mistake):
    """tools/mistakes/multipass.py's offsets, at the notebook's shapes: past K the kernel reads the next row (and past
    the array's end whatever lies there), not zeros; at two phases, phase g again is also phase 0 counted twice."""
    late = phase_k // 2
    offset = {"phase g again": lambda g: g * phase_k, "half a phase too far": lambda g: (g + 1) * phase_k + late}
    with pytest.raises(CheckFailure) as info:
        check.check_pass_gemm(
            lambda a, bt: emulate_unguarded(a, bt, phase_k, offset=offset[mistake]),
            dtype, phase_k=phase_k, tile=tile, seed=4,
        )  # fmt: skip
    assert info.value.stage == "C" and "offset of the prefetch" in str(info.value)


def test_a_prefetch_offset_is_named_only_when_its_recomputation_matches():
    a, bt = check.gemm_operands("random", 128, 128, 128, "int8", 5)
    parts = check.phase_products(a, bt, 64)
    late = emulate_unguarded(a, bt, 64, offset=lambda g: (g + 1) * 64 + 32).astype(np.int64)
    assert "offset of the prefetch" in check._diagnose(late, parts, None, (a, bt, 64, 32))
    late[3, 5] += 1  # one entry the offset does not explain
    assert "offset of the prefetch" not in check._diagnose(late, parts, None, (a, bt, 64, 32))


def test_checker_reports_an_unfinished_exercise():
    def make_kernel():
        return None  # placeholder: your code replaces this line

    result = check.check_pass_gemm(
        lambda a, bt: emulate(a, bt, 64, skip=0), "int8", shapes=SHAPES, exercise=make_kernel, seed=0
    )
    assert result.status == "not implemented"


def test_checker_rejects_a_wrong_dtype():
    with pytest.raises(checker.CheckFailure, match="dtype"):
        check.check_pass_gemm(lambda a, bt: emulate(a, bt, 64).astype(np.int64), "int8", shapes=SHAPES, seed=0)


# --- configuration and validation -----------------------------------------------------------------------------


def test_config_properties():
    cfg = mp.PassConfig("int8", fused=8)
    assert (cfg.pass_k, cfg.phase_k, cfg.tile_k, cfg.full_fusion) == (32, 256, 256, True)
    assert cfg.smem_bytes == 128 * 1024
    half = mp.PassConfig("float16", fused=2)
    assert (half.pass_k, half.phase_k, half.smem_bytes) == (16, 32, 2 * 256 * 32 * 2)
    assert "full fusion" in cfg.describe() and "full fusion" not in half.describe()
    assert mp.PassConfig("int8", passes=16, fused=8).tile_k == 512


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"dtype": "float32"}, "dtype must be one of"),
        ({"fused": 3}, "must divide N"),
        ({"passes": 6}, "passes"),
        ({"passes": 16, "fused": 16}, "shared memory"),
        ({"tile_m": 96}, "multiples of 64"),
    ],
)
def test_config_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        mp.PassConfig(**kwargs)


@pytest.mark.parametrize(
    ("shape", "match"),
    [
        ((200, 256, 1024), "multiples of the 128 x 128 tile: pad"),
        ((256, 256, 1000), "multiple of the phase depth .* pad"),
        ((256, 256, 256), "single phase"),
        ((256, 0, 1024), "positive integer"),
        ((128, 128, 2**17 + 256), "overflow int32"),
    ],
)
def test_problem_validation_names_the_fix(shape, match):
    with pytest.raises(ValueError, match=match):
        mp.validate_problem(*shape, mp.PassConfig("int8", fused=8))


def test_validation_counts_phases():
    assert mp.validate_problem(256, 256, 1024, mp.PassConfig("int8", fused=1)) == 32
    assert mp.validate_problem(256, 256, 1024, mp.PassConfig("float16", fused=8)) == 8
    assert mp.phase_offsets(256, 64) == [0, 64, 128, 192]


# --- the model ------------------------------------------------------------------------------------------------


def test_occupancy_limits():
    assert mp.occupancy(128 * 1024, 90, 256) == (1, "shared memory")
    assert mp.occupancy(16 * 1024, 128, 256) == (2, "registers")
    assert mp.occupancy(16 * 1024, 32, 256)[0] == 8


def test_model_prefers_fusion_until_a_ceiling():
    preds = mp.predictions("int8", (1, 2, 4, 8))
    rates = [p.tops for p in preds]
    assert rates == sorted(rates) and rates[0] < rates[-1]
    assert [p.barriers_per_tile for p in preds] == [256, 128, 64, 32]
    assert preds[-1].blocks_per_sm == 1 and preds[-1].limiter == "shared memory"
    assert all(0 < p.fraction_of_peak <= 1 for p in preds)


def test_fragment_registers_grow_with_fusion():
    regs = [mp.fragment_registers(mp.PassConfig("int8", fused=f)) for f in (1, 2, 4, 8)]
    assert regs == [regs[0] * f for f in (1, 2, 4, 8)] and regs[0] > 0


def test_checker_default_shapes_swap_tile_counts_and_vary_the_phases():
    shapes = check.pass_gemm_shapes(64)
    assert [(m // 128, n // 128, k // 64) for m, n, k in shapes] == [(3, 2, 2), (2, 3, 3), (1, 1, 17)]


@pytest.mark.parametrize("dtype", mp.DTYPES)
def test_a_swapped_grid_fails(dtype):
    """Blocks that take blockIdx.x for the column tile write a 2 x 3 region of a 3 x 2 output (and past it)."""

    def swapped(a, bt):
        out = emulate(a, bt, 64)
        m, n = out.shape
        written = np.zeros_like(out, dtype=bool)
        written[: min(m, 128 * (n // 128)), : min(n, 128 * (m // 128))] = True
        return np.where(written, out, 0 if dtype == "int8" else np.nan).astype(out.dtype)

    with pytest.raises(checker.CheckFailure):
        check.check_pass_gemm(swapped, dtype, phase_k=64, seed=3)


def test_a_skipped_phase_loses_the_nan_and_the_inf():
    """FP16: the NaN sits in A's last phase, the Inf in B's first: skipping either phase shows."""
    for skip in (0, 7):
        with pytest.raises(checker.CheckFailure):
            check.check_pass_gemm(
                lambda a, bt, skip=skip: emulate(a, bt, 64, skip=skip),
                "float16",
                phase_k=64,
                shapes=((64, 32, 512),),
                cases=[check.NONFINITE],
                seed=4,
            )
    assert check.check_pass_gemm(
        lambda a, bt: emulate(a, bt, 64),
        "float16",
        phase_k=64,
        shapes=((64, 32, 512),),
        cases=[check.NONFINITE],
        seed=4,
    )


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_a_store_before_c_fails_with_its_place(seed):
    """A phase loop whose first block stores its tile one row early writes before C: the guard band names it."""
    from utilities.guard import Canvas

    phase_k = 4 * mp.PASS_K["int8"]

    def run(a, bt):
        c = Canvas((a.shape[0], bt.shape[0]), np.int32, fill=0)
        c.out[...] = emulate(a, bt, phase_k)
        c.buffer[c.guard - bt.shape[0] : c.guard] = 0  # row -1
        return c.written()

    with pytest.raises(CheckFailure) as info:
        check.check_pass_gemm(run, "int8", phase_k=phase_k, shapes=SHAPES, seed=seed)
    assert info.value.stage == "C" and "32 entries before the output of shape (64, 32), at (-1, 31)" in str(info.value)

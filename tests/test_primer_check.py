"""Notebook 0's exercise: its inputs make the product exact, and its checker names what went wrong.

The kernel itself needs nvmath.device (a GPU); here the checker meets host stand-ins that make each mistake an
attendee can make in the five lines: no store, no execute, execute twice, a race that leaves stale tiles,
operands in the wrong order.
"""

from __future__ import annotations

import numpy as np
import pytest

from utilities.checker import PLACEHOLDER, CheckFailure
from utilities.primer import check
from utilities.primer.figures import inventory, memory_picture
from utilities.primer.reference import CASES, LIMIT, WIDE, operands, product

SHAPE, TILE = (256, 384, 64), (128, 128)


@pytest.mark.parametrize("case", CASES)
def test_inputs_make_the_product_exact(case):
    a, b = operands(case, *SHAPE, seed=3)
    top = WIDE if case == "beyond FP16's integers" else LIMIT
    assert a.dtype == b.dtype == np.float16 and np.abs(a).max() <= top and np.abs(b).max() <= top
    exact = a.astype(np.int64) @ b.astype(np.int64)  # integers: the true product
    assert np.array_equal(product(a, b), exact.astype(np.float32)) and np.array_equal(product(a, b), exact)


def test_the_by_tile_case_tells_tiles_apart():
    """Each row of A (column of B) holds one value with a period no tile divides: tiles of C differ."""
    a, b = operands("by tile", *SHAPE, seed=0)
    c = product(a, b)
    tm, tn = TILE
    assert not np.array_equal(c[:tm, :tn], c[tm:, :tn]) and not np.array_equal(c[:tm, :tn], c[:tm, tn : 2 * tn])


def test_a_product_too_large_for_fp32_integers_is_refused():
    with pytest.raises(ValueError, match="exactly"):
        product(np.full((1, 2**12), 64.0), np.full((2**12, 1), 64.0))


def correct(a, b):
    return product(a, b)


def no_store(a, b):
    return np.full((a.shape[0], b.shape[1]), np.nan, np.float32)


def no_execute(a, b):
    return np.zeros((a.shape[0], b.shape[1]), np.float32)


def twice(a, b):
    return 2 * product(a, b)


def stale_tile(a, b):
    c = product(a, b)
    c[128:256, 128:256] = 0  # one block read its tiles before the copies landed
    return c


def one_tile_unwritten(a, b):
    c = product(a, b)
    c[:128, 256:] = np.nan
    return c


def stored_as_fp16(a, b):
    """C rounded to FP16 before its store (issue 41: the small integers FP16 holds let it pass)."""
    return product(a, b).astype(np.float16).astype(np.float32)


def swapped_operands(a, b):
    return (b.astype(np.float64).T @ a.astype(np.float64).T).T.astype(np.float32) + 1


def test_the_solution_passes(capsys):
    assert check.check_tile_gemm(correct, shape=SHAPE, tile=TILE).status == "passed"
    assert "✓ tile GEMM: passed on 4 inputs" in capsys.readouterr().out


@pytest.mark.parametrize(
    "run, stage, words",
    [
        (no_execute, "execute", "nothing reached the accumulator"),
        (twice, "execute", "C is 2 times A @ B"),
        (stale_tile, "C", "the tiles (block row, block column) [(1, 1)] are wrong and the others right"),
        (one_tile_unwritten, "store", "[(0, 2)] of C were not written"),
        (stored_as_fp16, "store", "C was rounded to FP16 before its store"),
        (swapped_operands, "C", "stage 'C'"),
    ],
)
def test_each_mistake_is_named_with_its_stage(run, stage, words):
    with pytest.raises(CheckFailure) as info:
        check.check_tile_gemm(run, shape=SHAPE, tile=TILE)
    assert info.value.stage == stage and words in str(info.value), str(info.value)
    assert "at (row" in str(info.value)  # the first wrong entries, with their indices
    if run is swapped_operands:  # no test names its cause: the entries alone
        assert "hint:" not in str(info.value)


def test_an_untouched_exercise_is_not_implemented_and_a_filled_one_without_a_store_is_wrong(define, capsys):
    skeleton = define(f"def make_tile_gemm_kernel(MM):\n    pass  {PLACEHOLDER}\n", "make_tile_gemm_kernel")
    assert check.check_tile_gemm(no_store, shape=SHAPE, tile=TILE, exercise=skeleton).status == "not implemented"
    assert "not implemented yet" in capsys.readouterr().out
    filled = define("def make_tile_gemm_kernel(MM):\n    return MM\n", "make_tile_gemm_kernel")
    with pytest.raises(CheckFailure) as info:
        check.check_tile_gemm(no_store, shape=SHAPE, tile=TILE, exercise=filled)
    assert info.value.stage == "result" and "partition_and_copy" in str(info.value)


def test_the_picture_renders_and_labels_what_a_block_holds(tmp_path):
    path = tmp_path / "memory.png"
    fig = memory_picture((128, 128, 64), 128, depth=2, path=path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    texts = "\n".join(t.get_text() for t in fig.axes[0].texts)
    assert "A tile 128 x 64: 16 KiB" in texts and "128 values a thread (128 threads)" in texts
    assert "sa, sb: 32 KiB a block" in texts and "2 stages: 64 KiB a block" in texts
    assert fig._repr_png_()[:8] == b"\x89PNG\r\n\x1a\n"  # shows as an image in Jupyter


def test_inventory_counts_bytes_from_the_tile():
    labels = inventory((64, 32, 16), 64, in_bytes=1, acc_bytes=4, depth=3)
    assert labels["a_tile"] == "A tile 64 x 16: 1 KiB" and labels["b_tile"] == "B tile 16 x 32: 512 B"
    assert labels["stages"] == "3 stages: 4.5 KiB a block" and labels["fragment"].startswith("acc: 32 values")


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_a_store_outside_c_fails_with_its_place(seed):
    """A kernel whose last block stores one row too far writes past C: held in a guard band, the check names it,
    though every entry of C is right (issue 35: before, only the block order could show such a store)."""
    from utilities.guard import Canvas

    def run(a, b):
        c = Canvas((SHAPE[0], SHAPE[1]), np.float32, fill=np.nan)
        c.out[...] = product(a, b)
        c.buffer[c.guard + c.size : c.guard + c.size + SHAPE[1]] = 0.0  # row m: one row past the last
        return c.written()

    with pytest.raises(CheckFailure) as info:
        check.check_tile_gemm(run, shape=SHAPE, tile=TILE, seed=seed)
    assert info.value.stage == "C" and "384 entries after the output of shape (256, 384), at (256, 0)" in str(
        info.value
    )

"""Guard bands (``utilities.guard``) and the checker core's reading of them (``utilities.checker.output``): an output
lives in the middle of a poisoned canvas, and a write outside it fails the stage with its place, on the host as on a
device (CuPy is any module with ``empty``; NumPy stands in here)."""

from __future__ import annotations

import numpy as np
import pytest

from utilities import checker, guard
from utilities.checker import CheckFailure


def test_a_clean_canvas_gives_its_values_and_no_breach():
    canvas = guard.Canvas((3, 5), np.float64, fill=np.nan)
    assert canvas.out.flags.c_contiguous and canvas.out.shape == (3, 5)
    assert (canvas.guard * 8) % guard.ALIGN == 0, "the output stays as aligned as a fresh allocation"
    canvas.out[...] = np.arange(15.0).reshape(3, 5)
    written = canvas.written()
    assert written.outside() == "" and np.array_equal(np.asarray(written), np.arange(15.0).reshape(3, 5))
    assert np.array_equal(checker.output(written, "C"), np.arange(15.0).reshape(3, 5))


def test_a_write_one_column_past_the_last_row_is_named_as_such():
    canvas = guard.Canvas((3, 5), np.float32, fill=0)
    flat = canvas.buffer
    flat[canvas.guard + 15] = 1.0  # what out[2, 5] writes through a raw pointer: past the end
    with pytest.raises(CheckFailure) as info:
        checker.output(canvas.written(), "C", "random")
    text = str(info.value)
    assert info.value.stage == "C" and "on input 'random'" in text
    assert "1 entries after the output of shape (3, 5), at (3, 0), i.e. (2, 5): past the last column" in text
    assert "if row < m and col < n" in text


def test_writes_before_the_output_and_a_whole_row_after_it_are_placed():
    canvas = guard.Canvas((4, 8), np.int32, fill=0)
    g = canvas.guard
    canvas.buffer[g - 3 : g] = 7  # the last three entries of row -1
    canvas.buffer[g + 32 + 8 : g + 32 + 16] = 7  # row 5, a row past the first one after the output
    written = canvas.written()
    before, after = written.breaches
    assert before.side == "before" and before.offsets == (-1, -2, -3)
    assert before.place(-1) == "(-1, 7)"
    assert after.side == "after" and len(after.offsets) == 8 and after.place(after.offsets[0]) == "(5, 0)"
    assert "and 5 more" in written.outside()


def test_the_band_covers_two_rows_of_a_wide_output_and_every_dtype():
    assert guard.guard_entries((2, 10_000), 2) >= 20_000
    for dtype in (np.uint8, np.int8, np.int32, np.float16, np.float64):
        canvas = guard.Canvas((7, 9), dtype)
        assert canvas.written().outside() == "", dtype
        raw = canvas.buffer.view(np.uint8)
        assert (raw[: canvas.guard * canvas.dtype.itemsize] == guard.POISON_BYTE).all()


def test_tuples_of_results_are_read_element_by_element():
    mu = guard.Canvas((4,), np.int32, fill=0)
    planes = guard.Canvas((2, 4, 16), np.int8, fill=0)
    planes.buffer[-1] = 3  # the very last entry of the band after the planes
    with pytest.raises(CheckFailure, match="entries after the output of shape \\(2, 4, 16\\)"):
        checker.output((mu.written(), planes.written()), "residues")
    plain = checker.output((np.zeros(3), [1, 2]), "x")
    assert isinstance(plain, tuple) and plain[1].tolist() == [1, 2]


def test_a_host_copy_comes_from_get_or_copy_to_host():
    class Device:
        def __init__(self, host):
            self.host = host

        def get(self):
            return self.host

    assert guard._to_host(Device(np.arange(3))).tolist() == [0, 1, 2]

"""``tools/ozaki2_report.py``'s notes, fed records as its GPU run writes them (its helpers need no GPU): the old
designs beside the default under their names (B by B^T's rows since the default takes B in one pass), and the
targets read from the interleaved speed runs only, never from an accuracy sweep's records at another shape."""

from __future__ import annotations

import sys
from pathlib import Path

from utilities.bench import BenchRecord, Timing

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import ozaki2_report  # noqa: E402


def _record(name: str, ms: float, m: int = 8192, k: int | None = None, **params) -> BenchRecord:
    return BenchRecord(name, m, m, k or m, Timing.from_times([ms]), 1.0, params=params)


def test_the_old_designs_are_named_beside_the_default():
    records = [
        _record("ozaki2.auto", 16.0),
        _record("ozaki2.auto.recompute", 16.4, same_c_as_auto=True),
        _record("ozaki2.auto.by-rows", 16.5, same_c_as_auto=True),
        _record("ozaki2.scaling.auto", 1.1),
        _record("ozaki2.scaling.auto.by-rows", 1.3, same_b_words_as_auto=False),
    ]
    assert ozaki2_report.old_new_notes(records) == [
        "8192^3 ozaki2.auto 16.000 ms against ozaki2.auto.recompute 16.400 ms (1.02x); C bit for bit the same: True",
        "8192^3 ozaki2.auto 16.000 ms against ozaki2.auto.by-rows 16.500 ms (1.03x); C bit for bit the same: True",
        "8192^3 ozaki2.scaling.auto 1.100 ms against ozaki2.scaling.auto.by-rows 1.300 ms (1.18x); "
        "B's words and exponents bit for bit the same: False",
    ]


def test_targets_come_from_the_interleaved_runs_only():
    records = [
        _record("cublas.dgemm", 23.0, timing="interleaved"),
        _record("ozaki2.auto", 16.0, timing="interleaved", moduli=15, choice_ms=0.9, choice_share=0.9 / 16.0),
        _record("cublas.dgemm", 1.0, m=1024, k=16384, phi=0.0),  # the long-K accuracy sweep's
        _record("ozaki2.auto", 2.0, m=1024, k=16384, phi=0.0, moduli=15, auto=True),
    ]
    notes = ozaki2_report.target_notes(records)
    assert len(notes) == 1 and notes[0].startswith("8192^3: ozaki2.auto 16.00 ms with 15 moduli")
    assert "1.44x (target met)" in notes[0] and "(over 5%)" in notes[0]

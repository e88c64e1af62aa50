"""The convolution track's bar chart reads one name per kernel: the two-stage kernel is ``conv.twostage`` (its
unfused path ``conv.twostage.unfused``) in new records, and ``conv.fused`` / ``conv.unfused`` with ``params["which"]``
"fused" / "unfused" in the committed reports written before the pipelined kernel took ``conv.fused``."""

from __future__ import annotations

import json
from pathlib import Path

from utilities.bench import BenchRecord, Timing
from utilities.conv import figures

ROOT = Path(__file__).resolve().parents[1]
OLD_REPORT = ROOT / "results" / "nvidia-h100-80gb-hbm3-conv.json"
SHAPES = ((8, 512, 512, 64, 64), (8, 64, 64, 256, 256))


def _record(name: str, ms: float, shape: tuple[int, ...], **params: object) -> BenchRecord:
    dims = dict(zip(("batch", "height", "width", "c_in", "c_out"), shape, strict=True))
    return BenchRecord(name, 1, 1, 1, Timing(ms, ms, ms, 1), 1.0, params={**dims, **params})


def _bars(fig) -> dict[str, list[float]]:
    ax = fig.axes[0]
    return {c.get_label(): [round(p.get_height(), 6) for p in c.patches] for c in ax.containers}


def test_path_of_names_each_kernel_once_old_reports_included() -> None:
    shape = SHAPES[0]
    assert figures.path_of(_record("conv.twostage", 1, shape, which="twostage")) == "twostage"
    assert figures.path_of(_record("conv.twostage.unfused", 1, shape, which="twostage.unfused")) == "twostage.unfused"
    # the committed reports' two-stage rows, and today's pipelined rows of the same names
    assert figures.path_of(_record("conv.fused", 1, shape, which="fused")) == "twostage"
    assert figures.path_of(_record("conv.unfused", 1, shape, which="unfused")) == "twostage.unfused"
    assert figures.path_of(_record("conv.fused", 1, shape, which="fused@128x64x64-t128-d3-g1-s")) == "fused"
    assert figures.path_of(_record("conv.unfused", 1, shape, tile="128x64x64-t128-d3-g1-s")) == "unfused"
    assert figures.path_of(_record("conv.cudnn", 1, shape, which="cudnn fused")) == "cudnn"


def test_the_bars_stand_against_the_two_stage_kernel_and_ignore_the_pipelined_one() -> None:
    recs = []
    for i, shape in enumerate(SHAPES):
        recs += [
            _record("conv.twostage", 2.0 * (i + 1), shape, which="twostage"),
            _record("conv.twostage.unfused", 3.0 * (i + 1), shape, which="twostage.unfused"),
            _record("conv.cudnn", 0.5 * (i + 1), shape, which="cudnn fused"),
            _record("conv.library", 0.5 * (i + 1), shape, which="cudnn fused"),
        ]
    recs += [
        _record("conv.fused", 1.0, SHAPES[0], which="fused@128x64x64-t128-d3-g1-s", tile="128x64x64-t128-d3-g1-s"),
        _record("conv.unfused", 1.5, SHAPES[0], tile="128x64x64-t128-d3-g1-s"),
    ]
    bars = _bars(figures.times_bars(recs))
    assert bars == {
        figures.LABELS["twostage"]: [1.0, 1.0],
        figures.LABELS["twostage.unfused"]: [1.5, 1.5],
        figures.LABELS["cudnn"]: [0.25, 0.25],
    }


def test_the_committed_report_before_the_rename_still_draws() -> None:
    rows = json.loads(OLD_REPORT.read_text())["benchmarks"]
    assert {r["name"] for r in rows} >= {"conv.fused", "conv.unfused"}  # the old names, kept as committed
    recs = [BenchRecord.from_dict(r) for r in rows]
    times = {(r.name, figures._shape(r)): r.time.median for r in recs}
    shapes = list(dict.fromkeys(figures._shape(r) for r in recs))
    expected = [round(times[("conv.unfused", s)] / times[("conv.fused", s)], 6) for s in shapes]
    bars = _bars(figures.times_bars(rows))
    assert bars[figures.LABELS["twostage"]] == [1.0] * len(shapes) and len(shapes) == 6
    assert bars[figures.LABELS["twostage.unfused"]] == expected
    assert all(v > 1 for v in expected)  # that run's unfused path was slower at every shape

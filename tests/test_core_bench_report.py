"""Timing statistics, records, the recorder's JSON lines and the GPU report, all without a GPU."""

from __future__ import annotations

import copy
import io
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from utilities import bench, report
from utilities.bench import BenchRecord, Recorder, Timing, make_record, print_table

ROOT = Path(__file__).resolve().parents[1]
RESULTS_MD = ROOT.parent / "shared" / "RESULTS.md"

# The example of RESULTS.md (the contract), kept here so that the test runs where ../shared is absent.
EXAMPLE: dict[str, Any] = {
    "gpu": "NVIDIA H100 80GB HBM3",
    "compute_capability": "9.0",
    "date": "2026-11-23",
    "command": "the exact command that produced this file",
    "versions": {
        "nvmath-python": "1.0.0",
        "numba-cuda": "0.30.4",
        "cupy": "14.2.0",
        "numpy": "2.3.5",
        "libmathdx": "0.3.2.6",
        "driver": "580.159.04",
        "cuda": "13.0",
    },
    "benchmarks": [
        {
            "name": "ozaki.fused",
            "m": 8192,
            "n": 8192,
            "k": 8192,
            "params": {"slices": 7},
            "time_ms": {"median": 0.0, "min": 0.0, "max": 0.0, "repeats": 20},
            "tflops": 0.0,
            "error": {"normwise": 0.0, "max_elementwise": 0.0, "against": "exact"},
        }
    ],
    "builds": [{"kernel": "ozaki.fused", "first_s": 0.0, "edit_s": 0.0, "new_shape_s": 0.0, "warm_restart_s": 0.0}],
}


def _fake_records() -> list[BenchRecord]:
    rng = np.random.default_rng(1)
    err = bench.error_entry(3e-16, 2e-15, "exact")
    return [
        make_record("cublas.dgemm", 18.0 + rng.random(20), m=8192, n=8192, k=8192),
        make_record("ozaki.fused", 70.0 + rng.random(20), m=8192, n=8192, k=8192, params={"slices": 7}, error=err),
        make_record("cublas.igemm", 1.1 + rng.random(20) * 0.1, m=8192, n=8192, k=8192),
    ]


# ---------------------------------------------------------------------------------------------- timing


def test_timing_statistics_on_known_times() -> None:
    t = Timing.from_times([10.0, 1.0, 9.0, 2.0, 8.0, 3.0, 7.0, 4.0, 6.0, 5.0])
    assert (t.median, t.min, t.max, t.repeats) == (5.5, 1.0, 10.0, 10)
    # linear interpolation between order statistics: positions 0.2 * 9 = 1.8 and 0.8 * 9 = 7.2
    assert t.q20 == pytest.approx(2.8)
    assert t.q80 == pytest.approx(8.2)
    odd = Timing.from_times([3.0, 100.0, 2.0])
    assert odd.median == 3.0 and odd.max == 100.0


@pytest.mark.parametrize("times", [[], [1.0, float("nan")], [1.0, -2.0], [0.0, 1.0], [1.0, float("inf")]])
def test_timing_rejects_bad_times(times: list[float]) -> None:
    with pytest.raises(ValueError):
        Timing.from_times(times)


def test_make_record_counts_gemm_flops_at_the_median() -> None:
    r = make_record("x", [2.0, 2.0, 4.0, 1.0, 2.0], m=1000, n=1000, k=1000)
    assert r.time.median == 2.0
    assert r.tflops == pytest.approx(2e9 / 2e-3 / 1e12)  # 1.0
    assert r.bandwidth_tbs is None
    custom = make_record("y", [1.0], m=10, n=20, k=30, flops=5e9, bytes_moved=2e9)
    assert custom.tflops == pytest.approx(5.0)
    assert custom.bandwidth_tbs == pytest.approx(2.0)
    with pytest.raises(ValueError, match="positive integer"):
        make_record("z", [1.0], m=0, n=1, k=1)
    with pytest.raises(ValueError, match="positive integer"):
        make_record("z", [1.0], m=True, n=1, k=1)


def test_bench_record_round_trip() -> None:
    for r in _fake_records():
        d = json.loads(json.dumps(r.to_dict()))
        assert BenchRecord.from_dict(d) == r
        assert d["time_ms"]["q20"] <= d["time_ms"]["median"] <= d["time_ms"]["q80"]
    minimal = copy.deepcopy(EXAMPLE["benchmarks"][0])
    minimal["time_ms"].update(median=1.0, min=1.0, max=1.0)
    r = BenchRecord.from_dict(minimal)
    assert r.time.q20 is None and r.error == minimal["error"]
    assert r.to_dict() == minimal


# ---------------------------------------------------------------------------------------------- table


def test_print_table_puts_providers_in_columns() -> None:
    recs = [
        make_record("cublas.dgemm", [2.0], m=1024, n=1024, k=1024),
        make_record("ozaki.fused", [8.0], m=1024, n=1024, k=1024),
        make_record("cublas.dgemm", [16.0], m=2048, n=2048, k=2048),
    ]
    buf = io.StringIO()
    text = print_table(recs, file=buf)
    assert buf.getvalue() == text + "\n"
    lines = text.splitlines()
    header = lines[1].split()
    assert header == ["m", "n", "k", "cublas.dgemm", "ozaki.fused"]
    rows = [line.split() for line in lines[2:]]
    assert len(rows) == 2
    assert rows[0][:3] == ["1024"] * 3
    assert float(rows[0][3]) == pytest.approx(recs[0].tflops, rel=1e-3)
    assert float(rows[0][4]) == pytest.approx(recs[1].tflops, rel=1e-3)
    assert rows[1][4] == "-"  # ozaki.fused was not measured at 2048
    ms = print_table(recs, metric="ms", file=io.StringIO())
    assert ms.splitlines()[2].split()[3:] == ["2", "8"]
    with pytest.raises(ValueError):
        print_table(recs, metric="gflops")


# ---------------------------------------------------------------------------------------------- recorder


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_recorder_appends_json_lines_under_course_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "run"
    monkeypatch.setenv("COURSE_RESULTS", str(out))
    recs = _fake_records()
    rec = Recorder()
    rec.record(recs[0])
    rec.record(recs[1:])  # a list, as compare() returns
    rec.record_build("ozaki.fused", first_s=200.5, new_shape_s=88.0)
    assert [d["name"] for d in _lines(out / "records.jsonl")] == [r.name for r in recs]
    assert _lines(out / "records.jsonl") == [r.to_dict() for r in recs]
    assert _lines(out / "builds.jsonl") == [
        {"kernel": "ozaki.fused", "first_s": 200.5, "edit_s": None, "new_shape_s": 88.0, "warm_restart_s": None}
    ]
    merged, builds = report.merge_jsonl(out)
    assert merged == recs and builds == rec.builds
    saved = json.loads(rec.save(tmp_path / "session.json").read_text())
    assert saved == {"benchmarks": [r.to_dict() for r in recs], "builds": rec.builds}
    with pytest.raises(TypeError):
        rec.record([recs[0].to_dict()])  # type: ignore[list-item]


def test_default_recorder_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    r = _fake_records()[0]
    monkeypatch.setattr(bench, "DEFAULT_RECORDER", Recorder())
    monkeypatch.delenv("COURSE_RESULTS", raising=False)
    monkeypatch.chdir(tmp_path)
    bench.record(r)
    assert list(tmp_path.iterdir()) == []  # kept in memory only
    monkeypatch.setenv("COURSE_RESULTS", str(tmp_path / "a"))
    bench.record(r)
    bench.record_build("b2b.fused", first_s=1.5)
    assert len(_lines(tmp_path / "a" / "records.jsonl")) == 1
    assert _lines(tmp_path / "a" / "builds.jsonl")[0]["first_s"] == 1.5
    assert len(bench.DEFAULT_RECORDER.records) == 2


@pytest.mark.parametrize("bad", [-1.0, float("nan"), True])
def test_record_build_rejects_bad_seconds(bad: Any) -> None:
    with pytest.raises(ValueError):
        Recorder().record_build("k", first_s=bad)


def test_merge_jsonl_reports_the_broken_line(tmp_path: Path) -> None:
    assert report.merge_jsonl(tmp_path) == ([], [])
    good = json.dumps(_fake_records()[0].to_dict())
    (tmp_path / "records.jsonl").write_text(good + "\n{not json\n")
    with pytest.raises(report.ReportError, match=r"records.jsonl:2"):
        report.merge_jsonl(tmp_path)
    (tmp_path / "records.jsonl").write_text(json.dumps({"name": "x"}) + "\n")
    with pytest.raises(report.ReportError, match="missing key"):
        report.merge_jsonl(tmp_path)


# ---------------------------------------------------------------------------------------------- report


def _example_from_results_md() -> dict[str, Any]:
    if not RESULTS_MD.exists():
        return EXAMPLE
    block = re.search(r"```json\n(.*?)```", RESULTS_MD.read_text(), re.DOTALL)
    assert block is not None, "RESULTS.md lost its JSON example"
    return json.loads(block.group(1))


def test_embedded_example_is_the_one_in_results_md() -> None:
    assert _example_from_results_md() == EXAMPLE
    report.validate_report(EXAMPLE)


def test_written_report_validates_and_has_the_example_keys(tmp_path: Path) -> None:
    recs = _fake_records()
    builds = [bench.build_entry("ozaki.fused", 201.0, 3.5, 88.0, 2.0)]
    versions = report.collect_versions(gpu=False) | {"driver": None, "cuda": None}
    json_path, md_path = report.write_report(
        recs,
        builds,
        gpu="NVIDIA H100 80GB HBM3",
        compute_capability=(9, 0),
        command="pytest -m gpu",
        versions=versions,
        out_dir=tmp_path / "results",
    )
    assert json_path == tmp_path / "results" / "nvidia-h100-80gb-hbm3.json"
    assert md_path == json_path.with_suffix(".md")
    data = report.load_report(json_path)
    example = _example_from_results_md()
    assert list(data) == list(example)
    assert set(data["versions"]) == set(example["versions"])
    assert data["compute_capability"] == "9.0"
    for b in data["benchmarks"]:
        assert list(b) == list(example["benchmarks"][0])
        assert set(b["time_ms"]) == set(example["benchmarks"][0]["time_ms"]) | {"q20", "q80"}
    assert set(data["benchmarks"][1]["error"]) == set(example["benchmarks"][0]["error"])
    assert data["benchmarks"][0]["error"] is None
    assert list(data["builds"][0]) == list(example["builds"][0])
    assert [BenchRecord.from_dict(b) for b in data["benchmarks"]] == recs
    md = md_path.read_text()
    for r in recs:
        assert f"| {r.name} | 8192 | 8192 | 8192 |" in md
    assert "| ozaki.fused | 201.0 | 3.5 | 88.0 | 2.0 |" in md
    assert "slices=7" in md


def _drop(key: str) -> Callable[[dict[str, Any]], None]:
    return lambda r: r.pop(key)


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(r: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = r
        for p in parents:
            node = node[int(p)] if p.isdigit() else node[p]
        if value is KeyError:
            del node[last]
        else:
            node[last] = value

    return mutate


@pytest.mark.parametrize(
    ("mutate", "where"),
    [
        (_drop("gpu"), "gpu"),
        (_drop("builds"), "builds"),
        (_set("benchmarks.0.time_ms.repeats", KeyError), "repeats"),
        (_set("benchmarks.0.error.against", KeyError), "against"),
        (_set("builds.0.warm_restart_s", KeyError), "warm_restart_s"),
        (_set("benchmarks.0.m", "8192"), "benchmarks[0].m"),
        (_set("benchmarks.0.k", True), "benchmarks[0].k"),
        (_set("benchmarks.0.tflops", "fast"), "tflops"),
        (_set("benchmarks.0.tflops", float("nan")), "tflops"),
        (_set("benchmarks.0.params", [7]), "params"),
        (_set("benchmarks.0.time_ms.median", -1.0), "median"),
        (_set("benchmarks.0.time_ms.repeats", 2.5), "repeats"),
        (_set("benchmarks.0.error.normwise", "small"), "normwise"),
        (_set("builds.0.first_s", -3.0), "first_s"),
        (_set("compute_capability", 9.0), "compute_capability"),
        (_set("compute_capability", "sm90"), "compute_capability"),
        (_set("date", "23/11/2026"), "date"),
        (_set("versions", ["1.0"]), "versions"),
        (_set("versions.cupy", 14), "versions.cupy"),
        (_set("benchmarks", {}), "benchmarks"),
    ],
)
def test_validate_report_rejects_broken_reports(mutate: Callable[[dict[str, Any]], None], where: str) -> None:
    broken = copy.deepcopy(EXAMPLE)
    mutate(broken)
    with pytest.raises(report.ReportError, match=re.escape(where)):
        report.validate_report(broken)


def test_write_report_refuses_to_write_an_invalid_report(tmp_path: Path) -> None:
    with pytest.raises(report.ReportError, match="compute_capability"):
        report.write_report([], [], gpu="X", compute_capability="9", command="c", versions={}, out_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_collect_versions_reads_package_metadata() -> None:
    versions = report.collect_versions(gpu=False)
    assert set(versions) == {"nvmath-python", "numba-cuda", "cupy", "numpy", "libmathdx"}
    assert versions["numpy"] == np.__version__
    assert all(v is None or isinstance(v, str) for v in versions.values())


def test_the_compilers_are_named_as_loaded_and_none_where_they_cannot_load(monkeypatch) -> None:
    """nvJitLink and NVVM are not pinned and change the machine code: a report names the ones its process loaded."""
    import types

    bindings = types.ModuleType("cuda.bindings")
    bindings.nvjitlink = types.SimpleNamespace(version=lambda: (13, 0))
    pathfinder = types.ModuleType("cuda.pathfinder")
    lib = "/usr/local/cuda-13.0/nvvm/lib64/libnvvm.so.4.0.0"
    pathfinder.load_nvidia_dynamic_lib = lambda name: types.SimpleNamespace(abs_path=lib if name == "nvvm" else None)
    cuda = types.ModuleType("cuda")
    cuda.bindings, cuda.pathfinder = bindings, pathfinder
    for name, module in (("cuda", cuda), ("cuda.bindings", bindings), ("cuda.pathfinder", pathfinder)):
        monkeypatch.setitem(sys.modules, name, module)
    assert report.compilers() == {"nvjitlink": "13.0", "nvvm": lib}

    def missing(*args):
        raise OSError("not found")

    bindings.nvjitlink = types.SimpleNamespace(version=missing)
    pathfinder.load_nvidia_dynamic_lib = missing
    assert report.compilers() == {"nvjitlink": None, "nvvm": None}


def test_cpu_modules_do_not_import_cupy() -> None:
    code = (
        "import sys, utilities.bench, utilities.peaks, utilities.plots, utilities.report, utilities.cublas\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('cupy', 'cupyx', 'cuda')], 'GPU import'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_build_entries_say_whether_cached_builds_compute_the_same_bits():
    from utilities.gpu_suite import same_outputs

    plain = {"kernel": "ozaki.fused (no cache)", "output_sha256": {"first": "a", "edit": "b", "new_shape": "c"}}
    good = {
        "kernel": "ozaki.fused (build cache, 16 workers)",
        "output_sha256": {"first": "a", "edit": "b", "new_shape": "c", "warm_restart": "a"},
    }
    bad = {
        "kernel": "ozaki.fused (build cache, 16 workers)",
        "output_sha256": {"first": "a", "edit": "b", "new_shape": "c", "warm_restart": "x"},
    }
    entries = same_outputs([plain, good, bad])
    assert "same_output_as_no_cache" not in entries[0]
    assert entries[1]["same_output_as_no_cache"] is True and entries[2]["same_output_as_no_cache"] is False


def test_a_prebuild_entry_follows_results_md_and_is_shown() -> None:
    good = copy.deepcopy(EXAMPLE)
    good["builds"].append({"kernel": "prebuild", "prebuild_s": 472.0})
    report.validate_report(good)
    assert "Prebuild: 472 s" in report.render_markdown(good)
    for bad in ({"kernel": "prebuild"}, {"kernel": "prebuild", "prebuild_s": -1.0}):
        broken = copy.deepcopy(EXAMPLE)
        broken["builds"].append(bad)
        with pytest.raises(report.ReportError, match="prebuild_s"):
            report.validate_report(broken)


def test_a_run_of_the_gpu_tests_validates_and_a_broken_one_does_not() -> None:
    run = {"gpu": "NVIDIA H200", "date": "2026-11-28", "command": "pytest -m gpu tests", "commit": "abc"}
    run |= {"passed": 3, "failed": 1, "errors": 0, "skipped": 2, "seconds": 9.5, "failures": ["tests/t.py::x"]}
    report.validate_test_runs(run)
    report.validate_test_runs({"runs": [run, run]})
    with pytest.raises(report.ReportError, match="one id per failure"):
        report.validate_test_runs({**run, "failed": 2})
    with pytest.raises(report.ReportError, match="commit"):
        report.validate_test_runs({k: v for k, v in run.items() if k != "commit"})


def test_every_committed_report_validates() -> None:
    """Every GPU report in results/ follows the format (run-throughs and ledgers have their own); and there are some:
    the README's and the notebooks' reference figures cite them."""
    validated = []
    for path in sorted((Path(__file__).resolve().parents[1] / "results").glob("nvidia-*.json")):
        data = json.loads(path.read_text())
        if path.name.endswith("-workshop.json") or "rows" in data:  # a run-through, or a GPU ledger
            continue
        if path.name.endswith("-gpu-tests.json"):  # runs of the GPU tests
            report.validate_test_runs(data)
            continue
        report.validate_report(data)
        validated.append(path.name)
    assert validated, "no GPU report in results/ (nvidia-*.json): the figures the course cites have nothing behind them"


def test_a_claim_says_whether_it_held_and_what_was_measured_instead(capsys) -> None:
    assert (
        bool(bench.claim("fusion beat the plain path at every shape", True, "at (4096, 256, 64) fused 0.58 ms")) is True
    )
    assert capsys.readouterr().out == "✓ fusion beat the plain path at every shape\n"
    assert (
        bool(bench.claim("fusion beat the plain path", False, "at (4096, 256, 64) fused 0.58 ms, plain 0.34 ms"))
        is False
    )
    assert capsys.readouterr().out == "✗ not on this GPU today: at (4096, 256, 64) fused 0.58 ms, plain 0.34 ms\n"

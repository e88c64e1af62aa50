"""The GPU proof's bookkeeping, on a CPU: what it reads from a real pytest run, how it spreads notebooks, and the
verdict it gives on each target (``utilities.gpu_proof``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from utilities import gpu_proof

SAMPLE_TESTS = """
import pytest

def test_fine():
    assert True

def test_wrong():
    assert 1 == 2

@pytest.fixture
def broken():
    raise RuntimeError("no device")

def test_setup_fails(broken):
    pass

@pytest.mark.skip(reason="needs a GPU")
def test_skipped():
    pass

class TestGroup:
    def test_inside(self):
        assert False
"""


def test_junit_counts_reads_a_real_pytest_run(tmp_path: Path) -> None:
    folder = tmp_path / "tests"
    folder.mkdir()
    (folder / "test_sample.py").write_text(SAMPLE_TESTS)
    xml = tmp_path / "run.xml"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}", "tests"],
        cwd=tmp_path,
        capture_output=True,
        check=False,
    )
    counts = gpu_proof.junit_counts(xml)
    assert (counts.passed, counts.failed, counts.errors, counts.skipped) == (1, 2, 1, 1)
    assert sorted(counts.failures) == [
        "tests/test_sample.py::TestGroup::test_inside",
        "tests/test_sample.py::test_setup_fails (error)",
        "tests/test_sample.py::test_wrong",
    ]
    assert list(counts.file_seconds) == ["tests/test_sample.py"]  # what spreads the next run's files


def test_the_last_runs_seconds_per_file_spread_the_next_runs_files(tmp_path: Path) -> None:
    path = tmp_path / "gpu-tests.json"
    assert gpu_proof.file_seconds(path) == {}
    path.write_text(json.dumps({"runs": [{"file_seconds": {"a": 1.0}}, {"file_seconds": {"b": 2.0}}]}))
    assert gpu_proof.file_seconds(path) == {"b": 2.0}
    path.write_text(json.dumps({"gpu": "X"}))  # a run from before the seconds were kept
    assert gpu_proof.file_seconds(path) == {}


def test_runs_made_side_by_side_add_up() -> None:
    a = gpu_proof.TestCounts(10, 1, 0, 2, 300.0, ["t::a"])
    b = gpu_proof.TestCounts(2, 0, 1, 0, 500.0, ["t::b (error)"])
    assert gpu_proof.merge_counts([a, b]) == gpu_proof.TestCounts(12, 1, 1, 2, 500.0, ["t::a", "t::b (error)"])


def test_processes_run_at_once_share_the_cores() -> None:
    assert gpu_proof.threads_each(6, cores=16) == 2
    assert gpu_proof.threads_each(20, cores=16) == 1
    assert gpu_proof.threads_each(0, cores=16) == 16


def test_test_runs_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "gpu-tests.json"
    path.write_text(json.dumps({"gpu": "X", "passed": 3}))  # an older file that held one run
    data = gpu_proof.add_test_run(path, {"gpu": "X", "passed": 4})
    assert [run["passed"] for run in data["runs"]] == [3, 4]
    assert gpu_proof.add_test_run(tmp_path / "none.json", {"passed": 1}) == {"runs": [{"passed": 1}]}


def test_notebooks_are_spread_by_their_last_wall_time() -> None:
    stems = ["a", "b", "c", "d", "e"]
    groups = gpu_proof.split_evenly(stems, {"a": 200, "b": 40, "c": 150, "d": 60, "e": 50}, 2)
    assert sorted(sum(groups, [])) == stems
    loads = [sum({"a": 200, "b": 40, "c": 150, "d": 60, "e": 50}[s] for s in g) for g in groups]
    assert max(loads) == 250  # a + e | c + d + b: the best split of these five
    assert all(g == sorted(g, key=stems.index) for g in groups)  # each group in the given order
    assert gpu_proof.split_evenly(["a"], {}, 4) == [["a"]]


def _entry(stem: str, **kw) -> dict:
    return {
        "notebook": stem,
        "wall_s": 100.0,
        "build_wait_s": 10.0,
        "longest_check_after_edit_s": 5.0,
        "course_links": [],
        "error": "",
        **kw,
    }


def _rows(stems: list[str]) -> list[dict]:
    return [{"notebook": s, "variant": v, "passed": True} for s in stems for v in ("solution", "exercise")]


def test_a_run_that_meets_every_target_passes() -> None:
    tests = gpu_proof.TestCounts(120, 0, 0, 3, 400.0, [])
    checks = gpu_proof.verdicts(tests, [_entry("x"), _entry("y")], [_entry("x")], _rows(["x", "y"]), ["x", "y"])
    assert all(met for _, met, _ in checks), checks


def test_each_target_fails_on_its_own() -> None:
    good = gpu_proof.TestCounts(120, 0, 0, 3, 400.0, [])
    whole, rows, stems = [_entry("x"), _entry("y")], _rows(["x", "y"]), ["x", "y"]
    one_core = [_entry("x")]

    def failed(tests=good, whole=whole, core=one_core, rows=rows) -> list[str]:
        return [t for t, met, _ in gpu_proof.verdicts(tests, list(whole), list(core), rows, stems) if not met]

    assert failed() == []
    assert failed(tests=gpu_proof.TestCounts(119, 1, 0, 3, 1.0, ["t"])) == ["GPU tests: 0 failed, 0 errors"]
    assert failed(tests=gpu_proof.TestCounts(120, 0, 1, 3, 1.0, ["t"])) == ["GPU tests: 0 failed, 0 errors"]
    assert failed(tests=None) == ["GPU tests: 0 failed, 0 errors"]
    assert failed(rows=rows[:-1]) == ["every GPU notebook passes, solution and filled exercise"]  # a variant missing
    assert failed(rows=[{**rows[0], "passed": False}, *rows[1:]]) == [
        "every GPU notebook passes, solution and filled exercise"
    ]
    assert failed(whole=[_entry("x", error="CheckFailure: ..."), _entry("y")]) == [
        "run-through (whole) runs to the end"
    ]
    assert failed(core=[_entry("x", error="boom")]) == ["run-through (core path) runs to the end"]
    assert failed(core=[]) == ["run-through (core path) runs to the end"]  # it must have run
    assert failed(whole=[_entry("x", course_links=["m.k"]), _entry("y")]) == [
        "no course kernel linked in the run-through"
    ]
    assert failed(whole=[_entry("x", build_wait_s=100.0), _entry("y", build_wait_s=81.0)]) == [
        "build waits <= 180 s over the whole run-through"
    ]
    assert failed(whole=[_entry("x", longest_check_after_edit_s=31.0), _entry("y")]) == [
        "every check after an edit <= 30 s"
    ]
    assert failed(whole=[_entry("x", wall_s=361.0), _entry("y")]) == ["each notebook <= 360 s"]


def test_the_prebuild_and_the_whole_proof_have_targets_of_their_own() -> None:
    good = gpu_proof.TestCounts(120, 0, 0, 3, 400.0, [])
    args = ([_entry("x")], [_entry("x")], _rows(["x"]), ["x"])

    def verdict(steps) -> list[tuple[str, bool, str]]:
        return [c for c in gpu_proof.verdicts(good, *args, steps=steps) if "prebuild" in c[0] or "proof" in c[0]]

    assert verdict([("import", 12.0, 0), ("prebuild", 300.0, 0), ("all", 1003.0, 0)]) == [
        ("the prebuild <= 300 s", True, "300 s"),
        ("the whole proof <= 1200 s", True, "1003 s"),
    ]
    assert verdict([("prebuild", 334.0, 0), ("all", 1201.0, 0)]) == [
        ("the prebuild <= 300 s", False, "334 s"),
        ("the whole proof <= 1200 s", False, "1201 s"),
    ]
    assert verdict([("prebuild (earlier)", 90.0, 0)]) == [] and verdict(None) == []  # not this run's: no verdict
    assert verdict([("prebuild (earlier)", 90.0, 0), ("tests", 300.0, 0), ("all", 400.0, 0)]) == []  # resumed
    assert verdict([("prebuild", 120.0, 1)]) == [("the prebuild <= 300 s", False, "120 s, exit 1")]  # a job failed


def test_the_longest_check_after_an_edit_is_named_with_the_load_it_ran_under() -> None:
    good = gpu_proof.TestCounts(120, 0, 0, 3, 400.0, [])
    slow = _entry("y", longest_check_after_edit_s=40.0, edit_seconds=[12.0, 40.0], edit_loads=[3.0, 21.4], cores=16)
    checks = gpu_proof.verdicts(good, [_entry("x"), slow], [_entry("x")], _rows(["x", "y"]), ["x", "y"])
    said = dict((target, measured) for target, _, measured in checks)["every check after an edit <= 30 s"]
    assert said == "longest 40 s (y, load 21 on 16 cores)"
    slow["edit_race_waits_s"] = [0.0, 6.0]
    checks = gpu_proof.verdicts(good, [_entry("x"), slow], [_entry("x")], _rows(["x", "y"]), ["x", "y"])
    said = dict((target, measured) for target, _, measured in checks)["every check after an edit <= 30 s"]
    assert said == "longest 40 s (y, load 21 on 16 cores; 6 s of it waiting for races)"
    old = _entry("y", longest_check_after_edit_s=40.0)  # a run-through from before the loads were recorded
    checks = gpu_proof.verdicts(good, [_entry("x"), old], [_entry("x")], _rows(["x", "y"]), ["x", "y"])
    assert dict((t, m) for t, _, m in checks)["every check after an edit <= 30 s"] == "longest 40 s (y)"


def test_the_report_names_every_step_and_target() -> None:
    checks = [("GPU tests: 0 failed, 0 errors", False, "1 failed")]
    text = gpu_proof.report(
        [("cache", 5.0, 0), ("tests", 400.0, 1)], checks, {"gpu": "G", "commit": "c", "date": "d", "command": "cmd"}
    )
    assert "| tests | 400 | 1 |" in text and "| GPU tests: 0 failed, 0 errors | **no** | 1 failed |" in text


def test_without_a_gpu_it_says_so_and_fails() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "utilities.gpu_proof", "--out", "/nonexistent"],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert "gpu-proof: cannot run" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_run_cut_short_is_reported_from_its_logs_on_any_machine(tmp_path: Path) -> None:
    """``--report-only``: nothing is started (no GPU here); the steps that finished are read from their markers,
    the others said not to have finished, and the date is the day the logs were written."""
    logs, out = tmp_path / "logs", tmp_path / "out"
    logs.mkdir()
    (logs / "prebuild.done").write_text(json.dumps(["prebuild", 252.0, 0]))
    (logs / "workshop-0.done").write_text(json.dumps(["workshop-0", 700.0, 0]))
    (logs / "workshop-0.json").write_text(json.dumps({"notebooks": [_entry("2b_back_to_back", course_links=["m.k"])]}))
    written = 1_795_000_000  # 2026-11-18 UTC
    for marker in logs.glob("*.done"):
        os.utime(marker, (written, written))
    done = subprocess.run(
        [sys.executable, "-m", "utilities.gpu_proof", "--report-only", "NVIDIA H200", "--logs", str(logs)]
        + ["--out", str(out)],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        env={**os.environ, "COURSE_COMMIT": "abc123"},
    )
    assert done.returncode == 1, done.stdout + done.stderr  # targets not met: the tests and solutions never ran
    text = (out / "nvidia-h200-proof.md").read_text()
    assert text.startswith("# GPU proof: NVIDIA H200, commit abc123, 2026-11-18")
    assert "| prebuild (earlier) | 252 | 0 |" in text and "| solutions (did not finish) | 0 | -1 |" in text
    assert "| GPU tests: 0 failed, 0 errors | **no** | did not run |" in text
    assert "2b_back_to_back: m.k" in text
    assert text.index("| workshop-0") < text.index("| tests-0") < text.index("| solutions") < text.index("| core-0"), (
        "the run-through first and alone among notebooks: the tests and the ledger build the notebooks' kernels, "
        "which would serve it; the core path, which measures no clock, beside them"
    )
    whole = json.loads((out / "nvidia-h200-workshop.json").read_text())["notebooks"]
    assert [e["notebook"] for e in whole] == ["2b_back_to_back"]


def test_the_results_are_dated_today_or_by_the_logs_last_step(tmp_path: Path) -> None:
    marker = tmp_path / "tests-0.done"
    marker.write_text("0")
    os.utime(marker, (86400 * 3, 86400 * 3))  # 1970-01-04
    assert gpu_proof.report_date(tmp_path, from_logs=True) == "1970-01-04"
    assert gpu_proof.report_date(tmp_path, from_logs=False) == time.strftime("%Y-%m-%d", time.gmtime())
    assert gpu_proof.report_date(tmp_path / "none", from_logs=True) == time.strftime("%Y-%m-%d", time.gmtime())

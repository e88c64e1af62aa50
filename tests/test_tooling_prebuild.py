"""The prebuild's scheduling, progress and report, and its behaviour on a machine that cannot build (CPU)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from utilities import prebuild

ROOT = Path(__file__).resolve().parent.parent


def test_every_course_job_names_a_known_kind_and_the_list_is_longest_first():
    jobs = prebuild.COURSE_JOBS.split(",")
    assert len(jobs) == len(set(jobs)) and all(job.partition(":")[0] in prebuild.BUILDERS for job in jobs)
    ordered = prebuild.order(jobs, {"b2b:576x64x128": 900.0})
    assert ordered[0] == "b2b:576x64x128"  # measured seconds come first
    typical = [prebuild.KIND_SECONDS.get(job.partition(":")[0], 120) for job in ordered[1:]]
    assert typical == sorted(typical, reverse=True)


def test_progress_line_and_estimate():
    line = prebuild.progress_line(3, 32, "fused:8192x8192x8192", 95.2, 130.0, 245.0)
    assert line == "prebuild: [3/32] fused:8192x8192x8192: 95 s; 2 min 10 s elapsed, about 4 min 05 s left"
    assert "left" not in prebuild.progress_line(32, 32, "b2b:576x64x128", 10, 30, None)
    # four jobs of 100 s on two processes: 200 s; one running for 60 s of its 100 has 40 left
    assert prebuild.estimate_left(["a:1", "b:1"], {}, {"a:1": 100, "b:1": 100}, 2, 0.0) == 100
    assert prebuild.estimate_left(["a:1"], {"b:1": 0.0}, {"a:1": 100, "b:1": 100}, 2, 60.0) == 100
    assert prebuild.estimate_left([], {"b:1": 0.0}, {"b:1": 100}, 4, 60.0) == 40
    assert prebuild.estimate_left([], {}, {}, 4, 0.0) == 0
    # builds side by side ran twice as long as expected: what is left doubles too
    assert prebuild.estimate_left(["a:1"], {}, {"a:1": 100, "c:1": 50}, 1, 0.0, finished={"c:1": 100.0}) == 200
    # a build already past its cost is not "5 s from done": a quarter of its elapsed time more
    assert prebuild.estimate_left([], {"b:1": 0.0}, {"b:1": 100}, 1, 300.0) == 75


def test_report_table_lists_longest_first_and_failures():
    table = prebuild.report_table([("a:1", 10.0, True), ("b:2", 99.5, False)])
    lines = table.splitlines()
    assert lines[1].startswith("b:2") and lines[1].endswith("FAILED") and lines[2].endswith("yes")


def test_measured_seconds_survive_a_run_and_a_corrupt_file(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_BUILD_CACHE", str(tmp_path))
    assert prebuild.measured_seconds() == {}
    prebuild._save_seconds({"fused:64x64x384": 12.5})
    prebuild._save_seconds({"b2b:576x64x128": 3.0})
    assert prebuild.measured_seconds() == {"fused:64x64x384": 12.5, "b2b:576x64x128": 3.0}
    (tmp_path / "prebuild-seconds.json").write_text("{not json")
    assert prebuild.measured_seconds() == {}


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM", "COURSE_SIMULATOR_AUTO")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "utilities.prebuild", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_help_and_list_need_no_gpu():
    done = _run("--help")
    assert done.returncode == 0 and "--jobs" in done.stdout and "kinds:" in done.stdout
    listed = [line.strip().split(":")[0] for line in done.stdout.split("job kinds:")[1].splitlines() if line.strip()]
    assert listed == list(prebuild.BUILDERS)  # every kind, conv's included, each with the form of its spec
    done = _run("--list", "--jobs", "multipass:int8:1,b2b_pipelined:131072x64x256x64@64x128x32x2")
    # longest first: on an H100 host the pipelined back-to-back kernel took 390 s, a multi-pass kernel 130 s
    assert done.returncode == 0 and done.stdout.split() == [
        "b2b_pipelined:131072x64x256x64@64x128x32x2",
        "multipass:int8:1",
    ]


def test_unknown_kind_is_refused_naming_the_kinds():
    done = _run("--jobs", "nonsense:1")
    assert done.returncode == 2 and "unknown job kind" in done.stderr and "b2b_pipelined" in done.stderr


def test_without_a_gpu_it_says_why_in_one_message(monkeypatch):
    from utilities.preflight import probe_gpus

    if probe_gpus()[0]:
        pytest.skip("a GPU is present: the prebuild would build")
    done = _run("--jobs", "b2b:576x64x128")
    assert done.returncode == 2
    assert "cannot build the course's kernels on this machine" in done.stderr and "No NVIDIA GPU" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert "can run track" in done.stdout  # the preflight table came first


def test_counts_of_a_job_read_as_single_ranges_and_lists():
    assert prebuild.parse_counts("7") == [7]
    assert prebuild.parse_counts("1-7") == [1, 2, 3, 4, 5, 6, 7]
    assert prebuild.parse_counts("7+12") == [7, 12]
    assert prebuild.parse_counts("3-4+9") == [3, 4, 9]


def test_every_job_kind_is_built_by_a_builder_and_described():
    kinds = {job.partition(":")[0] for job in prebuild.COURSE_JOBS.split(",")}
    assert kinds <= set(prebuild.BUILDERS) and kinds <= set(prebuild.SPEC_FORMS)


def test_the_longest_jobs_get_two_code_generation_workers():
    assert [prebuild.build_workers(rank, 16, 16) for rank in range(4)] == [2, 2, 1, 1]  # a 16-core host
    assert [prebuild.build_workers(rank, 16, 4) for rank in range(3)] == [4, 4, 4]  # four at a time: a share each
    assert prebuild.build_workers(0, 2, 1) == 2 and prebuild.build_workers(0, 1, 1) == 2
    line = prebuild.progress_line(1, 2, "fused:256x256x384", 80, 80, 10, "3 from another process")
    assert "fused:256x256x384: 80 s (3 from another process);" in line

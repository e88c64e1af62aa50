"""The prebuild's scheduling, progress and report, and its behaviour on a machine that cannot build (CPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from utilities import prebuild
from utilities.execution import python_env

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
    env = python_env(simulator=False)
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


def test_the_ozaki_race_runs_slicing_kernels_are_prebuilt():
    """3c's and 3d's race runs slice with the course's kernels at their own case: a job builds them, or the race
    run's process builds them under compute-sanitizer in every notebook's first check."""
    from utilities.ozaki.check import RACE_SHAPE, RACE_SLICES

    slicing = [job.partition(":")[2] for job in prebuild.COURSE_JOBS.split(",") if job.startswith("slicing:")]
    counts = {int(k): prebuild.parse_counts(c) for k, c in (spec.split("@") for spec in slicing)}
    assert RACE_SLICES in counts.get(RACE_SHAPE[2], []), counts


def test_every_job_kind_is_built_by_a_builder_and_described():
    kinds = {job.partition(":")[0] for job in prebuild.COURSE_JOBS.split(",")}
    assert kinds <= set(prebuild.BUILDERS) and kinds <= set(prebuild.SPEC_FORMS)


def test_every_job_gets_a_quarter_of_the_cores_in_workers_and_the_run_one_slot_a_core(tmp_path, monkeypatch):
    assert prebuild.build_workers(16) == 4 and prebuild.build_workers(2) == 2 and prebuild.build_workers(1) == 2
    monkeypatch.setattr(prebuild.tempfile, "tempdir", str(tmp_path))
    slots = prebuild._slots(3)
    assert slots is not None and len(slots.files) == 3 and slots.folder.parent == tmp_path
    cores = prebuild.codegen_workers.usable_cores()
    assert 1 <= prebuild.codegen_workers.machine_slots() <= cores <= (os.cpu_count() or 1)
    line = prebuild.progress_line(1, 2, "fused:256x256x384", 80, 80, 10, "3 from another process")
    assert "fused:256x256x384: 80 s (3 from another process);" in line


def test_a_jobs_block_reads_as_its_configs_fields():
    p = prebuild
    assert p.parse_block("64x64x32x64", p.PRIMER_FIELDS) == {"tile_m": 64, "tile_n": 64, "tile_k": 32, "threads": 64}
    assert p.parse_block("64x64x64x128x2", p.OZAKI_FIELDS) == {
        "tile_m": 64,
        "tile_n": 64,
        "tile_k": 64,
        "threads": 128,
        "depth": 2,
    }
    assert p.parse_block("", p.OZAKI_FIELDS) == {}
    b2b = {"fields": p.B2B_FIELDS, "least": 2, "suffixes": p.SUFFIXES["b2b"]}
    assert p.parse_block("64x128", **b2b) == {"tile_m": 64, "threads": 128}  # 2b's lever: the rest BlockConfig's
    assert p.parse_block("32x128x3", **b2b) == {"tile_m": 32, "threads": 128, "depth": 3}
    assert p.parse_block("64x256-k32", **b2b) == {"tile_m": 64, "threads": 256, "tile_k": 32}
    assert p.parse_block("64x256x2-K32", **b2b) == {"tile_m": 64, "threads": 256, "depth": 2, "tile_k": 32}
    multipass = {"fields": p.MULTIPASS_FIELDS, "suffixes": p.SUFFIXES["multipass"]}
    assert p.parse_block("64x64x128-n16", **multipass) == {"tile_m": 64, "tile_n": 64, "threads": 128, "passes": 16}
    refused = [
        ("64x64x32", {"fields": p.PRIMER_FIELDS}, "4 sizes"),  # a field left out is not a default here
        ("64x64x32x64x1", {"fields": p.PRIMER_FIELDS}, "4 sizes"),
        ("64", b2b, "2 to 3 sizes"),
        ("64x256x3x32", b2b, "2 to 3 sizes"),  # the K tile is a suffix, not a fourth size
        ("64x256-q32", b2b, "not a suffix"),
        ("64x256-k", b2b, "not a suffix"),
        ("64x256-k32-k64", b2b, "not a suffix"),
        ("64x64x32x64-k32", {"fields": p.PRIMER_FIELDS}, "its suffixes: none"),
    ]
    for text, how, match in refused:
        with pytest.raises(ValueError, match=match):
            p.parse_block(text, **how)


def test_kernel_of_writes_the_plans_defaults_out_and_leaves_the_sizes_that_pick_nothing():
    k = prebuild.kernel_of
    assert k("primer:tile") == k("primer:tile@128x128x64x128") == "primer:tile@128x128x64x128"
    assert k("primer:tile@64x64x32x64") != k("primer:tile") and k("primer:stack") == "primer:stack"
    assert k("gemm_bias_relu:512x128x256") == k("gemm_bias_relu:384x256x192@128x128x64x128")
    assert k("gemm_bias_relu:256x256x256@64x128x64x128") == "gemm_bias_relu@64x128x64x128"
    # the streaming back-to-back kernel: N0 and N1 and the block pick it; K0, M and the depth do not
    assert k("b2b_keep:576x64x128") == k("b2b_keep:288x64x128@128x128x2-k64") == "b2b_keep:64x128@128x128-k64"
    assert k("b2b:576x64x128") != k("b2b_keep:576x64x128")
    assert k("b2b:64x256x64") == "b2b:256x64@64x128-k64"  # N0 = 256: 64 rows without a cfg
    assert k("b2b:576x64x128@64x128") == "b2b:64x128@64x128-k64" != k("b2b:288x64x128@64x128-k32")
    assert k("conv:64x64") == k("conv:128x64@128x64x64x128") == "conv@128x64x64x128"
    assert k("conv:32x32") == "conv@128x32x32x128" and k("conv_unfused:64x64") == "conv_unfused@128x64x64x128"
    assert k("conv_b2b_keep:64x64x128") == k("conv_b2b_keep:64x64x128@128x64x64-t128-d2-g1-s-b3")
    assert k("conv_b2b_keep:32x64x128") != k("conv_b2b_keep:64x64x128")  # C_in picks the K stages
    # the multi-pass kernel: one phase's Matmul (tile, F PK deep, threads); N picks nothing
    assert k("multipass:int8:2") == k("multipass:int8:2@128x128x256-n16") == "multipass:int8:128x128x64x256"
    assert k("multipass:float16:8@64x64x128-n16") == "multipass:float16:64x64x128x128" != k("multipass:float16:8")
    assert k("fused:256x256x384") == "fused@gpu" and k("fused:300x136x392@64x64x64x128x2") == "fused@64x64x64x128x2"
    assert k("unfused:300x136x392@64x64x64x128x2") != k("fused:300x136x392@64x64x64x128x2")
    assert k("slicing:392@7+12") == "slicing:392@7+12" and k("pipeline:int8:256") == "pipeline:int8:256"


def test_the_checks_twins_are_jobs_once_each_and_only_where_no_other_job_builds_them():
    twins = prebuild.CHECK_JOBS.split(",")
    built = {prebuild.kernel_of(job) for job in prebuild.NOTEBOOK_JOBS.split(",")}
    assert twins and not [job for job in twins if prebuild.kernel_of(job) in built]
    assert len({prebuild.kernel_of(job) for job in twins}) == len(twins)
    assert set(twins) <= set(prebuild.check_jobs()) and prebuild.COURSE_JOBS.endswith(prebuild.CHECK_JOBS)
    assert prebuild.missing_twins(prebuild.COURSE_JOBS) == []
    # a check's block that a notebook job builds already is left to it: 2a's course block, the primer's, ...
    assert "gemm_bias_relu:256x256x256@128x128x64x128" in prebuild.check_jobs()
    assert "gemm_bias_relu:256x256x256@128x128x64x128" not in twins


def test_the_listed_jobs_include_the_checks_twins():
    done = _run("--list")
    assert done.returncode == 0 and sorted(done.stdout.split()) == sorted(prebuild.COURSE_JOBS.split(","))
    assert set(prebuild.CHECK_JOBS.split(",")) <= set(done.stdout.split())


def test_each_jobs_kernels_and_keys_are_written_with_what_each_key_was_made_of(tmp_path, monkeypatch):
    """``--keys``: a job's process prints its lookups (name, key, recipe, linked or served); the prebuild writes
    them by job, so that a kernel keyed differently on a GPU and on the CPU that built the bundle is compared part by
    part."""
    from utilities.machinery.buildcache import linking

    monkeypatch.setattr(linking, "KEYS", [("m.served", "k1"), ("m.linked", "k2")])
    monkeypatch.setattr(linking, "COURSE_LINKED_KEYS", ["k2"])
    monkeypatch.setattr(linking, "RECIPES", {"k1": {"ir": "a"}, "k2": {"ir": "b"}})
    keys = prebuild.job_keys()
    assert keys == [
        {"kernel": "m.served", "key": "k1", "recipe": {"ir": "a"}, "linked": False},
        {"kernel": "m.linked", "key": "k2", "recipe": {"ir": "b"}, "linked": True},
    ]
    stdout = f"[build] x\n{prebuild.KEYS_MARK}{json.dumps(keys)}\n{prebuild.STATS}3 from cache\n"
    assert prebuild.job_output(stdout) == ("3 from cache", keys)
    assert prebuild.job_output("a job that failed early\n") == ("", [])
    prebuild.write_keys(tmp_path / "logs" / "keys.json", {"b2b:64x256x64": keys, "b2b:576x64x128": []})
    written = json.loads((tmp_path / "logs" / "keys.json").read_text())
    assert list(written) == ["b2b:576x64x128", "b2b:64x256x64"] and written["b2b:64x256x64"] == keys


@pytest.mark.parametrize(("job", "twin"), [("conv_b2b_keep:64x64x128", True), ("conv_b2b:64x64x64", False)])
def test_a_checks_twin_is_typed_and_keeps_the_code_it_links(job, twin, monkeypatch):
    """A twin of a check's kernel is typed, not served (its record still written: a notebook is served it), inside
    ``keeping_code`` (after a launch-only import the code an attendee's edit links is then in the cache); another
    job is served as it comes."""
    import types

    from utilities.machinery import buildcache
    from utilities.machinery.buildcache import dispatch

    seen = []

    class Keeping:
        def __enter__(self):
            seen.append("keep")

        def __exit__(self, *exc):
            seen.append("kept")

    cupy = types.SimpleNamespace(cuda=types.SimpleNamespace(Device=lambda: types.SimpleNamespace(synchronize=dict)))
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setenv(dispatch.ENV, "on")  # restored after the test: build_one sets it in os.environ
    monkeypatch.setattr(buildcache, "install", lambda: None)
    monkeypatch.setattr(buildcache, "keeping_code", Keeping)
    kind = job.partition(":")[0]
    build = lambda *a: seen.append(("build", dispatch.enabled(), dispatch.recording()))  # noqa: E731
    monkeypatch.setitem(prebuild.BUILDERS, kind, build)
    prebuild.build_one(job, 7)
    assert seen == (["keep", ("build", False, True), "kept"] if twin else [("build", True, True)])

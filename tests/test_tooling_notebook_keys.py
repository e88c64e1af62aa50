"""tools/notebook_keys.py's comparison: a notebook's course kernel with no prebuild job's key is named; the
attendee's kernels (``__main__``) are never counted. The builds need the GPU stack (the tool, run by hand)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def tool():
    spec = importlib.util.spec_from_file_location("notebook_keys", ROOT / "tools" / "notebook_keys.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_course_kernel_without_a_job_s_key_is_named_and_the_attendee_s_are_left_out():
    steps = {
        "yours": [["__main__.make_k.<locals>.k", "a1"]],
        "course": [["utilities.m.make_k.<locals>.k", "b2"]],
        "lever": [["utilities.m.make_k.<locals>.k", "c3"]],
        "reused": [],
    }
    jobs = {"k:64": [["utilities.m.make_k.<locals>.k", "b2"]], "k:32": [["utilities.m.make_k.<locals>.k", "d4"]]}
    notebook_keys = tool()
    assert [step for step, _, _ in notebook_keys.course_kernels(steps)] == ["course", "lever"]
    assert notebook_keys.unserved(steps, jobs) == [("lever", "utilities.m.make_k.<locals>.k", "c3")]
    assert notebook_keys.unserved(steps, {**jobs, "k:lever": [["utilities.m.make_k.<locals>.k", "c3"]]}) == []


def test_every_driven_notebook_names_jobs_the_prebuild_knows():
    from utilities import prebuild

    notebook_keys = tool()
    for notebook, (_, jobs) in notebook_keys.NOTEBOOKS.items():
        kinds = {job.partition(":")[0] for job in jobs.split(",")}
        assert kinds <= set(prebuild.BUILDERS), notebook
        assert set(jobs.split(",")) <= set(prebuild.COURSE_JOBS.split(",")), f"{notebook}: a job the prebuild lacks"

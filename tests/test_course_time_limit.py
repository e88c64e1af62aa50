"""The guard of conftest.py: a test that hangs stops the run with its name and its stacks, in the test's time limit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from utilities.execution import python_env

ROOT = Path(__file__).resolve().parent.parent


def run_pytest(tmp_path: Path, body: str, limit: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_waiting.py").write_text(f"import time\n\n\ndef test_waits():\n    {body}\n")
    env = python_env(COURSE_TEST_LIMIT_S=limit)
    command = [sys.executable, "-m", "pytest", "-p", "conftest", "-q", "test_waiting.py"]
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_a_test_past_its_limit_stops_the_run_and_names_itself(tmp_path: Path) -> None:
    run = run_pytest(tmp_path, "time.sleep(60)", "2")
    assert run.returncode == 3, run.stdout + run.stderr
    assert "test_waiting.py::test_waits ran past 2 s" in run.stderr
    stacks = run.stderr.split("ran past", 1)[1]
    assert 'test_waiting.py", line 5 in test_waits' in stacks, stacks


def test_a_test_within_its_limit_passes(tmp_path: Path) -> None:
    run = run_pytest(tmp_path, "time.sleep(0.2)", "30")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout


def test_a_limit_that_is_not_a_number_is_named(tmp_path: Path) -> None:
    run = run_pytest(tmp_path, "pass", "five minutes")
    assert run.returncode != 0
    assert "COURSE_TEST_LIMIT_S='five minutes' is not a number" in run.stdout + run.stderr

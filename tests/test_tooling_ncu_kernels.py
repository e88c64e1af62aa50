"""``tools/ncu_kernels.sh`` refuses a malformed call with its usage, and says so in one line where Nsight Compute
is not installed (CI, this machine) instead of failing inside ncu."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "tools" / "ncu_kernels.sh"


def run(*args: str, path: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=path if path is not None else os.environ.get("PATH", ""))
    return subprocess.run(
        [shutil.which("bash"), str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=30
    )


def test_a_call_without_the_separator_gets_the_usage():
    done = run("/tmp/stem", "row_stats", "2", "python3", "x.py")
    assert done.returncode == 2 and "usage: tools/ncu_kernels.sh OUT_STEM 'REGEX' COUNT -- COMMAND" in done.stderr


def test_without_ncu_it_says_so_and_profiles_nothing(tmp_path):
    bare = tmp_path / "bin"  # a PATH with the shell's tools but no ncu (and no /opt/nvidia/nsight-compute here)
    bare.mkdir()
    for tool in ("dirname", "mkdir", "grep"):
        (bare / tool).symlink_to(shutil.which(tool))
    if any(Path("/opt/nvidia/nsight-compute").glob("*/ncu")) or Path("/usr/local/cuda/bin/ncu").exists():
        pytest.skip("Nsight Compute is installed here: the script finds it outside PATH")
    done = run(str(tmp_path / "out"), "row_stats", "2", "--", "true", path=str(bare))
    assert done.returncode == 3
    assert done.stderr.strip() == "ncu (Nsight Compute) is not on this machine: nothing profiled"
    assert not list(tmp_path.glob("out*"))

"""The launcher and the environment files agree with pyproject.toml."""

from __future__ import annotations

import os
import subprocess
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def pyproject_requirements(*extras: str) -> set[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    found = set(project["dependencies"])
    for extra in extras:
        found |= set(project["optional-dependencies"][extra])
    return {requirement.replace(" ", "") for requirement in found}


def environment_yml_pip_requirements() -> set[str]:
    lines = (REPO / "environment.yml").read_text().splitlines()
    start = lines.index("  - pip:")
    items = [line.strip()[2:] for line in lines[start + 1 :] if line.strip().startswith("- ")]
    return {item.replace(" ", "") for item in items if not item.startswith("-e ")}


def test_environment_yml_has_the_same_pins_as_pyproject() -> None:
    assert environment_yml_pip_requirements() == pyproject_requirements("gpu", "cuda", "course", "test")
    assert "  - python=3.12" in (REPO / "environment.yml").read_text().splitlines()


def test_course_script_is_executable_and_parses() -> None:
    for script in ("course", ".ci/run"):
        path = REPO / script
        assert os.access(path, os.X_OK), f"{script} is not executable (chmod +x {script})"
        subprocess.run(["bash", "-n", str(path)], check=True)


def test_course_script_rejects_unknown_commands_with_usage() -> None:
    done = subprocess.run([str(REPO / "course"), "nonsense"], capture_output=True, text=True)
    assert done.returncode == 1
    assert "unknown command 'nonsense'" in done.stderr and "./course lab" in done.stderr


def _course(*args: str, env: dict[str, str] | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(cwd / "course"), *args], capture_output=True, text=True, cwd=cwd, env={**os.environ, **(env or {})}
    )


def test_lab_serves_as_root_and_says_so() -> None:
    done = _course("lab", "--no-browser", env={"COURSE_DRY_RUN": "1", "COURSE_UID": "0"})
    command = done.stdout.splitlines()[-1].split()
    assert done.returncode == 0 and command.count("--allow-root") == 1
    assert "running as root (as in many containers): passing --allow-root" in done.stdout
    assert f"--notebook-dir={REPO / 'notebooks'}" in command and "--no-browser" in command  # no solutions/ in view
    done = _course("lab", "--instructor", env={"COURSE_DRY_RUN": "1", "COURSE_UID": "0"})
    command = done.stdout.splitlines()[-1].split()
    assert f"--notebook-dir={REPO}" in command and "--LabApp.default_url=/lab/tree/notebooks" in command
    assert "--instructor" not in command  # the launcher's own option, not JupyterLab's
    done = _course("lab", "--allow-root", env={"COURSE_DRY_RUN": "1", "COURSE_UID": "0"})
    assert done.stdout.splitlines()[-1].split().count("--allow-root") == 1  # not twice
    done = _course("lab", env={"COURSE_DRY_RUN": "1", "COURSE_UID": "1000"})
    assert "--allow-root" not in done.stdout and "root" not in done.stdout


def _sandbox(tmp_path: Path) -> Path:
    for name in ("course", "pyproject.toml", "compilers.txt"):
        (tmp_path / name).write_bytes((REPO / name).read_bytes())
    (tmp_path / "course").chmod(0o755)
    return tmp_path


def test_the_tests_spread_over_the_cores_unless_asked_otherwise() -> None:
    def command(*args: str, workers: str) -> str:
        done = _course("test", *args, env={"COURSE_DRY_RUN": "1", "COURSE_TEST_WORKERS": workers})
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert command("-k", "preflight", workers="2") == "python -m pytest -n 2 --dist loadfile -k preflight"
    assert command(workers="16").startswith("python -m pytest -n 4 --dist loadfile")  # at most four processes
    assert "-n" not in command("-x", workers="1").split()
    assert command("-n", "3", workers="2") == "python -m pytest -n 3"  # the caller's choice stands
    assert command("-p", "no:xdist", workers="2") == "python -m pytest -p no:xdist"


def test_an_interpreter_that_does_not_run_is_named_in_one_line(tmp_path: Path) -> None:
    box = _sandbox(tmp_path)
    shim = box / "python3.9"
    shim.write_text("#!/bin/sh\necho 'pyenv: python3.9: command not found' >&2\nexit 127\n")
    shim.chmod(0o755)
    done = _course("test", env={"PYTHON": str(shim)}, cwd=box)
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"course: error: {shim} does not run (pyenv: python3.9: command not found): set "
        "PYTHON= to a Python 3.11 or newer"
    )
    old = box / "old"
    old.write_text('#!/bin/sh\ncase "$2" in *exit*) exit 1;; *) echo 3.9;; esac\n')
    old.chmod(0o755)
    done = _course("test", env={"PYTHON": str(old)}, cwd=box)
    assert "is Python 3.9, too old: the course needs 3.11 or newer" in done.stderr


def test_python_is_used_for_a_new_environment_or_the_launcher_says_why_not(tmp_path: Path) -> None:
    box = _sandbox(tmp_path)
    bin_dir = box / ".venv-test" / "bin"
    bin_dir.mkdir(parents=True)
    fake = bin_dir / "python"
    fake.write_text('#!/bin/sh\ncase "$1" in -c) echo 3.11;; *) echo "ran: $*";; esac\n')
    fake.chmod(0o755)
    # what the stamp records: the checksum of pyproject.toml and compilers.txt together
    both = (box / "pyproject.toml").read_bytes() + (box / "compilers.txt").read_bytes()
    cksum = subprocess.run(["cksum"], input=both, capture_output=True).stdout.split()[0].decode()
    (box / ".venv-test" / ".course-stamp").write_text(f"{cksum} test\n")
    done = _course("test", "-q", env={"PYTHON": "/usr/bin/python3", "COURSE_TEST_WORKERS": "1"}, cwd=box)
    assert "PYTHON=/usr/bin/python3 is not used: .venv-test exists (Python 3.11); delete .venv-test" in done.stdout
    assert "ran: -m pytest -q" in done.stdout
    done = _course("test", "-q", cwd=box)
    assert "is not used" not in done.stdout


def test_every_environment_gets_the_gpu_images_compilers_without_their_dependencies() -> None:
    """NVRTC, nvJitLink and NVVM change the machine code: one version for all three, the proofs' image's, pinned in
    compilers.txt and installed after the extras (pyproject.toml cannot pin them beside cuda-cccl 13.3.5)."""
    pins = [line for line in (REPO / "compilers.txt").read_text().splitlines() if line and not line.startswith("#")]
    names = {pin.split("==")[0] for pin in pins}
    versions = {pin.split("==")[1] for pin in pins}
    assert names == {"nvidia-cuda-nvrtc", "nvidia-nvjitlink", "nvidia-nvvm"} and len(pins) == 3
    assert len(versions) == 1, f"the compilers come from one toolkit: {pins}"
    launcher = (REPO / "course").read_text()
    assert "--no-deps -r compilers.txt" in launcher
    assert "cat pyproject.toml compilers.txt | cksum" in launcher  # a new pin installs again
    assert "-r $root/compilers.txt" in (REPO / "tools" / "cpu_bundle.sh").read_text()

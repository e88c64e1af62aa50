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
    assert environment_yml_pip_requirements() == pyproject_requirements("gpu", "course", "test")
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

"""What the README names exists: modules it runs or imports, files and reports it cites, commands it shows."""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

import pytest

from utilities.notebooks import extract_definition

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _expand(path: str) -> list[str]:
    """``a.{json,md}`` -> ``a.json``, ``a.md``."""
    match = re.search(r"\{([^}]+)\}", path)
    if not match:
        return [path]
    return [path[: match.start()] + part + path[match.end() :] for part in match.group(1).split(",")]


def test_modules_it_runs_or_names_exist():
    modules = set(re.findall(r"python -m ([\w.]+)", README))
    modules |= set(re.findall(r"`(utilities(?:\.\w+)+)`", README))
    assert "utilities.machinery.buildcache" in modules and "utilities.workshop" in modules
    for name in sorted(modules):
        assert importlib.util.find_spec(name) is not None, f"README names {name}, which does not exist"


def test_files_and_reports_it_cites_exist():
    paths = set(
        re.findall(r"`((?:utilities|tools|results|tests|instructor-notes|solutions|notebooks)/[^`\s]+)`", README)
    )
    paths |= set(re.findall(r"\((images/[^)]+)\)", README))
    paths = {p.split("::")[0] for p in paths if "<" not in p and "*" not in p}
    assert any(p.startswith("results/") for p in paths)
    for path in sorted(paths):
        for one in _expand(path):
            assert (ROOT / one).exists(), f"README cites {one}, which is not in the repository"


def test_source_markers_it_shows_resolve():
    refs = re.findall(r"# SOURCE: (\S+)::(\w+)", README)
    assert refs
    for path, name in refs:
        assert f"def {name}" in extract_definition((ROOT / path).read_text(), name, path)


def test_the_preflight_import_it_shows_works():
    assert "from utilities.preflight import preflight" in README
    assert callable(importlib.import_module("utilities.preflight").preflight)


@pytest.mark.parametrize("command", sorted(set(re.findall(r"\./course (\w[\w-]*)", README))))
def test_launcher_commands_it_shows_exist(command):
    launcher = (ROOT / "course").read_text()
    assert re.search(rf"^\s*{re.escape(command)}\)", launcher, re.M), f"./course has no '{command}' command"

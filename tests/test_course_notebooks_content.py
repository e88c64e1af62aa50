"""Static checks of every notebook: code that parses, imports that resolve, one preflight, reveal cells.

GPU notebooks cannot run here; these checks catch, on any machine, the mistakes that would otherwise surface
only minutes into a GPU run (a name moved out of a module, a skeleton that does not parse).
"""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from utilities.checker import PLACEHOLDER

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "solutions").glob("*.ipynb")) + sorted((ROOT / "notebooks").glob("*.ipynb"))
IDS = [f"{p.parent.name}/{p.stem}" for p in NOTEBOOKS]


def code_cells(path: Path) -> list[str]:
    return [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]


def top_level_names(module_path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(module_path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_every_code_cell_parses(path):
    for number, source in enumerate(code_cells(path)):
        try:
            ast.parse(source)
        except SyntaxError as error:
            pytest.fail(f"{path.name}, code cell {number}: {error}")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_imports_from_utilities_resolve(path):
    for source in code_cells(path):
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("utilities"):
                base = ROOT / Path(*node.module.split("."))
                module = base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"
                assert module.exists(), f"{path.name}: no module {node.module}"
                submodules = {p.stem for p in base.glob("*.py")} | {p.parent.name for p in base.glob("*/__init__.py")}
                defined = top_level_names(module) | submodules
                missing = [a.name for a in node.names if a.name not in defined]
                assert not missing, f"{path.name}: {node.module} has no {missing}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_gpu_notebooks_start_with_a_preflight(path):
    nb = nbformat.read(path, as_version=4)
    if nb.metadata.get("course", {}).get("gpu", True):
        assert "preflight()" in code_cells(path)[0], f"{path.name}: the first code cell must call preflight()"


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if p.parent.name == "notebooks"], ids=lambda p: p.stem)
def test_every_exercise_cell_is_followed_by_a_reveal_cell(path):
    cells = nbformat.read(path, as_version=4).cells
    for index, cell in enumerate(cells):
        prediction = "prediction" in cell.metadata.get("tags", [])  # the attendee's numbers, nothing to reveal
        if cell.cell_type == "code" and PLACEHOLDER in cell.source and not prediction:
            following = cells[index + 1] if index + 1 < len(cells) else None
            assert following is not None and "reveal" in following.metadata.get("tags", []), (
                f"{path.name}: cell {index} has an exercise but no reveal cell after it"
            )


@pytest.mark.skipif(importlib.util.find_spec("ruff") is None, reason="ruff is not installed (it is in the test extra)")
def test_no_undefined_names_in_notebooks():
    paths = [str(p) for p in NOTEBOOKS]
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--isolated", "--select", "F821,F811,F823", *paths],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if p.parent.name == "notebooks"], ids=lambda p: p.stem)
def test_prediction_cells_leave_the_numbers_to_the_attendee(path):
    """A cell tagged ``prediction`` sets its variables to None in the exercise, and a later cell reads them."""
    cells = nbformat.read(path, as_version=4).cells
    for index, cell in enumerate(cells):
        if "prediction" not in cell.metadata.get("tags", []):
            continue
        names = re.findall(r"^(\w+) = ", cell.source, re.M)
        assert names, f"{path.name}: prediction cell {index} assigns nothing"
        for name in names:
            assert re.search(rf"^{name} = .*None", cell.source, re.M), f"{path.name}: {name} is filled in"
            later = "\n".join(c.source for c in cells[index + 1 :] if c.cell_type == "code")
            assert re.search(rf"\b{name}\b", later), f"{path.name}: nothing reads {name}"

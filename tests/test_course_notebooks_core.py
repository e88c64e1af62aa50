"""The core path runs without its stretch: stretch sections are marked, and no core cell needs one of their names.

A core-only run (``python -m utilities.workshop --core``) skips every cell of a stretch section (the build marks them
``"course": {"stretch": true}``). Statically, for every notebook (GPU ones too): each name a core cell reads must be
bound, last before it, by a core cell, or the core run reads something else, or nothing (a NameError), where the
full run reads the stretch cell's value. The CPU notebooks run core-only to the end in tests/test_tooling_workshop.py.
"""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import nbformat
import pytest

from utilities.notebooks import is_stretch, sections

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "solutions").glob("*.ipynb")) + sorted((ROOT / "notebooks").glob("*.ipynb"))
IDS = [f"{p.parent.name}/{p.stem}" for p in NOTEBOOKS]
IPYTHON_NAMES = {"get_ipython", "display", "In", "Out", "exit", "quit"}


def bound(tree: ast.AST) -> set[str]:
    """Every name the cell binds anywhere: assignments, loop and with targets, imports, definitions, arguments."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            names.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names


def read(tree: ast.AST) -> set[str]:
    """The names the cell reads and does not bind itself (builtins left out)."""
    loads = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
    return loads - bound(tree) - set(dir(builtins)) - IPYTHON_NAMES


def stretch_reads(cells: list[tuple[bool, str]]) -> list[str]:
    """For code cells ``(is_stretch, source)`` in order: every core cell's read whose last binding before it is in a
    stretch cell, one line each."""
    trees = [(stretch, ast.parse(source)) for stretch, source in cells]
    problems = []
    for index, (stretch, tree) in enumerate(trees):
        if stretch:
            continue
        for name in sorted(read(tree)):
            binders = [j for j in range(index) if name in bound(trees[j][1])]
            if binders and trees[binders[-1]][0]:
                problems.append(f"code cell {index} reads {name!r}, last bound by stretch code cell {binders[-1]}")
    return problems


def test_the_scan_sees_a_name_only_a_stretch_cell_binds() -> None:
    cells = [
        (False, "import numpy as np\nt = {}"),
        (True, "ft = np.ones(3)\nt = 1"),
        (False, "def f(x):\n    return x + ft\nprint(f(t), np.pi)"),
        (False, "t = 2\nprint(t, [i for i in range(3)])"),
    ]
    assert stretch_reads(cells) == [
        "code cell 2 reads 'ft', last bound by stretch code cell 1",
        "code cell 2 reads 't', last bound by stretch code cell 1",
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_no_core_cell_reads_a_name_a_stretch_cell_binds(path: Path) -> None:
    problems = stretch_reads(sections(path, "code"))
    assert not problems, f"{path.relative_to(ROOT)} fails when its stretch sections are skipped:\n" + "\n".join(
        problems
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_stretch_sections_are_marked_from_their_headings(path: Path) -> None:
    """Every cell from a ``## ... Stretch`` heading to the next level-2 heading is marked, and no other."""
    stretch, wrong = False, []
    for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
        if cell.cell_type == "markdown" and cell.source.startswith("## "):
            title = cell.source.split("\n")[0][3:]
            stretch = title.split(". ", 1)[-1].startswith("Stretch")
        if is_stretch(cell) != stretch:
            wrong.append(index)
    assert not wrong, f"{path.name}: cells {wrong} are marked wrongly (rebuild: python -m utilities.notebooks build)"

"""The exercise notebooks are generated from the solutions, and the generator does what the README says."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from hypothesis import given
from hypothesis import strategies as st

from utilities import notebooks
from utilities.notebooks import NotebookBuildError, build, check, strip_code, strip_markdown

REPO = Path(__file__).resolve().parent.parent

SOLUTION_CELL = """\
def bounds(d, S):
    # TODO (about 2 lines): the loop bounds of diagonal d
    # SKELETON: s_lo, s_hi = 0, 0
    # BEGIN SOLUTION
    s_lo = max(0, d - (S - 1))
    s_hi = min(d, S - 1)
    # END SOLUTION
    return s_lo, s_hi"""

EXERCISE_CELL = """\
def bounds(d, S):
    # TODO (about 2 lines): the loop bounds of diagonal d
    s_lo, s_hi = 0, 0  # placeholder: your code replaces this line
    return s_lo, s_hi"""

PLACEHOLDER_TAIL = "  # placeholder: your code replaces this line"

MODULE = '''\
"""A module whose kernels the notebook shows."""

import functools

S = 4


@functools.lru_cache
@functools.wraps(print)
def scale_kernel(x):
    # TODO (about 1 line): double x
    # SKELETON:     return None
    y = 2 * x
    # BEGIN SOLUTION
    return y
    # END SOLUTION


class Tile:
    rows: int = 8
'''


def make_repo(tmp_path: Path, cells: list[nbformat.NotebookNode], stem: str = "1_demo", **metadata) -> Path:
    """A temporary repository root holding one solution notebook."""
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": metadata, "cells": cells}  # as given, not validated
    for folder in ("solutions", "notebooks"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
    (tmp_path / "solutions" / f"{stem}.ipynb").write_text(json.dumps(nb))
    return tmp_path


def read(root: Path, folder: str, stem: str = "1_demo") -> nbformat.NotebookNode:
    return nbformat.read(root / folder / f"{stem}.ipynb", as_version=4)


def code(source: str, **metadata) -> nbformat.NotebookNode:
    return nbformat.v4.new_code_cell(source, metadata=metadata)


# --- the repository itself --------------------------------------------------------------------------------


def test_repository_notebooks_are_in_sync() -> None:
    problems = check(REPO)
    assert not problems, "\n".join(problems)


def test_repository_notebooks_have_no_outputs() -> None:
    paths = sorted((REPO / "solutions").glob("*.ipynb")) + sorted((REPO / "notebooks").glob("*.ipynb"))
    dirty = []
    for path in paths:
        cells = nbformat.read(path, as_version=4).cells
        numbers = [i for i, cell in enumerate(cells) if cell.get("outputs") or cell.get("execution_count") is not None]
        if numbers:
            dirty.append(f"{path.relative_to(REPO)}: cells {numbers} carry outputs or execution counts")
    assert not dirty, "\n".join(dirty) + "\nclear them with: python -m utilities.notebooks build"


# --- code cells --------------------------------------------------------------------------------------------


def test_solution_region_removed_skeleton_inserted_todo_kept() -> None:
    assert strip_code(SOLUTION_CELL) == (EXERCISE_CELL, True)


def test_skeleton_keeps_its_own_indentation_and_may_be_empty() -> None:
    source = "if x:\n    # SKELETON:     pass\n# SKELETON:\n# SKELETON: y = 1"
    assert strip_code(source) == (f"if x:\n        pass{PLACEHOLDER_TAIL}\n\ny = 1{PLACEHOLDER_TAIL}", False)


def test_several_regions_in_one_cell() -> None:
    source = "a = 1\n# BEGIN SOLUTION\nb = 2\n# END SOLUTION\nc = 3\n  # BEGIN SOLUTION\n  d = 4\n  # END SOLUTION"
    # a region without skeleton lines leaves a `pass` placeholder, so that a checker sees the exercise untouched
    assert strip_code(source) == (f"a = 1\npass{PLACEHOLDER_TAIL}\nc = 3\n  pass{PLACEHOLDER_TAIL}", True)


def test_cell_without_markers_is_unchanged() -> None:
    assert strip_code("x = 1\n# an ordinary comment\n") == ("x = 1\n# an ordinary comment\n", False)


@given(st.lists(st.text(alphabet="abcxyz =+-*()#:_ 0123456789\t", max_size=40), max_size=12))
def test_marker_free_source_is_unchanged(lines: list[str]) -> None:
    source = "\n".join(line for line in lines if "SOLUTION" not in line.upper() and "# SKELETON:" not in line)
    assert strip_code(source) == (source, False)


@pytest.mark.parametrize(
    ("source", "line", "words"),
    [
        ("x = 1\n# BEGIN SOLUTION\ny = 2", 2, "never closed"),
        ("x = 1\n# END SOLUTION", 2, "without a BEGIN"),
        ("# BEGIN SOLUTION\n# BEGIN SOLUTION\n# END SOLUTION\n# END SOLUTION", 2, "inside the region opened at line 1"),
        ("# BEGIN SOLUTIONS\n", 1, "malformed"),
        ("#begin solution\n", 1, "malformed"),
    ],
)
def test_unbalanced_or_malformed_markers_are_errors(source: str, line: int, words: str) -> None:
    with pytest.raises(NotebookBuildError, match=f"here, line {line}: .*{words}"):
        strip_code(source, "here")


def test_build_error_names_notebook_cell_and_line(tmp_path: Path) -> None:
    cells = [code("ok = 1"), code("x = 1\n\n# BEGIN SOLUTION\ny = 2")]
    cells[1].id = "broken"
    root = make_repo(tmp_path, cells, stem="2_bad")
    with pytest.raises(
        NotebookBuildError, match=r"solutions/2_bad\.ipynb, cell 1 \(id broken\), line 3: .*never closed"
    ):
        build(root)
    assert check(root)[0].startswith("build error: solutions/2_bad.ipynb, cell 1")
    assert notebooks.main(["check", "--root", str(root)]) == 1
    assert notebooks.main(["build", "--root", str(root)]) == 1


# --- markdown cells ----------------------------------------------------------------------------------------


def test_markdown_regions_removed_whole_lines_and_inline() -> None:
    source = (
        "**Question:** why?\n<!-- BEGIN SOLUTION -->\nBecause.\n\nTwice.\n<!-- END SOLUTION -->\n"
        "Answer: <!-- BEGIN SOLUTION -->42<!-- END SOLUTION --> units."
    )
    assert strip_markdown(source) == "**Question:** why?\nAnswer:  units."


@pytest.mark.parametrize(
    "source",
    ["<!-- BEGIN SOLUTION -->\nx", "x <!-- END SOLUTION -->", "<!-- BEGIN SOLUTION --><!-- BEGIN SOLUTION -->"],
)
def test_unbalanced_markdown_markers_are_errors(source: str) -> None:
    with pytest.raises(NotebookBuildError, match="here, line"):
        strip_markdown(source, "here")


# --- whole notebooks ---------------------------------------------------------------------------------------


def demo_cells() -> list[nbformat.NotebookNode]:
    cells = [
        nbformat.v4.new_markdown_cell("# Demo\nQ: why? <!-- BEGIN SOLUTION -->because<!-- END SOLUTION -->"),
        code("import numpy as np"),
        code(SOLUTION_CELL),
        code("check = 1", tags=["exercise-raises", "other"]),
        code("# BEGIN SOLUTION\nz = 3\n# END SOLUTION"),
    ]
    for number, cell in enumerate(cells):
        cell.id = f"c{number}"
    cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text="hi\n")]
    cells[1].execution_count = 7
    cells[1].metadata["execution"] = {"iopub.status.busy": "2026-11-22T10:00:00"}
    return cells


def test_build_writes_exercise_with_reveal_cells_after_solution_cells(tmp_path: Path) -> None:
    root = make_repo(tmp_path, demo_cells(), course={"gpu": False})
    build(root)
    exercise = read(root, "notebooks")
    ids = [cell.id for cell in exercise.cells]
    assert ids == ["c0", "c1", "c2", "c2-reveal", "c3", "c4", "c4-reveal"]
    assert exercise.cells[0].source == "# Demo\nQ: why? "
    assert exercise.cells[2].source == EXERCISE_CELL
    assert exercise.cells[5].source == f"pass{PLACEHOLDER_TAIL}"
    for index in (3, 6):
        reveal_cell = exercise.cells[index]
        assert reveal_cell.cell_type == "code"
        assert reveal_cell.metadata == {"jupyter": {"source_hidden": True}, "tags": ["reveal"]}
        assert f'reveal("1_demo", "{ids[index - 1]}")' in reveal_cell.source
    assert exercise.cells[4].metadata.tags == ["other", "raises-exception"]
    assert exercise.metadata.course == {"gpu": False, "exercise_of": "solutions/1_demo.ipynb"}


def test_build_strips_outputs_from_both_notebooks(tmp_path: Path) -> None:
    root = make_repo(tmp_path, demo_cells())
    build(root)
    for folder in ("solutions", "notebooks"):
        for cell in read(root, folder).cells:
            assert cell.get("outputs", []) == [] and cell.get("execution_count") is None
            assert "execution" not in cell.metadata
    assert read(root, "solutions").cells[2].source == SOLUTION_CELL


def test_build_is_deterministic_and_check_agrees(tmp_path: Path) -> None:
    cells = demo_cells()
    for cell in cells:
        del cell["id"]  # ids that build must invent, the same way every time
    root = make_repo(tmp_path, cells)
    assert sorted(check(root)) == [
        "notebooks/1_demo.ipynb: missing",
        "solutions/1_demo.ipynb: stale (outputs, ids, stretch marks or SOURCE cells)",
    ]
    assert build(root) == ["wrote solutions/1_demo.ipynb", "wrote notebooks/1_demo.ipynb"]
    first = {folder: (root / folder / "1_demo.ipynb").read_bytes() for folder in ("solutions", "notebooks")}
    assert build(root) == [] and check(root) == []
    assert {folder: (root / folder / "1_demo.ipynb").read_bytes() for folder in first} == first

    other = make_repo(tmp_path / "again", cells)
    build(other)
    assert (other / "notebooks" / "1_demo.ipynb").read_bytes() == first["notebooks"]
    assert all(len(cell.id) == 8 for cell in read(root, "solutions").cells)
    assert first["notebooks"].endswith(b"}\n")


def test_check_lists_edited_exercise_and_orphans(tmp_path: Path) -> None:
    root = make_repo(tmp_path, demo_cells())
    build(root)
    exercise = root / "notebooks" / "1_demo.ipynb"
    exercise.write_text(exercise.read_text().replace("s_lo, s_hi = 0, 0", "s_lo, s_hi = 1, 1"))
    (root / "notebooks" / "9_gone.ipynb").write_text(nbformat.writes(nbformat.v4.new_notebook()))
    assert check(root) == ["notebooks/1_demo.ipynb: out of date", "notebooks/9_gone.ipynb: has no solution notebook"]
    assert notebooks.main(["check", "--root", str(root)]) == 1
    assert notebooks.main(["build", "--root", str(root)]) == 0
    assert check(root) == [] and not (root / "notebooks" / "9_gone.ipynb").exists()


def test_duplicate_cell_ids_are_an_error(tmp_path: Path) -> None:
    cells = [code("a = 1"), code("b = 2")]
    cells[0].id = cells[1].id = "same"
    with pytest.raises(NotebookBuildError, match="duplicate cell id"):
        build(make_repo(tmp_path, cells))


# --- cells sourced from modules ---------------------------------------------------------------------------


def source_repo(tmp_path: Path, header: str) -> Path:
    (tmp_path / "pkg").mkdir(parents=True, exist_ok=True)
    (tmp_path / "pkg" / "kernels.py").write_text(MODULE)
    cell = code(header + "\ndef scale_kernel(x):\n    return 'stale'")
    cell.id = "src"
    return make_repo(tmp_path, [cell])


def test_source_cell_refreshed_from_module_with_decorators_and_markers(tmp_path: Path) -> None:
    root = source_repo(tmp_path, "# SOURCE: pkg/kernels.py::scale_kernel")
    assert "solutions/1_demo.ipynb: stale (outputs, ids, stretch marks or SOURCE cells)" in check(root)
    build(root)
    solution = read(root, "solutions").cells[0].source
    body = MODULE[MODULE.index("@functools.lru_cache") : MODULE.index("\n\n\nclass Tile")]
    assert solution == "# SOURCE: pkg/kernels.py::scale_kernel\n" + body
    exercise = read(root, "notebooks")
    assert exercise.cells[0].source == (
        "@functools.lru_cache\n@functools.wraps(print)\ndef scale_kernel(x):\n"
        f"    # TODO (about 1 line): double x\n        return None{PLACEHOLDER_TAIL}\n"
        f"    y = 2 * x\n    pass{PLACEHOLDER_TAIL}"
    )
    assert exercise.cells[1].metadata.tags == ["reveal"]
    assert check(root) == []

    (root / "pkg" / "kernels.py").write_text(MODULE.replace("2 * x", "x + x"))
    assert check(root) == [
        "solutions/1_demo.ipynb: stale (outputs, ids, stretch marks or SOURCE cells)",
        "notebooks/1_demo.ipynb: out of date",
    ]


def test_several_source_lines_join_definitions(tmp_path: Path) -> None:
    root = source_repo(tmp_path, "# SOURCE: pkg/kernels.py::S\n# SOURCE: pkg/kernels.py::Tile")
    build(root)
    source = read(root, "solutions").cells[0].source
    assert (
        source
        == "# SOURCE: pkg/kernels.py::S\n# SOURCE: pkg/kernels.py::Tile\nS = 4\n\n\nclass Tile:\n    rows: int = 8"
    )


@pytest.mark.parametrize(
    ("header", "words"),
    [
        ("# SOURCE: pkg/kernels.py::missing", "no top-level function, class or assignment named 'missing'"),
        ("# SOURCE: pkg/nowhere.py::scale_kernel", "no module pkg/nowhere.py"),
        ("# SOURCE: ../outside.py::scale_kernel", "no module ../outside.py"),
        ("# SOURCE: pkg/kernels.py", "malformed line"),
    ],
)
def test_source_errors_name_the_cell(tmp_path: Path, header: str, words: str) -> None:
    root = source_repo(tmp_path, header)
    with pytest.raises(NotebookBuildError, match=r"solutions/1_demo\.ipynb, cell 0 \(id src\): .*" + words):
        build(root)


# --- reveal ------------------------------------------------------------------------------------------------


def test_reveal_prints_the_solution_cell_and_leaves_the_notebook_alone(tmp_path, monkeypatch, capsys) -> None:
    root = make_repo(tmp_path, demo_cells())
    build(root)
    monkeypatch.setattr(notebooks, "REPO_ROOT", root)
    before = (root / "notebooks" / "1_demo.ipynb").read_bytes()
    reveal_source = read(root, "notebooks").cells[3].source
    exec(compile(reveal_source, "reveal-cell", "exec"), {})
    printed = capsys.readouterr().out
    assert printed.startswith("Solution (solutions/1_demo.ipynb):")
    assert SOLUTION_CELL in printed
    assert (root / "notebooks" / "1_demo.ipynb").read_bytes() == before


def test_reveal_of_unknown_cell_says_how_to_fix(tmp_path, monkeypatch) -> None:
    root = make_repo(tmp_path, demo_cells())
    monkeypatch.setattr(notebooks, "REPO_ROOT", root)
    with pytest.raises(KeyError, match="utilities.notebooks build"):
        notebooks.reveal("1_demo", "nope")


# --- stretch sections and the day's clock --------------------------------------------------------------------


def test_stretch_sections_are_marked_in_both_notebooks_and_their_reveal_cells(tmp_path: Path) -> None:
    cells = [
        nbformat.v4.new_markdown_cell("## 1. Core"),
        code("a = 1"),
        nbformat.v4.new_markdown_cell("## 2. Stretch: a lever"),
        code("# BEGIN SOLUTION\nb = 2\n# END SOLUTION"),
        nbformat.v4.new_markdown_cell("## Takeaways"),
        code("print(a)", course={"stretch": True}),  # a stale mark: build removes it
    ]
    root = make_repo(tmp_path, cells)
    build(root)
    marks = [notebooks.is_stretch(c) for c in read(root, "solutions").cells]
    assert marks == [False, False, True, True, False, False]
    exercise = read(root, "notebooks").cells
    assert [notebooks.is_stretch(c) for c in exercise] == [False, False, True, True, True, False, False]
    assert "reveal" in exercise[4].metadata.tags
    kept, _ = notebooks.filled_notebook("1_demo", root, core=True)
    assert [c.source for c in kept.cells if c.cell_type == "code"] == ["a = 1", "print(a)"]
    assert len(notebooks.filled_notebook("1_demo", root)[0].cells) == 6  # reveal cell out, stretch cells in


def test_a_stretch_heading_inside_a_cell_stops_the_build(tmp_path: Path) -> None:
    cells = [nbformat.v4.new_markdown_cell("Text of section 1.\n\n## 2. Stretch: a lever"), code("a = 1")]
    with pytest.raises(NotebookBuildError, match="stretch section begins or ends inside the cell"):
        build(make_repo(tmp_path, cells))


def test_a_clock_line_is_parsed_and_a_missing_one_named() -> None:
    line = "# 2a. Title\n\n*Core path: 25 min hands-on, sections 1-3. Stretch: 10 min, section 4 (a\nlever).* More."
    want = notebooks.Clock("2a", True, 25, "sections 1-3", 10, "section 4 (a lever)")
    assert notebooks.parse_clock("2a", line) == want
    assert notebooks.parse_clock("4a", "*Optional: 40 min hands-on, not on the core path.*") == notebooks.Clock(
        "4a", False, 40, "not on the core path"
    )
    with pytest.raises(NotebookBuildError, match="0 clock lines"):
        notebooks.parse_clock("3a", "*Core path, about 40 minutes.*")


def test_every_first_cell_holds_a_clock_and_the_readme_agenda_is_made_of_them() -> None:
    clocks = notebooks.clocks(REPO)
    assert sorted(clocks) == sorted(p.stem for p in (REPO / "solutions").glob("*.ipynb"))
    assert sorted(stem for stem, c in clocks.items() if c.core_path) == sorted(notebooks.DAY)
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    agenda = notebooks.agenda(REPO)
    assert notebooks.with_agenda(readme, agenda) == readme, "rebuild: python -m utilities.notebooks build"
    total = sum(clocks[stem].minutes for stem in notebooks.DAY)
    assert total <= 270, f"the core path takes {total} min: more than the day's 4 h 30 min"
    hours, minutes = divmod(total, 60)
    assert f"| | **core path** | **{hours} h {minutes} min** | | |" in readme

"""The workshop run-through (``utilities.workshop``): filled exercises, edits, and what a run records."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import nbformat
import pytest

from utilities import notebooks, workshop
from utilities.notebooks import REPO_ROOT

EXERCISE_STEMS = sorted(p.stem for p in (REPO_ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("stem", EXERCISE_STEMS)
def test_every_exercise_cell_gets_its_solution_and_an_edit_that_compiles(stem):
    cells = notebooks.filled_cells(stem)
    exercises = [source for _, source, is_exercise in cells if is_exercise]
    assert exercises, f"{stem} has no exercise cell"
    runs = notebooks.edit_runs(cells)
    kernels = [source for source in exercises if not notebooks.is_prediction(source)]
    assert len(runs) == len(kernels) and kernels, f"{stem}: an edit for every exercise but its predictions"
    for run, source in zip(runs, kernels, strict=True):
        assert notebooks.EDIT_LINE in run[0] and run[0].replace(notebooks.EDIT_LINE, "").split() == source.split()
        ast.parse(run[0])  # the edit lands inside the region, at its indentation


def test_an_edit_runs_its_check_the_first_later_cell_that_uses_what_it_defines():
    def region(code: str) -> str:
        return f"# BEGIN SOLUTION\n{code}\n# END SOLUTION"

    prediction = "# Your prediction: how fast?\n" + region("guess = 2")
    cells = [
        ("a", region("def make_a(): pass"), True),
        ("b", region("def make_b(): pass"), True),
        ("c", "check(make_b)", False),
        ("d", prediction, True),
        ("e", "check(make_a, guess)", False),
        ("f", region("x = 1"), True),
        ("g", "print('no use of x')", False),
        ("h", region("y = 1"), True),
        ("i", region("z = 1"), True),
        ("j", region("def make_j(): pass\ncheck(make_j)"), True),
        ("k", "# Your prediction: bits?\nbits = make_j()", False),  # a tagged prediction: never its check
    ]
    runs = notebooks.edit_runs(cells)
    first, second, third, fourth, fifth, sixth = (notebooks.edited(cells[i][1]) for i in (0, 1, 5, 7, 8, 9))
    assert runs == [
        [first, "check(make_a, guess)"],
        [second, "check(make_b)"],
        [third, "print('no use of x')"],
        [fourth],
        [fifth],
        [sixth],
    ]
    assert notebooks.defined_names("def f(): pass\nclass C: pass\na, (b, c) = 1, (2, 3)\nd: int = 4") == set("fCabcd")
    assert notebooks.defined_names("def broken(:") == set()


@pytest.mark.parametrize("stem", EXERCISE_STEMS)
def test_prediction_cells_are_told_apart_by_their_first_comment(stem):
    """A prediction is followed by a measurement, not a check: the run-through does not count it as one. Every cell
    tagged a prediction, and every one that asks for it in its first comment, is one."""
    exercise = nbformat.read(REPO_ROOT / "notebooks" / f"{stem}.ipynb", as_version=4)
    for cell in exercise.cells:
        if cell.cell_type == "code" and notebooks.PREDICTION_TAG in cell.metadata.get("tags", []):
            assert notebooks.is_prediction(cell.source), f"{stem} {cell.id}: a prediction cell without the comment"
    assert notebooks.is_prediction("# SOURCE: utilities/x.py::f\n\n# Your prediction, before the sweep: F?\nf = 8")
    assert not notebooks.is_prediction("# SOURCE: utilities/x.py::f\ndef f():\n    # your prediction is here\n")


def _tiny_course(tmp_path: Path, cells: list[str], gpu: bool = False) -> Path:
    for folder in ("solutions", "notebooks"):
        (tmp_path / folder).mkdir()
        nb = nbformat.v4.new_notebook(metadata={"course": {"gpu": gpu}})
        nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
        for index, cell in enumerate(nb.cells):
            cell.id = f"cell{index}"
        nbformat.write(nb, tmp_path / folder / "9_tiny.ipynb")
    return tmp_path


def test_a_run_records_builds_edits_and_the_first_error(tmp_path):
    exercise = "def f():\n    # BEGIN SOLUTION\n    return 1\n    # END SOLUTION\n"
    build = (
        "import time\nfrom utilities.machinery.buildcache.progress import BuildProgress\n"
        "with BuildProgress('fake_kernel', after=60):\n    time.sleep(0.3)"
    )
    root = _tiny_course(tmp_path, [exercise, "assert f() == 1", build])
    entry = workshop.run_notebook("9_tiny", root=root)
    assert entry.error == ""
    assert [name for name, _ in entry.builds] == ["fake_kernel"]
    assert entry.course_links == [] and entry.course_link_keys == []
    assert 0.3 <= entry.longest_build_s <= entry.build_wait_s + 0.05 and entry.wall_s >= 0.3
    assert entry.longest_check_after_edit_s >= 0.0
    assert len(entry.edit_seconds) == len(entry.edit_loads) == 1 and entry.cores > 0  # one edit, its load beside it
    assert max(entry.edit_seconds) == pytest.approx(entry.longest_check_after_edit_s, abs=0.05)
    assert entry.edit_build_stages_s == {}  # the build cache timed no build work (the build was a stand-in)
    [lines] = entry.edit_lines  # no check printed a line: each cell's end time only
    assert lines and all(line.startswith("cell ended at ") for line in lines)
    assert workshop.stage_difference({"linking": 2.0}, {"linking": 5.5, "generating": 1.0}) == {
        "linking": 3.5,
        "generating": 1.0,
    }
    assert workshop.stage_difference({"linking": 2.0}, {"linking": 2.0}) == {}
    quiet = workshop.run_notebook("9_tiny", root=root, edits=False)
    assert quiet.error == "" and quiet.edit_seconds == [] and quiet.longest_check_after_edit_s == 0.0

    (tmp_path / "other").mkdir()
    broken = _tiny_course(tmp_path / "other", [exercise, "assert f() == 2, 'wrong'"])
    entry = workshop.run_notebook("9_tiny", root=broken)
    assert entry.error.startswith("code cell 1: AssertionError: wrong")


def test_a_figure_shown_as_text_is_an_error_and_a_failure_keeps_its_whole_traceback(tmp_path):
    exercise = "def f():\n    # BEGIN SOLUTION\n    return 1\n    # END SOLUTION\n"
    bare = "from matplotlib.figure import Figure\nfig = Figure()\nfig.add_subplot().plot([1, 2])\nfig"
    entry = workshop.run_notebook("9_tiny", root=_tiny_course(tmp_path, [exercise, "assert f() == 1", bare]))
    assert entry.error.startswith("a figure shows as text, not as an image: code cell 2: <Figure size")
    assert entry.longest_check_after_edit_s == 0.0  # no edits after a failed run

    deep = "def g(n):\n    return 1 / n if n == 0 else g(n - 1)\n"
    (tmp_path / "deep").mkdir()
    root = _tiny_course(tmp_path / "deep", [exercise, deep + "g(12)"])
    entry = workshop.run_notebook("9_tiny", root=root)
    assert entry.error.startswith("code cell 1: ZeroDivisionError")
    assert entry.traceback.count("in g(n)") == 13  # every frame, where the short error keeps the last few


def test_a_kernel_that_dies_gives_an_entry_that_says_so(tmp_path):
    exercise = "def f():\n    # BEGIN SOLUTION\n    return 1\n    # END SOLUTION\n"
    entry = workshop.run_notebook("9_tiny", root=_tiny_course(tmp_path, [exercise, "import os\nos._exit(3)"]))
    assert entry.error.startswith("the kernel stopped: DeadKernelError")


def test_the_cpu_notebooks_run_through_core_only(tmp_path):
    """3a and 4a, their stretch sections skipped (they have none today: the run is the whole notebook)."""
    out = tmp_path / "ws.json"
    assert workshop.main(["3a", "4a", "--core", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["command"] == "python -m utilities.workshop 3a 4a --core"
    entries = data["notebooks"]
    assert [e["notebook"] for e in entries] == ["3a_ozaki_numerics", "4a_ozaki2_numerics"]
    assert all(e["error"] == "" and e["core"] and e["wall_s"] > 0 for e in entries), entries
    assert "| 3a_ozaki_numerics |" in workshop.table([workshop.Entry(**entries[0])])


def test_a_core_run_skips_the_stretch_cells(tmp_path):
    stretch = {"course": {"stretch": True}}
    root = _tiny_course(tmp_path, ["x = 1", "raise RuntimeError('a stretch cell ran')", "assert x == 1"])
    for folder in ("solutions", "notebooks"):
        nb = nbformat.read(root / folder / "9_tiny.ipynb", as_version=4)
        nb.cells[1].metadata.update(stretch)
        nbformat.write(nb, root / folder / "9_tiny.ipynb")
    assert workshop.run_notebook("9_tiny", root=root, core=True).error == ""
    assert workshop.run_notebook("9_tiny", root=root).error.startswith("code cell 1: RuntimeError")


def test_gpu_notebooks_are_skipped_with_a_reason_without_a_gpu():
    chosen, skipped = workshop.notebooks([], gpu=False)
    assert "3a_ozaki_numerics" in chosen and any(s.startswith("1_multipass") for s in skipped)


def test_a_core_run_takes_the_day_s_notebooks_in_order():
    chosen, skipped = workshop.notebooks([], gpu=True, core=True)
    assert tuple(chosen) == notebooks.DAY and not skipped
    assert workshop.notebooks(["4a"], gpu=False, core=True)[0] == ["4a_ozaki2_numerics"]  # named: optional or not
    with pytest.raises(SystemExit):
        workshop.main(["--core", "--ledger", "x.json"])  # a core run is not a whole notebook's ledger row


def test_a_run_through_is_recorded_as_the_filled_exercise_row_of_the_ledger(tmp_path, monkeypatch):
    from utilities import ledger

    monkeypatch.setenv("COURSE_COMMIT", "abc123")
    path = tmp_path / "notebooks.json"
    passed = workshop.Entry("2a_epilogue_fusion", wall_s=61.0, longest_build_s=9.0, build_wait_s=20.0)
    failed = workshop.Entry(
        "3d_ozaki_fused",
        wall_s=12.0,
        longest_build_s=0.0,
        build_wait_s=0.0,
        error="code cell 4: CheckFailure: stage 'fused'\nTraceback ...",
    )
    workshop.record_in_ledger(passed, path, "NVIDIA H100 80GB HBM3", sharing=2)
    workshop.record_in_ledger(failed, path, "NVIDIA H100 80GB HBM3")
    rows = {r["notebook"]: r for r in ledger.load(path)["rows"]}
    want = ledger.code_hash(ledger.variant_notebook("2a_epilogue_fusion", "exercise"))
    assert rows["2a_epilogue_fusion"]["code_hash"] == want and rows["2a_epilogue_fusion"]["variant"] == "exercise"
    assert rows["2a_epilogue_fusion"]["passed"] and rows["2a_epilogue_fusion"]["parallel"] == 2
    assert rows["2a_epilogue_fusion"]["commit"] == "abc123"
    assert not rows["3d_ozaki_fused"]["passed"] and "CheckFailure" in rows["3d_ozaki_fused"]["error"]
    assert "\n" not in rows["3d_ozaki_fused"]["error"]


def test_each_course_link_is_recorded_with_its_key_and_what_the_key_was_made_of(monkeypatch):
    """The builds cell's line: a course kernel that was linked comes with its key and recipe, to hold beside the
    prebuild's (``--keys``); a line of the older cell, without them, still reads."""
    from utilities.machinery.buildcache import linking, progress

    record = {"kernel": "utilities.m.k", "key": "ab", "recipe": {"ir": "cd", "linked": ["recipe:ef"]}}
    monkeypatch.setattr(progress, "BUILDS", [["k", 1.234]])
    monkeypatch.setattr(linking, "COURSE_LINKED", ["utilities.m.k"])
    monkeypatch.setattr(linking, "COURSE_LINKED_KEYS", ["ab"])
    monkeypatch.setattr(linking, "RECIPES", {"ab": record["recipe"], "other": {}})
    namespace = {}
    exec(workshop.BUILDS_CELL.replace("print(", "_line = ("), namespace)  # the cell as the notebook's kernel runs it
    assert workshop.parse_builds(namespace["_line"]) == ([("k", 1.23)], ["utilities.m.k"], [record])
    older = workshop.BUILDS_MARK + json.dumps([[["k", 1.234]], ["utilities.m.k"]])
    assert workshop.parse_builds(older) == ([("k", 1.23)], ["utilities.m.k"], [])


def test_the_race_runs_waits_are_read_from_the_checks_lines() -> None:
    """Each edit's wait for its race runs (the checker's line after a pass), so that a slow check after an edit
    says whether the race run or the check itself took the time."""
    text = (
        "✓ stage 'C': passed\n"
        "✓ b2b_kernel: no race and no barrier error under compute-sanitizer racecheck and synccheck "
        "(41 s, 23 s of it after the check)\n"
        "✓ b2b_kernel: no race and no barrier error under compute-sanitizer racecheck and synccheck "
        "(checked before, same code)\n"
        "✓ other: no race and no barrier error under compute-sanitizer racecheck and synccheck (9 s, 0 s of it after "
        "the check)\n"
    )
    assert workshop.race_wait_of(text) == 23.0 and workshop.race_run_of(text) == 41.0
    assert workshop.race_wait_of("… b2b_kernel: races not checked: no GPU\n") == 0.0
    assert workshop.race_run_of("… b2b_kernel: races not checked: no GPU\n") == 0.0


def test_an_edit_keeps_the_lines_its_checks_printed() -> None:
    text = "a table\n✓ toy: passed on 3 inputs\n… toy: 12 s waiting for your kernel at this block\n" + "✗ x\n" * 20
    lines = workshop.check_lines(text)
    assert lines[:2] == ["✓ toy: passed on 3 inputs", "… toy: 12 s waiting for your kernel at this block"]
    assert len(lines) == 12 and "a table" not in lines

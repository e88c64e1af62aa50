"""The GPU ledger (``utilities.ledger``): what its hash counts, which notebooks are stale, the README's column, and
the runner (on CPU notebooks of a tiny course, one at a time and several at once)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import nbformat
import pytest

from utilities import ledger
from utilities.notebooks import REPO_ROOT

EXERCISE = "def f():\n    # BEGIN SOLUTION\n    return 1\n    # END SOLUTION\n"


def _tiny_course(root: Path, checks: dict[str, str], gpu: bool = True) -> Path:
    """A course of one notebook per entry (stem -> the check cell after one exercise), exercise = solution."""
    for folder in ("solutions", "notebooks", "results"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    for stem, check in checks.items():
        nb = nbformat.v4.new_notebook(metadata={"course": {"gpu": gpu}})
        nb.cells = [
            nbformat.v4.new_markdown_cell("# tiny"),
            nbformat.v4.new_code_cell(EXERCISE),
            nbformat.v4.new_code_cell(check),
        ]
        for index, cell in enumerate(nb.cells):
            cell.id = f"cell{index}"
        for folder in ("solutions", "notebooks"):
            nbformat.write(nb, root / folder / f"{stem}.ipynb")
    return root


def _row(stem: str, variant: str, code_hash: str, passed: bool = True, date: str = "2026-11-26") -> dict:
    return asdict(ledger.Row(stem, variant, code_hash, "abc", date, passed, 1.0))


def test_the_hash_counts_code_and_tags_that_run_not_prose() -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("prose"), nbformat.v4.new_code_cell("x = 1\ny = 2")]
    base = ledger.code_hash(nb)
    nb.cells[0].source = "other prose, 3.1 ms"
    nb.cells[1].source = "x = 1   \ny = 2\n\n"  # trailing blanks
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", text="hi")]
    nb.cells[1].metadata["collapsed"] = True
    assert ledger.code_hash(nb) == base
    nb.cells[1].metadata["tags"] = ["raises-exception"]
    assert ledger.code_hash(nb) != base
    nb.cells[1].metadata["tags"] = []
    nb.cells[1].source = "x = 1\ny = 3"
    assert ledger.code_hash(nb) != base


def test_the_hash_counts_the_course_code_a_notebook_calls(tmp_path) -> None:
    """A notebook passed at its code only if ``utilities`` is the same too: a change there makes its rows stale."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("from utilities import kernels")]
    (tmp_path / "utilities").mkdir()
    (tmp_path / "utilities" / "kernels.py").write_text("STEP = 1\n")
    before = ledger.code_hash(nb, tmp_path)
    (tmp_path / "utilities" / "kernels.py").write_text("STEP = 2\n")
    ledger.package_digest.cache_clear()
    assert ledger.code_hash(nb, tmp_path) != before
    assert ledger.code_hash(nb, tmp_path) != ledger.code_hash(nb), "another checkout's course code"


def test_a_notebook_is_current_only_when_both_variants_passed_at_its_code(tmp_path: Path) -> None:
    root = _tiny_course(tmp_path, {"9_tiny": "assert f() == 1"})
    hashes = ledger.current_hashes(["9_tiny"], root)
    now = {v: hashes["9_tiny", v] for v in ledger.VARIANTS}
    gpu = "NVIDIA H100 80GB HBM3"
    assert ledger.status("9_tiny", [], hashes) == ("never", "not yet")
    both = [(gpu, _row("9_tiny", v, now[v])) for v in ledger.VARIANTS]
    assert ledger.status("9_tiny", both, hashes) == ("current", "2026-11-26, H100 80GB HBM3")
    only = ("partial", "2026-11-26, H100 80GB HBM3, solution only")
    assert ledger.status("9_tiny", both[:1], hashes) == only, "one variant passed: not 'code changed since'"
    failed = [
        (gpu, _row("9_tiny", "solution", now["solution"])),
        (gpu, _row("9_tiny", "exercise", now["exercise"], passed=False)),
    ]
    assert ledger.status("9_tiny", failed, hashes) == only, "a failed run is no pass"
    old = [(gpu, _row("9_tiny", v, "0" * 16, date="2026-11-20")) for v in ledger.VARIANTS]
    assert ledger.status("9_tiny", old, hashes) == ("stale", "2026-11-20; code changed since")

    ledger.save(tmp_path / "results" / "gpu-notebooks.json", {"gpu": gpu, "rows": [r for _, r in both]})
    (tmp_path / "results" / "gpu-conv-notebooks.json").write_text(json.dumps({"benchmarks": []}))  # not a ledger
    assert ledger.stale(root) == []
    (root / "solutions" / "9_tiny.ipynb").write_text(
        (root / "solutions" / "9_tiny.ipynb").read_text().replace("assert f() == 1", "assert f() >= 1")
    )
    assert ledger.stale(root) == ["9_tiny: last passed 2026-11-26; code changed since"]


def test_merging_keeps_one_row_per_notebook_and_variant() -> None:
    data = {"gpu": "g", "rows": [_row("a", "solution", "1"), _row("a", "exercise", "1"), _row("b", "solution", "1")]}
    new = ledger.Row("a", "exercise", "2", "def", "2026-11-27", False, 3.0, 2, "code cell 1: boom")
    merged = ledger.merge(data, [new])
    assert [(r["notebook"], r["variant"], r["code_hash"]) for r in merged["rows"]] == [
        ("a", "solution", "1"),
        ("a", "exercise", "2"),
        ("b", "solution", "1"),
    ]
    assert merged["rows"][1]["parallel"] == 2 and merged["rows"][1]["error"] == "code cell 1: boom"


def test_the_readme_column_is_in_step_with_the_ledgers() -> None:
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert ledger.readme_table(text) == text, "README.md is out of step: run python -m utilities.ledger readme"
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    named = {line.split("`")[1] for line in rows}
    missing = set(ledger.gpu_notebooks()) - named
    assert not missing, f"the README's notebook table lacks {sorted(missing)}"


@pytest.mark.parametrize("parallel", [1, 2])
def test_the_runner_records_a_row_per_variant(tmp_path: Path, parallel: int) -> None:
    root = _tiny_course(tmp_path, {"9_good": "assert f() == 1", "9_bad": "assert f() == 2, 'wrong'"}, gpu=False)
    path = tmp_path / "results" / "cpu-notebooks.json"
    jobs = [(stem, v) for stem in ("9_bad", "9_good") for v in ledger.VARIANTS]
    rows = ledger.run_many(jobs, path, "none", root=root, parallel=parallel, commit="c0ffee")
    assert [(r.notebook, r.variant, r.passed) for r in rows] == [
        ("9_bad", "solution", False),
        ("9_bad", "exercise", False),
        ("9_good", "solution", True),
        ("9_good", "exercise", True),
    ]
    assert rows[0].error.startswith("code cell 1: AssertionError: wrong")
    assert all(r.parallel == parallel and r.commit == "c0ffee" and r.wall_s > 0 for r in rows)
    saved = json.loads(path.read_text())
    assert len(saved["rows"]) == 4 and saved["gpu"] == "none"
    hashes = ledger.current_hashes(["9_good"], root)
    assert {r["code_hash"] for r in saved["rows"] if r["notebook"] == "9_good"} == set(hashes.values())


def test_rows_written_on_a_gpu_machine_merge_into_the_gpus_ledger(tmp_path, monkeypatch):
    source = tmp_path / "notebooks.json"
    gpu = "NVIDIA H100 80GB HBM3"
    ledger.save(source, {"gpu": gpu, "command": "c", "rows": [_row("a", "solution", "1"), _row("a", "exercise", "1")]})
    monkeypatch.setattr(ledger, "ledger_path", lambda name: tmp_path / "results" / f"{name}-notebooks.json")
    ledger.save(tmp_path / "results" / f"{gpu}-notebooks.json", {"gpu": gpu, "rows": [_row("b", "solution", "2")]})
    assert ledger.main(["merge", str(source)]) == 0
    merged = ledger.load(tmp_path / "results" / f"{gpu}-notebooks.json")
    assert [(r["notebook"], r["variant"]) for r in merged["rows"]] == [
        ("a", "solution"),
        ("a", "exercise"),
        ("b", "solution"),
    ]


def test_a_variant_the_runner_does_not_know_is_refused_before_any_gpu_is_asked(capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        ledger.main(["run", "--variants", "both"])  # "both" is the default, not a name: the help says so
    assert stop.value.code == 2
    assert "--variants takes solution, exercise or both comma-separated, got both" in capsys.readouterr().err

"""The workshop run-through: every exercise notebook executed as an attendee would, with the solutions filled in.

    python -m utilities.workshop                        # every exercise notebook this machine can run
    python -m utilities.workshop 3a 4a                  # the notebooks whose name contains one of these
    python -m utilities.workshop --json x.json          # where to write (default: results/<gpu>-workshop.json)

Each notebook runs in a fresh process (a fresh kernel, as after opening it), in ``notebooks/``. Its exercise cells
get the solution's code (cells matched by id, so the exercise and the solution must be in sync); the "reveal"
cells are skipped. Then each exercise is **edited** the way an attendee would (one statement added to its first
solution region, which changes the compiled code but not the result) and re-run with the cell after it, its
check: that is the wait for a check after an edit. Per notebook the entry records

- ``wall_s``: the whole notebook, top to bottom;
- ``longest_build_s`` and ``build_wait_s``: the longest kernel build and the sum of all of them (the build hook of
  ``utilities.machinery.buildcache.progress``: every numba compilation in the process, cache hits included);
- ``longest_check_after_edit_s``: the longest edit-and-check of its exercises;
- ``error``: the first cell that raised, if any (the run stops there).

Run it after ``./course prebuild``: it measures the day as attendees meet it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import nbformat

from .notebooks import EXERCISES, PREDICTION_TAG, REPO_ROOT, REVEAL_TAG, SOLUTIONS, read_solution

EDIT_LINE = "_attendee_edit = 0  # an edit: new code to build, the same result"
_BEGIN = re.compile(r"^(?P<indent>\s*)# BEGIN SOLUTION\s*$")


@dataclass
class Entry:
    """One notebook's run-through (see the module docstring)."""

    notebook: str
    wall_s: float
    longest_build_s: float
    build_wait_s: float
    longest_check_after_edit_s: float = 0.0
    builds: list[tuple[str, float]] = field(default_factory=list)
    error: str = ""


def filled_cells(stem: str, root: Path = REPO_ROOT) -> list[tuple[str, str, bool]]:
    """The code cells of ``notebooks/<stem>.ipynb`` as ``(id, source, is_exercise)``, with the solution's source
    in every cell (reveal cells left out; the solution's prediction cells hold its predictions, not exercises).
    Raises if a cell of the exercise has no solution twin."""
    exercise = nbformat.read(root / EXERCISES / f"{stem}.ipynb", as_version=4)
    solution = {cell.get("id"): cell for cell in read_solution(root / SOLUTIONS / f"{stem}.ipynb", root).cells}
    cells = []
    for cell in exercise.cells:
        if cell.cell_type != "code" or REVEAL_TAG in cell.metadata.get("tags", []):
            continue
        twin = solution.get(cell.get("id"))
        if twin is None:
            raise ValueError(f"{EXERCISES}/{stem}.ipynb: cell {cell.get('id')} has no twin in {SOLUTIONS}/: rebuild "
                             "the exercises (python -m utilities.notebooks build)")  # fmt: skip
        is_exercise = "# BEGIN SOLUTION" in twin.source and PREDICTION_TAG not in cell.metadata.get("tags", [])
        cells.append((cell.id, twin.source, is_exercise))
    return cells


def edited(source: str) -> str:
    """``source`` with :data:`EDIT_LINE` added at the top of its first solution region."""
    lines = source.split("\n")
    for number, line in enumerate(lines):
        match = _BEGIN.match(line)
        if match:
            return "\n".join([*lines[: number + 1], match["indent"] + EDIT_LINE, *lines[number + 1 :]])
    raise ValueError("no solution region to edit")


def edit_runs(cells: list[tuple[str, str, bool]]) -> list[list[str]]:
    """For each exercise cell: its edited source, then the cell after it (its check) unless that is an exercise."""
    runs = []
    for index, (_, source, is_exercise) in enumerate(cells):
        if is_exercise:
            after = cells[index + 1] if index + 1 < len(cells) else None
            runs.append([edited(source)] + ([after[1]] if after and not after[2] else []))
    return runs


# --- in the notebook's process ---------------------------------------------------------------------------------


def _execute(plan_path: Path) -> dict[str, Any]:
    """Run the cells of a plan (JSON: ``cells``, ``edits``) in an IPython shell; what happened, as a dict."""
    from IPython.core.interactiveshell import InteractiveShell

    from .machinery.buildcache import progress

    plan = json.loads(plan_path.read_text())
    shell = InteractiveShell.instance()
    shell.run_cell("%matplotlib agg", silent=True)

    def run(source: str) -> str:
        result = shell.run_cell(source, silent=False)
        failure = result.error_before_exec or result.error_in_exec
        return "" if failure is None else f"{type(failure).__name__}: {failure}"[:500]

    out: dict[str, Any] = {"error": "", "edits": []}
    start = time.perf_counter()
    for index, source in enumerate(plan["cells"]):
        failure = run(source)
        if failure:
            out["error"] = f"code cell {index}: {failure}"
            break
    out["wall_s"] = time.perf_counter() - start
    out["builds"] = list(progress.BUILDS)
    if not out["error"]:
        for cells in plan["edits"]:
            start = time.perf_counter()
            for source in cells:
                failure = run(source)
                if failure:
                    out["error"] = f"after an edit: {failure}"
                    break
            out["edits"].append(time.perf_counter() - start)
    return out


# --- the harness -----------------------------------------------------------------------------------------------


def run_notebook(stem: str, root: Path = REPO_ROOT, timeout: float = 3600) -> Entry:
    """One notebook in a fresh process, run in ``notebooks/`` as a kernel would be."""
    cells = filled_cells(stem, root)
    plan = {"cells": [source for _, source, _ in cells], "edits": edit_runs(cells)}
    with tempfile.TemporaryDirectory() as tmp:
        plan_path, result_path = Path(tmp) / "plan.json", Path(tmp) / "result.json"
        plan_path.write_text(json.dumps(plan))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
        command = [sys.executable, "-m", "utilities.workshop", "--execute", str(plan_path), str(result_path)]
        start = time.perf_counter()
        try:
            done = subprocess.run(command, cwd=root / EXERCISES, env=env, timeout=timeout, capture_output=True,
                                  text=True)  # fmt: skip
        except subprocess.TimeoutExpired:
            return Entry(stem, time.perf_counter() - start, 0.0, 0.0, error=f"timed out after {timeout:.0f} s")
        if not result_path.exists():
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            return Entry(stem, time.perf_counter() - start, 0.0, 0.0, error="the kernel died: " + " | ".join(tail))
        result = json.loads(result_path.read_text())
    builds = [(str(what), round(float(s), 2)) for what, s in result["builds"]]
    return Entry(
        notebook=stem,
        wall_s=round(result["wall_s"], 1),
        longest_build_s=round(max((s for _, s in builds), default=0.0), 1),
        build_wait_s=round(sum(s for _, s in builds), 1),
        longest_check_after_edit_s=round(max(result["edits"], default=0.0), 1),
        builds=builds,
        error=result["error"],
    )


def notebooks(patterns: list[str], gpu: bool, root: Path = REPO_ROOT) -> tuple[list[str], list[str]]:
    """The exercise notebooks to run (names containing a pattern, all if none) and those skipped, with why."""
    chosen, skipped = [], []
    for path in sorted((root / EXERCISES).glob("*.ipynb")):
        if patterns and not any(p in path.stem for p in patterns):
            continue
        metadata = json.loads(path.read_text(encoding="utf-8")).get("metadata", {})
        if metadata.get("course", {}).get("gpu", True) is not False and not gpu:
            skipped.append(f"{path.stem} (needs a GPU)")
        else:
            chosen.append(path.stem)
    return chosen, skipped


def table(entries: list[Entry]) -> str:
    """A Markdown table of the entries."""
    rows = ["| notebook | wall (s) | longest build (s) | build waits (s) | longest check after an edit (s) | |",
            "|---|---:|---:|---:|---:|---|"]  # fmt: skip
    for e in entries:
        rows.append(f"| {e.notebook} | {e.wall_s:.0f} | {e.longest_build_s:.0f} | {e.build_wait_s:.0f} | "
                    f"{e.longest_check_after_edit_s:.0f} | {e.error or 'ran to the end'} |")  # fmt: skip
    total = sum(e.build_wait_s for e in entries)
    rows.append(f"| **the day** | {sum(e.wall_s for e in entries):.0f} | | {total:.0f} | | |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    from .preflight import probe_gpus

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("patterns", nargs="*", help="run the notebooks whose name contains one of these")
    parser.add_argument("--json", default=None, help="where to write the entries (default results/<gpu>-workshop.json)")
    parser.add_argument("--execute", nargs=2, metavar=("PLAN", "RESULT"), help=argparse.SUPPRESS)  # the child
    args = parser.parse_args(argv)
    if args.execute:
        Path(args.execute[1]).write_text(json.dumps(_execute(Path(args.execute[0]))))
        return 0
    gpus, problem, _ = probe_gpus()
    chosen, skipped = notebooks(args.patterns, bool(gpus))
    for why in skipped:
        print(f"skipped: {why}: {problem}")
    entries = []
    for stem in chosen:
        print(f"{stem}: running ...", flush=True)
        entries.append(run_notebook(stem))
        e = entries[-1]
        print(f"{stem}: {e.wall_s:.0f} s, builds {e.build_wait_s:.0f} s (longest {e.longest_build_s:.0f} s), "
              f"longest check after an edit {e.longest_check_after_edit_s:.0f} s {e.error}", flush=True)  # fmt: skip
    if not entries:
        print("nothing to run")
        return 1
    if args.json:
        path = Path(args.json)
    else:
        from .peaks import gpu_slug

        path = REPO_ROOT / "results" / f"{gpu_slug(gpus[0].name) if gpus else 'cpu'}-workshop.json"
    data = {"date": time.strftime("%Y-%m-%d"), "gpu": gpus[0].name if gpus else "none",
            "command": "python -m utilities.workshop " + " ".join(args.patterns),
            "notebooks": [asdict(e) for e in entries]}  # fmt: skip
    path.write_text(json.dumps(data, indent=1) + "\n")
    print(table(entries))
    print(f"written: {path}")
    return 0 if all(not e.error for e in entries) else 1


if __name__ == "__main__":
    raise SystemExit(main())

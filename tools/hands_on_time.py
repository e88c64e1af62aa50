"""Developer tool (issue 42): each exercise notebook's hands-on time, estimated the way the README says.

    python tools/hands_on_time.py [--workshop results/nvidia-h200-workshop.json] [stems...]

The rates, the same for every notebook (``instructor-notes/machinery.md``, "Hands-on time"): markdown at 130 words a
minute; the code of cells that define a function or a kernel at 10 lines a minute, other code at 30 (non-blank
lines; the imports cell, the first code cell, and the cells that reveal a solution not counted); an exercise 2 min
plus 1.5 min a line of its "TODO (about N lines)"; a prediction 2 min; the machine time on top, from a run-through
(``utilities.workshop``): the core run's wall time for a core notebook (the whole run's where there is no core run),
the whole run's less the core run's for its stretch sections, the whole run's for an optional notebook, and one
check after an edit (``longest_check_after_edit_s``) per exercise, for a second attempt. Core and stretch sections
are counted apart; the first cell's clock is printed beside them.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import nbformat  # noqa: E402

from utilities import notebooks  # noqa: E402

WORDS_A_MINUTE, KERNEL_LINES_A_MINUTE, OTHER_LINES_A_MINUTE = 130, 10, 30
EXERCISE_MIN, EXERCISE_LINE_MIN, PREDICTION_MIN = 2.0, 1.5, 2.0
TODO = re.compile(r"TODO \(about (\d+) lines?\)")


@dataclass
class Part:
    """What an attendee reads and does in one part (core or stretch) of a notebook."""

    words: int = 0
    kernel_lines: int = 0
    other_lines: int = 0
    exercises: list[int] = field(default_factory=list)  # each exercise's "about N lines"
    predictions: int = 0

    def minutes(self, machine_s: float) -> float:
        return (
            self.words / WORDS_A_MINUTE
            + self.kernel_lines / KERNEL_LINES_A_MINUTE
            + self.other_lines / OTHER_LINES_A_MINUTE
            + sum(EXERCISE_MIN + EXERCISE_LINE_MIN * n for n in self.exercises)
            + PREDICTION_MIN * self.predictions
            + machine_s / 60
        )


def defines_code(source: str) -> bool:
    """Whether a code cell defines a function or a class at its top level (a kernel, a factory)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    return any(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) for n in tree.body)


def count(nb: Any) -> dict[str, Part]:
    """The core and stretch parts of an exercise notebook (an ``nbformat`` node)."""
    parts = {"core": Part(), "stretch": Part()}
    first_code = True
    for cell in nb.cells:
        part = parts["stretch" if notebooks.is_stretch(cell) else "core"]
        if cell.cell_type == "markdown":
            part.words += len(cell.source.split())
            continue
        if cell.cell_type != "code" or notebooks.REVEAL_TAG in cell.metadata.get("tags", []):
            continue
        if first_code:  # the imports cell
            first_code = False
            continue
        lines = [line for line in cell.source.split("\n") if line.strip()]
        if defines_code(cell.source):
            part.kernel_lines += len(lines)
        else:
            part.other_lines += len(lines)
        if notebooks.is_prediction(cell.source):
            part.predictions += 1
        else:
            part.exercises += [int(n) for n in TODO.findall(cell.source)]
    return parts


def machine(stem: str, runs: list[dict]) -> tuple[float, float, float]:
    """(core seconds, stretch seconds, one check after an edit) of ``stem`` in a run-through's entries."""
    whole = next((r for r in runs if r["notebook"] == stem and not r.get("core")), None)
    core = next((r for r in runs if r["notebook"] == stem and r.get("core")), None)
    if whole is None:
        return 0.0, 0.0, 0.0
    edit = whole.get("longest_check_after_edit_s", 0.0)
    if core is None or stem not in notebooks.DAY:
        return whole["wall_s"], 0.0, edit
    return core["wall_s"], max(0.0, whole["wall_s"] - core["wall_s"]), edit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stems", nargs="*", help="notebooks whose name contains one of these (default: all)")
    parser.add_argument("--workshop", default=str(ROOT / "results" / "nvidia-h200-workshop.json"))
    args = parser.parse_args()
    runs = json.loads(Path(args.workshop).read_text())["notebooks"] if Path(args.workshop).exists() else []
    print(f"machine time from {args.workshop}" if runs else "no run-through: machine time 0")
    print(
        "| notebook | words | code lines read (kernels + other) | exercises (lines) | predictions | machine s "
        "| estimate | stated |"
    )
    print("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |")
    for path in sorted((ROOT / notebooks.EXERCISES).glob("*.ipynb")):
        stem = path.stem
        if args.stems and not any(s in stem for s in args.stems):
            continue
        nb = nbformat.read(path, as_version=4)
        parts = count(nb)
        clock = notebooks.CLOCK.search(nb.cells[0].source)
        core_s, stretch_s, edit_s = machine(stem, runs)
        for name, part in parts.items():
            if name == "stretch" and not (part.words or part.kernel_lines or part.other_lines):
                continue
            seconds = (core_s if name == "core" else stretch_s) + edit_s * len(part.exercises)
            stated = "-"
            if clock:
                stated = clock["minutes"] if name == "core" else (clock["stretch_minutes"] or "-")
            label = f"`{stem}`" + (" stretch" if name == "stretch" else "")
            exercises = ", ".join(map(str, part.exercises)) or "none"
            print(
                f"| {label} | {part.words} | {part.kernel_lines} + {part.other_lines} | {exercises} | "
                f"{part.predictions} | {seconds:.0f} | {part.minutes(seconds):.0f} min | {stated} min |"
            )


if __name__ == "__main__":
    main()

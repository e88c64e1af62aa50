"""The workshop run-through: every exercise notebook executed as an attendee would, with the solutions filled in.

    python -m utilities.workshop                        # every exercise notebook this machine can run
    python -m utilities.workshop 3a 4a                  # the notebooks whose name contains one of these
    python -m utilities.workshop --json x.json          # where to write (default: results/<gpu>-workshop.json)
    python -m utilities.workshop --core                 # the core path: its notebooks, their stretch sections skipped

Each notebook runs in a fresh Jupyter kernel (nbclient, as JupyterLab runs it: no ``%matplotlib agg``), in a
private folder (``utilities.execution`` says why not in ``notebooks/``). Its exercise cells get the solution's code
(cells matched by id, so the exercise and the solution must be in sync); the "reveal" cells are skipped. Then, in
the same kernel, each exercise is **edited** the way an attendee would (one statement added to its first solution
region, which changes the compiled code but not the result) and re-run with its check (``notebooks.edit_runs``:
the first later cell that uses what it defines, so that 3b's products kernel, checked after the epilogue's exercise,
gets its own): that is the wait for a check after an edit. A prediction is not edited: the cell after it is a
measurement, not a check. A last cell, which the attendee never sees, prints the kernel's builds. Per notebook the
entry records

- ``wall_s``: the whole notebook, top to bottom;
- ``longest_build_s`` and ``build_wait_s``: the longest kernel build and the sum of all of them (the build hook of
  ``utilities.machinery.buildcache.progress``: every numba compilation in the kernel, cache hits included), and
  ``builds``, each (kernel, seconds); ``course_links``: the course's own kernels (none of the notebook's code in
  them: a course factory given the notebook's device function builds the notebook's kernel) that had to be linked,
  not served from the build cache (after a prebuild or a bundle's import: none), and ``course_link_keys``, each
  one's key and what it was made of (``buildcache.linking.key_record``), to hold beside the keys the prebuild
  logged (``python -m utilities.prebuild --keys``) when one was linked;
- ``longest_check_after_edit_s``: the longest edit-and-check of its exercises; ``edit_race_waits_s``: each edit's
  seconds of waiting for its race runs after its checks passed (read from the checker's line), and
  ``edit_race_runs_s`` its longest race run's seconds from its start;
  ``edit_build_stages_s``: what the edits' builds spent in each kind of build work the build cache times (linking
  with nvJitLink, generating libmathdx code; the rest of a build is numba's typing and lowering); ``edit_seconds``
  and ``edit_loads``: each edit's seconds and the machine's load average at its end, beside ``cores`` (a check after
  an edit on a shared machine waits for its builds' share of the cores); ``edit_lines``: each edit's lines that its
  checks printed (verdicts, waits, race runs) and the second at which each of its cells ended (where an edit's
  time went);
- ``error``: the first cell that raised (the run stops there), or a figure shown as text and not as an image;
  ``traceback``: the whole traceback of that cell.

With ``--core`` every cell of a stretch section is left out (the build marks them; ``utilities.notebooks``), as
an attendee who follows the agenda skips them, and without names only the core path's notebooks run; ``core`` in
the entry says so. With ``--no-edits`` the edits are left out (the proof's core path: the whole run measures the
same edits, and a second copy of each would only share the cores with the first).

Run it after ``./course prebuild``: it measures the day as attendees meet it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import execution
from .notebooks import DAY, EXERCISES, REPO_ROOT, filled_notebook


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
    traceback: str = ""
    edit_builds: list[tuple[str, float]] = field(default_factory=list)
    course_links: list[str] = field(default_factory=list)
    core: bool = False  # stretch sections skipped
    course_link_keys: list[dict] = field(default_factory=list)  # each course link's key and recipe
    edit_race_waits_s: list[float] = field(default_factory=list)  # each edit: seconds its checks waited for races
    edit_race_runs_s: list[float] = field(default_factory=list)  # each edit: its longest race run, from its start
    edit_seconds: list[float] = field(default_factory=list)  # each edit and its check
    edit_build_stages_s: dict[str, float] = field(default_factory=dict)  # the edits' build work by kind (nvJitLink...)
    edit_loads: list[float] = field(default_factory=list)  # each edit: the machine's load average (1 min) at its end
    cores: int = 0  # the machine's cores, beside the loads
    edit_lines: list[list[str]] = field(default_factory=list)  # each edit: its checks' lines, each cell's end time


# --- the run ---------------------------------------------------------------------------------------------------

BUILDS_MARK = "course-builds: "
# the hidden last cell: the kernel's builds so far, the course's kernels it linked and their keys, as one JSON line
BUILDS_CELL = (
    "import json as _json\nfrom utilities.machinery.buildcache import linking as _linking, progress as _progress\n"
    "_keys = [_linking.key_record(n, k) for n, k in zip(_linking.COURSE_LINKED, _linking.COURSE_LINKED_KEYS)]\n"
    f"print({BUILDS_MARK!r} + _json.dumps([_progress.BUILDS, _linking.COURSE_LINKED, _keys]))"
)


def parse_builds(line: str) -> tuple[list[tuple[str, float]], list[str], list[dict]]:
    """The builds cell's line: the builds, each (kernel, seconds), the course's own kernels linked (``module.kernel``:
    those with none of the notebook's code in them) and each one's key record (none from an older cell)."""
    builds, linked, *rest = json.loads(line[len(BUILDS_MARK) :])
    keys = [dict(record) for record in rest[0]] if rest else []
    return [(str(what), round(float(s), 2)) for what, s in builds], [str(name) for name in linked], keys


def _marked_line(session: execution.Kernel, cell_source: str, mark: str) -> str:
    """Run a hidden cell in the notebook's kernel and return the last line it printed that starts with ``mark``
    ("" when the cell failed or printed none)."""
    run, cell = session.run(cell_source)
    lines = [line for line in execution.stream_text(cell).splitlines() if line.startswith(mark)]
    return "" if run.error or not lines else lines[-1]


def _builds(session: execution.Kernel) -> tuple[list[tuple[str, float]], list[str], list[dict]]:
    """The kernel's builds so far (:func:`parse_builds`)."""
    line = _marked_line(session, BUILDS_CELL, BUILDS_MARK)
    return parse_builds(line) if line else ([], [], [])


STAGES_MARK = "course-build-stages: "
# a hidden cell: the seconds this kernel has spent in each kind of build work (``buildcache.seconds``), as JSON
STAGES_CELL = (
    "import json as _json\nfrom utilities.machinery import buildcache as _buildcache\n"
    f"print({STAGES_MARK!r} + _json.dumps(_buildcache.seconds()))"
)


def _stage_seconds(session: execution.Kernel) -> dict[str, float]:
    """Seconds the notebook's kernel has spent in each kind of build work so far (empty if it cannot say)."""
    line = _marked_line(session, STAGES_CELL, STAGES_MARK)
    return {str(k): float(v) for k, v in json.loads(line[len(STAGES_MARK) :]).items()} if line else {}


def stage_difference(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """What each kind of build work added between two readings of :func:`_stage_seconds` (nonzero ones only)."""
    added = {k: round(v - before.get(k, 0.0), 1) for k, v in after.items()}
    return {k: v for k, v in added.items() if v > 0}


RACE_LINE = re.compile(r"under compute-sanitizer .*\((\d+) s, (\d+) s of it after the check\)")


def race_wait_of(text: str) -> float:
    """Seconds the checks that printed ``text`` waited for their race runs after passing (the checker's line "no race
    and no barrier error under compute-sanitizer ... (N s, M s of it after the check)"; 0 when none ran)."""
    return float(sum(int(m.group(2)) for m in RACE_LINE.finditer(text)))


def race_run_of(text: str) -> float:
    """Seconds the longest race run of the checks that printed ``text`` took from its start (N of the line above; 0
    when none ran): what a race run costs beside its check."""
    return float(max((int(m.group(1)) for m in RACE_LINE.finditer(text)), default=0))


def check_lines(text: str, most: int = 12) -> list[str]:
    """The lines of a cell's output that checks print (a verdict, a wait, a race run: they start with ✓, ✗ or …),
    each cut to 200 characters; at most ``most``."""
    marks = ("✓", "✗", "…")
    return [line[:200] for line in text.splitlines() if line.startswith(marks)][:most]


def load_average() -> float:
    """The machine's load average over the last minute (0 where the system does not say)."""
    try:
        return round(os.getloadavg()[0], 1)
    except (AttributeError, OSError):
        return 0.0


def run_notebook(
    stem: str, root: Path = REPO_ROOT, timeout: float = 1800, core: bool = False, edits: bool = True
) -> Entry:
    """One notebook in a fresh Jupyter kernel (``timeout``: seconds a cell may take; ``core``: its stretch sections
    left out), then its edits (unless ``edits`` is false); a kernel that dies or does not start gives an entry that
    says so."""
    started = time.perf_counter()
    try:
        return _run_notebook(stem, root, timeout, core, edits)
    except Exception as exc:  # nbclient's DeadKernelError, a cell past its timeout, a kernel that would not start
        return Entry(
            stem,
            round(time.perf_counter() - started, 1),
            0.0,
            0.0,
            error=f"the kernel stopped: {type(exc).__name__}: {exc}",
            core=core,
        )


def _run_notebook(stem: str, root: Path, timeout: float, core: bool, with_edits: bool = True) -> Entry:
    nb, edits = filled_notebook(stem, root, core)
    edits = edits if with_edits else []
    with execution.Kernel(timeout=timeout, env=execution.kernel_env(root), notebook=nb) as session:
        run = execution.run_all(session)
        error, trace = run.error, run.traceback
        shown_as_text = execution.figures_without_images(session.notebook)
        if shown_as_text and not error:
            error = "a figure shows as text, not as an image: " + "; ".join(shown_as_text)
        builds, linked, keys = _builds(session)
        stages_before = _stage_seconds(session) if edits and not error else {}
        seconds: list[float] = []
        race_waits: list[float] = []
        race_runs: list[float] = []
        loads: list[float] = []
        lines: list[list[str]] = []
        for cells in edits if not error else []:
            start = time.perf_counter()
            race_waits.append(0.0)
            race_runs.append(0.0)
            lines.append([])
            for source in cells:
                cell_run, cell = session.run(source)
                text = execution.stream_text(cell)
                lines[-1] += check_lines(text)
                lines[-1].append(f"cell ended at {time.perf_counter() - start:.1f} s")
                race_waits[-1] += race_wait_of(text)
                race_runs[-1] = max(race_runs[-1], race_run_of(text))
                if cell_run.error:
                    error, trace = f"after an edit: {cell_run.error}", cell_run.traceback
                    break
            seconds.append(time.perf_counter() - start)
            loads.append(load_average())
            if error:
                break
        edit_builds = _builds(session)[0][len(builds) :] if edits and seconds else []
        edit_stages = stage_difference(stages_before, _stage_seconds(session)) if edits and seconds else {}
    return Entry(
        notebook=stem,
        wall_s=round(run.wall_s, 1),
        longest_build_s=round(max((s for _, s in builds), default=0.0), 1),
        build_wait_s=round(sum(s for _, s in builds), 1),
        longest_check_after_edit_s=round(max(seconds, default=0.0), 1),
        builds=builds,
        error=error,
        traceback=trace,
        edit_builds=edit_builds,
        course_links=linked,
        edit_race_waits_s=[round(w, 1) for w in race_waits[: len(seconds)]],
        edit_race_runs_s=race_runs[: len(seconds)],
        core=core,
        course_link_keys=keys,
        edit_seconds=[round(x, 1) for x in seconds],
        edit_build_stages_s=edit_stages,
        edit_loads=loads,
        cores=os.cpu_count() or 0,
        edit_lines=lines[: len(seconds)],
    )


def notebooks(
    patterns: list[str], gpu: bool, root: Path = REPO_ROOT, core: bool = False
) -> tuple[list[str], list[str]]:
    """The exercise notebooks to run (names containing a pattern; all if none, or with ``core`` the core path's,
    in the day's order) and those skipped, with why."""
    chosen, skipped = [], []
    paths = sorted((root / EXERCISES).glob("*.ipynb"))
    if core and not patterns:
        paths = [root / EXERCISES / f"{stem}.ipynb" for stem in DAY]
    for path in paths:
        if patterns and not any(p in path.stem for p in patterns):
            continue
        metadata = json.loads(path.read_text(encoding="utf-8")).get("metadata", {})
        if metadata.get("course", {}).get("gpu", True) is not False and not gpu:
            skipped.append(f"{path.stem} (needs a GPU)")
        else:
            chosen.append(path.stem)
    return chosen, skipped


def headline(error: str) -> str:
    """The first line of an error, for a table cell or a progress line."""
    return error.splitlines()[0] if error else ""


def table(entries: list[Entry]) -> str:
    """A Markdown table of the entries."""
    rows = [
        "| notebook | wall (s) | longest build (s) | build waits (s) | longest check after an edit (s) | |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for e in entries:
        rows.append(
            f"| {e.notebook} | {e.wall_s:.0f} | {e.longest_build_s:.0f} | {e.build_wait_s:.0f} | "
            f"{e.longest_check_after_edit_s:.0f} | {headline(e.error) or 'ran to the end'} |"
        )
    total = sum(e.build_wait_s for e in entries)
    rows.append(f"| **the day** | {sum(e.wall_s for e in entries):.0f} | | {total:.0f} | | |")
    return "\n".join(rows)


def record_in_ledger(entry: Entry, path: Path, gpu: str, sharing: int = 1) -> None:
    """The run-through of a notebook is a run of its filled exercise: record it as that variant's ledger row (its
    edits ran after the notebook and do not count: the row is the notebook top to bottom)."""
    from . import ledger

    nb = ledger.variant_notebook(entry.notebook, "exercise")
    error = headline(entry.error) if entry.error else ""
    row = ledger.Row(
        entry.notebook,
        "exercise",
        ledger.code_hash(nb),
        ledger.commit_of(),
        time.strftime("%Y-%m-%d"),
        not entry.error,
        entry.wall_s,
        sharing,
        error,
    )
    ledger.save(path, ledger.merge({**ledger.load(path), "gpu": gpu}, [row]))


def main(argv: list[str] | None = None) -> int:
    from .preflight import probe_gpus

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("patterns", nargs="*", help="run the notebooks whose name contains one of these")
    parser.add_argument("--json", default=None, help="where to write the entries (default results/<gpu>-workshop.json)")
    parser.add_argument(
        "--ledger",
        default=None,
        help="also record each notebook's run as its filled exercise's row of this GPU ledger file",
    )
    parser.add_argument(
        "--core",
        action="store_true",
        help="skip every stretch section; without names, run the core path's notebooks only",
    )
    parser.add_argument(
        "--sharing",
        type=int,
        default=1,
        help="run-throughs sharing the GPU at once (recorded in the ledger's rows as 'parallel')",
    )
    parser.add_argument(
        "--no-edits",
        action="store_true",
        help="leave out the edits after each notebook (no check after an edit is measured)",
    )
    args = parser.parse_args(argv)
    if args.core and args.ledger:
        parser.error("--ledger records whole notebooks: a --core run skips their stretch sections")
    gpus, problem, _ = probe_gpus()
    chosen, skipped = notebooks(args.patterns, bool(gpus), core=args.core)
    for why in skipped:
        print(f"skipped: {why}: {problem}")
    if args.json:
        path = Path(args.json)
    else:
        from .peaks import gpu_slug

        path = REPO_ROOT / "results" / f"{gpu_slug(gpus[0].name) if gpus else 'cpu'}-workshop.json"
    entries = []
    for stem in chosen:
        print(f"{stem}: running ...", flush=True)
        entries.append(run_notebook(stem, core=args.core, edits=not args.no_edits))
        e = entries[-1]
        print(
            f"{stem}: {e.wall_s:.0f} s, builds {e.build_wait_s:.0f} s (longest {e.longest_build_s:.0f} s), "
            f"longest check after an edit {e.longest_check_after_edit_s:.0f} s {headline(e.error)}",
            flush=True,
        )
        data = {
            "date": time.strftime("%Y-%m-%d"),
            "gpu": gpus[0].name if gpus else "none",
            "command": " ".join(
                ["python -m utilities.workshop", *args.patterns]
                + (["--core"] if args.core else [])
                + (["--no-edits"] if args.no_edits else [])
            ),
            "notebooks": [asdict(e) for e in entries],
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1) + "\n")  # after each notebook: a cut-off run keeps what ran
        if args.ledger:
            record_in_ledger(e, Path(args.ledger), gpus[0].name if gpus else "none", args.sharing)
    if not entries:
        print("nothing to run")
        return 1
    print(table(entries))
    print(f"written: {path}")
    return 0 if all(not e.error for e in entries) else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""The GPU ledger: when each GPU notebook last passed on a GPU, and at which code.

    python -m utilities.ledger run                    # every GPU notebook, solution and filled exercise
    python -m utilities.ledger run 2b 4b --parallel 3 # some, three kernels at a time on the one GPU
    python -m utilities.ledger stale                  # the GPU notebooks whose code changed since they last passed
    python -m utilities.ledger readme [--check]       # the README's "last passed on a GPU" column, from the ledger
    python -m utilities.ledger merge rows.json        # rows a GPU machine wrote elsewhere, into results/<gpu>-...

``results/<gpu>-notebooks.json`` holds one row per GPU notebook and variant: ``solution`` (``solutions/<nb>``) and
``exercise`` (``notebooks/<nb>`` with the solutions filled in, as the run-through fills them), each
``{"notebook", "variant", "code_hash", "commit", "date", "passed", "wall_s", "parallel"}`` and ``"error"`` when
it failed. A row is the notebook's last run on that GPU: it passed when every cell ran (a cell tagged
``raises-exception`` may raise) and no figure showed as text. Notebooks run as the run-through runs them: each in
a fresh Jupyter kernel (nbclient) in a private folder (``utilities.execution``), not under nbval.

``code_hash`` covers the variant's code cells, in order, the tags that change how they run, and every Python file
of ``utilities/``: markdown does not count, so a prose edit leaves a notebook current, while a code edit in the
notebook or anywhere in the course's package makes it stale (a notebook passed "at its code" only if the code it
calls is the same too).

With ``--parallel N`` several kernels share the GPU: pass or fail holds, but their wall times are not those of a
notebook alone, and the row says so (``"parallel": N``). The commit is ``--commit``, else ``$COURSE_COMMIT``,
else ``git rev-parse HEAD`` (a GPU machine that gets a copy of the working tree has no ``.git``: pass it).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import nbformat

from .notebooks import REPO_ROOT, SOLUTIONS, filled_notebook

VARIANTS = ("solution", "exercise")
RESULTS = "results"
LEDGER_SUFFIX = "-notebooks.json"
TAGS_THAT_RUN = ("raises-exception", "skip-execution")  # tags that change what running a cell means
README_COLUMN = "last passed on a GPU"


@dataclass
class Row:
    """One run of one notebook variant on a GPU (see the module docstring)."""

    notebook: str
    variant: str
    code_hash: str
    commit: str
    date: str
    passed: bool
    wall_s: float
    parallel: int = 1
    error: str = ""


# --- what is run, and its hash -----------------------------------------------------------------------------------


def gpu_notebooks(root: Path = REPO_ROOT) -> list[str]:
    """The notebooks that need a GPU (metadata ``course.gpu`` not false), by name."""
    stems = []
    for path in sorted((root / SOLUTIONS).glob("*.ipynb")):
        metadata = json.loads(path.read_text(encoding="utf-8")).get("metadata", {})
        if metadata.get("course", {}).get("gpu", True) is not False:
            stems.append(path.stem)
    return stems


def variant_notebook(stem: str, variant: str, root: Path = REPO_ROOT) -> nbformat.NotebookNode:
    """The notebook a variant runs: the solution as stored, or the exercise with the solutions filled in."""
    if variant == "solution":
        return nbformat.read(root / SOLUTIONS / f"{stem}.ipynb", as_version=4)
    if variant == "exercise":
        return filled_notebook(stem, root)[0]
    raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {variant!r}")


def code_hash(nb: nbformat.NotebookNode, root: Path = REPO_ROOT) -> str:
    """SHA-256 (16 hex digits) of the code cells in order, trailing blanks ignored, with the tags that change how
    a cell runs, and of the ``utilities`` package under ``root`` (:func:`package_digest`): a notebook passed "at its
    code" only if the course code it calls is the same too. Markdown, outputs and metadata do not count."""
    cells = []
    for cell in nb.cells:
        if cell.cell_type == "code":
            source = "\n".join(line.rstrip() for line in cell.source.strip().splitlines())
            tags = sorted(t for t in cell.metadata.get("tags", []) if t in TAGS_THAT_RUN)
            cells.append([source, tags])
    return hashlib.sha256(json.dumps([cells, package_digest(root)]).encode()).hexdigest()[:16]


@functools.cache
def package_digest(root: Path = REPO_ROOT) -> str:
    """SHA-256 of every Python file of ``root/utilities``, by relative path (read once a process)."""
    digest = hashlib.sha256()
    for path in sorted((root / "utilities").rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def current_hashes(stems: list[str], root: Path = REPO_ROOT) -> dict[tuple[str, str], str]:
    return {(stem, v): code_hash(variant_notebook(stem, v, root), root) for stem in stems for v in VARIANTS}


# --- the ledger files ----------------------------------------------------------------------------------------------


def ledger_path(gpu: str, root: Path = REPO_ROOT) -> Path:
    from .peaks import gpu_slug

    return root / RESULTS / f"{gpu_slug(gpu)}{LEDGER_SUFFIX}"


def load(path: Path) -> dict:
    """A ledger file (``{"gpu", "rows": [...]}``), or an empty one where there is none."""
    if not path.exists():
        return {"gpu": "", "rows": []}
    data = json.loads(path.read_text(encoding="utf-8"))
    for row in data.get("rows", []):
        missing = {"notebook", "variant", "code_hash", "commit", "date", "passed", "wall_s"} - set(row)
        if missing:
            raise ValueError(f"{path}: a row lacks {sorted(missing)}: {row}")
    return data


def merge(data: dict, rows: list[Row]) -> dict:
    """The ledger with ``rows`` in place of the rows of the same notebook and variant."""
    new = {(r.notebook, r.variant): asdict(r) for r in rows}
    kept = [r for r in data.get("rows", []) if (r["notebook"], r["variant"]) not in new]
    merged = sorted([*kept, *new.values()], key=lambda r: (r["notebook"], VARIANTS.index(r["variant"])))
    return {**data, "rows": merged}


def save(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


def all_rows(root: Path = REPO_ROOT) -> list[tuple[str, dict]]:
    """(GPU name, row) from every ledger under ``results/`` (other reports that end alike hold no ``rows``)."""
    found = []
    for path in sorted((root / RESULTS).glob(f"*{LEDGER_SUFFIX}")):
        if "rows" not in json.loads(path.read_text(encoding="utf-8")):
            continue
        data = load(path)
        found += [(data.get("gpu") or path.name[: -len(LEDGER_SUFFIX)], row) for row in data["rows"]]
    return found


# --- what is stale, and the README's column --------------------------------------------------------------------------


def status(stem: str, rows: list[tuple[str, dict]], hashes: dict[tuple[str, str], str]) -> tuple[str, str]:
    """``("current" | "partial" | "stale" | "never", text for the README)`` of one GPU notebook: current when both
    variants passed on a GPU at their code as it is now, partial when only one did."""
    passes: dict[str, list[tuple[str, dict]]] = {v: [] for v in VARIANTS}
    for gpu, row in rows:
        if row["notebook"] == stem and row["passed"] and row["variant"] in passes:
            passes[row["variant"]].append((gpu, row))
    now = {v: [(g, r) for g, r in passes[v] if r["code_hash"] == hashes[stem, v]] for v in VARIANTS}
    if all(now.values()):
        gpu, row = max((max(now[v], key=lambda gr: gr[1]["date"]) for v in VARIANTS), key=lambda gr: gr[1]["date"])
        return "current", f"{row['date']}, {gpu.removeprefix('NVIDIA ')}"
    if any(now.values()):
        ran = [v for v in VARIANTS if now[v]]
        last = max((gr for v in ran for gr in now[v]), key=lambda gr: gr[1]["date"])
        return "partial", f"{last[1]['date']}, {last[0].removeprefix('NVIDIA ')}, {' and '.join(ran)} only"
    if any(passes.values()):
        last = max((gr for v in VARIANTS for gr in passes[v]), key=lambda gr: gr[1]["date"])[1]["date"]
        return "stale", f"{last}; code changed since"
    return "never", "not yet"


def stale(root: Path = REPO_ROOT) -> list[str]:
    """One line per GPU notebook that is not current (see :func:`status`)."""
    stems = gpu_notebooks(root)
    hashes, rows = current_hashes(stems, root), all_rows(root)
    lines = []
    for stem in stems:
        state, text = status(stem, rows, hashes)
        if state != "current":
            lines.append(f"{stem}: {'never passed on a GPU' if state == 'never' else 'last passed ' + text}")
    return lines


_ROW = re.compile(r"^\| `(?P<stem>[^`]+)` \|")


def readme_table(text: str, root: Path = REPO_ROOT) -> str:
    """The README with its notebook table's last column (``README_COLUMN``) filled from the ledgers."""
    stems = set(gpu_notebooks(root))
    hashes, rows = current_hashes(sorted(stems), root), all_rows(root)
    lines = text.split("\n")
    header = next((i for i, line in enumerate(lines) if line.startswith("| notebook |")), None)
    if header is None or not lines[header].rstrip().endswith(f"| {README_COLUMN} |"):
        raise ValueError(f"README.md: no notebook table whose last column is '{README_COLUMN}'")
    for i in range(header + 2, len(lines)):
        match = _ROW.match(lines[i])
        if not match:
            break
        stem = match["stem"]
        cell = status(stem, rows, hashes)[1] if stem in stems else "CPU notebook"
        lines[i] = lines[i].rstrip().rstrip("|").rsplit("|", 1)[0] + f"| {cell} |"
    return "\n".join(lines)


# --- running notebooks -----------------------------------------------------------------------------------------------


def commit_of(root: Path = REPO_ROOT, given: str | None = None) -> str:
    """``given``, else ``$COURSE_COMMIT``, else git's HEAD (with ``+changes`` when the tree differs), else unknown."""
    if given or os.environ.get("COURSE_COMMIT"):
        return given or os.environ["COURSE_COMMIT"]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+changes" if dirty else "")


def run_one(
    stem: str,
    variant: str,
    root: Path = REPO_ROOT,
    *,
    commit: str = "unknown",
    parallel: int = 1,
    timeout: float = 1800,
) -> Row:
    """Run one variant of one notebook in a fresh kernel and return its row."""
    from . import execution

    nb = variant_notebook(stem, variant, root)
    started = time.perf_counter()
    try:
        run = execution.execute(nb, timeout=timeout, env=execution.kernel_env(root))
        error = run.error or "; ".join(execution.figures_without_images(run.notebook))
    except Exception as exc:  # the kernel died or would not start: a failed row that says why
        error = f"the kernel did not run the notebook: {type(exc).__name__}: {exc}"
    return Row(
        stem,
        variant,
        code_hash(nb, root),
        commit,
        time.strftime("%Y-%m-%d"),
        not error,
        round(time.perf_counter() - started, 1),
        parallel,
        error.splitlines()[0] if error else "",
    )


def _run_in_process(stem: str, variant: str, root: Path, commit: str, parallel: int, timeout: float) -> Row:
    """:func:`run_one` in a process of its own (several at once share nothing but the GPU)."""
    from .execution import kernel_env

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "row.json"
        cmd = [
            sys.executable,
            "-m",
            "utilities.ledger",
            "one",
            stem,
            variant,
            str(out),
            "--commit",
            commit,
            "--parallel",
            str(parallel),
            "--timeout",
            str(timeout),
            "--root",
            str(root),
        ]
        done = subprocess.run(cmd, cwd=REPO_ROOT, env=kernel_env(), capture_output=True, text=True)
        if out.exists():
            return Row(**json.loads(out.read_text()))
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        return Row(
            stem,
            variant,
            code_hash(variant_notebook(stem, variant, root), root),
            commit,
            time.strftime("%Y-%m-%d"),
            False,
            0.0,
            parallel,
            f"the runner died: {tail}",
        )


def run_many(
    jobs: list[tuple[str, str]],
    path: Path,
    gpu: str,
    *,
    root: Path = REPO_ROOT,
    parallel: int = 1,
    commit: str = "unknown",
    timeout: float = 1800,
    command: str = "",
) -> list[Row]:
    """Run ``jobs`` (notebook, variant), ``parallel`` at a time, writing the ledger after each one finishes."""
    data = {**load(path), "gpu": gpu, "command": command}
    rows: list[Row] = []

    def one(job: tuple[str, str]) -> Row:
        if parallel == 1:
            return run_one(*job, root, commit=commit, timeout=timeout)
        return _run_in_process(*job, root, commit, parallel, timeout)

    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        for row in pool.map(one, jobs):
            rows.append(row)
            data = merge(data, [row])
            save(path, data)
            verdict = "passed" if row.passed else f"FAILED: {row.error}"
            print(f"ledger: {row.notebook} ({row.variant}): {row.wall_s:.0f} s, {verdict}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m utilities.ledger", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run GPU notebooks and record their rows")
    run.add_argument("patterns", nargs="*", help="the notebooks whose name contains one of these (default: all)")
    run.add_argument(
        "--variants", default=",".join(VARIANTS), help="solution, exercise, or both: solution,exercise (default)"
    )
    run.add_argument("--parallel", type=int, default=1, help="kernels at a time on the GPU (pass/fail only)")
    run.add_argument("--stale", action="store_true", help="only the notebooks that `stale` lists")
    run.add_argument("--commit", default=None, help="the commit to record (default: $COURSE_COMMIT, else git)")
    run.add_argument("--timeout", type=float, default=1800, help="seconds a cell may take (default 1800)")
    run.add_argument("--ledger", default=None, help="the file to write (default results/<gpu>-notebooks.json)")
    one = sub.add_parser("one", help=argparse.SUPPRESS)  # one notebook in this process (--parallel's workers)
    one.add_argument("stem")
    one.add_argument("variant", choices=VARIANTS)
    one.add_argument("out")
    one.add_argument("--commit", default="unknown")
    one.add_argument("--parallel", type=int, default=1)
    one.add_argument("--timeout", type=float, default=1800)
    one.add_argument("--root", default=str(REPO_ROOT))
    sub.add_parser("stale", help="list the GPU notebooks whose code changed since they last passed on a GPU")
    merging = sub.add_parser("merge", help="merge the rows of a ledger written elsewhere into results/<gpu>-...")
    merging.add_argument("source")
    readme = sub.add_parser("readme", help="fill the README's column from the ledgers")
    readme.add_argument("--check", action="store_true", help="only say whether the README is in step (exit 1 if not)")
    args = parser.parse_args(argv)

    if args.command == "one":
        row = run_one(
            args.stem, args.variant, Path(args.root), commit=args.commit, parallel=args.parallel, timeout=args.timeout
        )
        Path(args.out).write_text(json.dumps(asdict(row)))
        return 0
    if args.command == "stale":
        lines = stale()
        print("\n".join(lines) if lines else "none: every GPU notebook passed on a GPU at its current code")
        return 0
    if args.command == "merge":
        source = load(Path(args.source))
        if not source.get("gpu"):
            print(f"ledger: {args.source} names no GPU", file=sys.stderr)
            return 1
        path = ledger_path(source["gpu"])
        rows = [Row(**row) for row in source["rows"]]
        save(path, merge({**load(path), "gpu": source["gpu"], "command": source.get("command", "")}, rows))
        print(f"ledger: {len(rows)} rows merged into {path}")
        return 0
    if args.command == "readme":
        path = REPO_ROOT / "README.md"
        text = path.read_text(encoding="utf-8")
        new = readme_table(text)
        if args.check:
            print(
                "README.md is in step with the ledgers"
                if new == text
                else "README.md is out of step: run python -m utilities.ledger readme"
            )
            return 0 if new == text else 1
        path.write_text(new, encoding="utf-8")
        print("README.md: the notebook table's last column filled from the ledgers")
        return 0

    variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        parser.error(f"--variants takes {', '.join(VARIANTS)} or both comma-separated, got {', '.join(unknown)}")
    from .preflight import probe_gpus

    gpus, problem, _ = probe_gpus()
    if not gpus:
        print(f"ledger: the GPU notebooks need a GPU: {problem}", file=sys.stderr)
        return 2
    stems = [s for s in gpu_notebooks() if not args.patterns or any(p in s for p in args.patterns)]
    if args.stale:
        listed = {line.split(":")[0] for line in stale()}
        stems = [s for s in stems if s in listed]
    jobs = [(stem, variant) for stem in stems for variant in variants]
    if not jobs:
        print("ledger: nothing to run")
        return 0
    path = Path(args.ledger) if args.ledger else ledger_path(gpus[0].name)
    command = "python -m utilities.ledger " + " ".join(argv if argv is not None else sys.argv[1:])
    rows = run_many(
        jobs,
        path,
        gpus[0].name,
        parallel=args.parallel,
        commit=commit_of(given=args.commit),
        timeout=args.timeout,
        command=command,
    )
    print(f"ledger: {sum(r.passed for r in rows)} of {len(rows)} passed; written: {path}")
    return 0 if all(r.passed for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""One command that proves the course on the GPU at hand, and says whether it met the course's targets.

    ./course gpu-proof                            # prebuild, then every step below
    ./course gpu-proof --bundle course.bundle     # import a bundle first; the prebuild then builds what it lacks
    python -m utilities.gpu_proof --no-prebuild   # the build cache as it is (a machine that prebuilt)

Steps, on a GPU machine:

1. the build cache: ``--import`` of a bundle when given, then ``python -m utilities.prebuild`` (every kernel of the
   course; after an import that served every kernel, it only loads them: its time says whether the bundle did);
2. the run-through of every GPU notebook (``utilities.workshop``, its filled exercise in a fresh kernel, then each
   exercise edited and checked again), the notebooks spread over ``--parallel`` processes: the attendee's clocks
   (build waits, checks after an edit, with the machine's load) measured on the cache as the day finds it, before
   anything else has run the notebooks (their cells define the exercises' factories in ``__main__``: what the tests
   and the ledger build there would serve the run-through), among ``--parallel`` notebook processes only, as on a
   machine that many attendees share (each process's BLAS threads its share of the cores);
3. at once: the GPU tests (``pytest -m 'gpu or device'``, their files spread over :data:`TEST_PROCESSES` processes
   by the seconds each took in the last run), the solutions in fresh kernels (``utilities.ledger run --variants
   solution``, ``--parallel`` processes) and the run-through of the core path (``--core --no-edits``: its notebooks
   with their stretch sections skipped, two processes; the whole run made the same edits): what is right and runs
   to the end, no attendee's clock measured.

It writes into ``--out`` (default ``results/``): ``<gpu>-gpu-tests.json`` (this run added to the earlier ones),
``<gpu>-workshop.json`` (the run-through's entries, whole and core), ``<gpu>-notebooks.json`` (the ledger: the
run-through records each filled exercise, step 3 each solution) and ``<gpu>-proof.md``: each step's time and the
verdict on each target (:data:`TARGETS`). Exit status 0 only when every target is met.

A step that finished leaves ``<logs>/<step>.done``: started again with the same ``--logs`` (a run cut short on a
machine that is still up), the command goes on from the first step that did not finish. ``COURSE_COMMIT`` names the
commit in every file written (a lent machine's copy of the tree has no ``.git``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from .ledger import VARIANTS

ROOT = Path(__file__).resolve().parent.parent

# The GPU tests: their files spread over this many pytest processes, by the seconds each file took in the last run
TEST_PROCESSES = 3
TEST_MARKS = "gpu or device"
# What "the course passes on this GPU" means (issue "GPU green"): limits of the run-through after a prebuild or import.
TARGETS = {
    "build_wait_s": 180.0,  # every notebook's build waits, summed over the whole run-through
    "check_after_edit_s": 30.0,  # the longest check after an edit, any notebook
    "notebook_s": 360.0,  # one notebook's wall time, top to bottom
    "prebuild_s": 300.0,  # the prebuild of the whole course (after a bundle's import: what it left out)
    "proof_s": 1200.0,  # the whole proof, start to results
}


@dataclass
class TestCounts:
    """A pytest run's outcome, read from its JUnit XML."""

    passed: int
    failed: int
    errors: int
    skipped: int
    seconds: float
    failures: list[str]
    file_seconds: dict[str, float] = field(default_factory=dict)  # tests/<file>.py -> its tests' seconds


def junit_counts(path: Path) -> TestCounts:
    """The counts and the failed or erroring tests' ids (``file::name``) of a ``pytest --junitxml`` report."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {"failed": 0, "errors": 0, "skipped": 0, "passed": 0}
    failures: list[str] = []
    per_file: dict[str, float] = {}
    seconds = 0.0
    for suite in suites:
        seconds += float(suite.get("time", 0.0))
        for case in suite.iter("testcase"):
            outcome = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed")
            key = {"failure": "failed", "error": "errors", "skipped": "skipped"}.get(outcome, "passed")
            counts[key] += 1
            module = case.get("classname", "").split(".")
            # classname is "tests.test_x" or "tests.test_x.TestClass": the file is the part that starts with test_
            cut = next((i for i, part in enumerate(module) if part.startswith("test_")), len(module) - 1)
            file = "/".join(module[: cut + 1]) + ".py"
            per_file[file] = round(per_file.get(file, 0.0) + float(case.get("time", 0.0)), 1)
            if key in ("failed", "errors"):
                test_id = file + "::" + "::".join([*module[cut + 1 :], case.get("name", "")])
                failures.append(test_id + (" (error)" if key == "errors" else ""))
    return TestCounts(
        counts["passed"], counts["failed"], counts["errors"], counts["skipped"], round(seconds, 1), failures, per_file
    )


def file_seconds(path: Path) -> dict[str, float]:
    """Seconds per test file in the last run kept in ``path`` (a ``<gpu>-gpu-tests.json``); empty if none."""
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    runs = data["runs"] if "runs" in data else [data]
    return dict(runs[-1].get("file_seconds", {})) if runs else {}


def merge_counts(parts: list[TestCounts]) -> TestCounts:
    """The counts of pytest runs made side by side, as one (their wall time is the longest one's)."""
    return TestCounts(
        sum(p.passed for p in parts),
        sum(p.failed for p in parts),
        sum(p.errors for p in parts),
        sum(p.skipped for p in parts),
        max((p.seconds for p in parts), default=0.0),
        [f for p in parts for f in p.failures],
        {file: seconds for p in parts for file, seconds in p.file_seconds.items()},
    )


def add_test_run(path: Path, run: dict) -> dict:
    """``path``'s ``{"runs": [...]}`` with ``run`` added last (a file holding one run object becomes its first run)."""
    data = json.loads(path.read_text()) if path.exists() else {"runs": []}
    runs = data["runs"] if "runs" in data else [data]
    return {"runs": [*runs, run]}


def split_evenly(stems: list[str], weights: dict[str, float], parts: int) -> list[list[str]]:
    """``stems`` in ``parts`` groups of about equal weight (longest first, each to the lightest group), each group in
    the order given; a stem without a weight counts as the mean of the others."""
    known = [weights[s] for s in stems if s in weights]
    default = sum(known) / len(known) if known else 1.0
    groups: list[list[str]] = [[] for _ in range(max(1, min(parts, len(stems))))]
    loads = [0.0] * len(groups)
    for stem in sorted(stems, key=lambda s: -weights.get(s, default)):
        i = loads.index(min(loads))
        groups[i].append(stem)
        loads[i] += weights.get(stem, default)
    return [sorted(group, key=stems.index) for group in groups if group]


THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def threads_each(processes: int, cores: int | None = None) -> int:
    """The cores' fair share of each of ``processes`` run at once, for their BLAS threads: a NumPy reference in a check
    otherwise starts one thread per core in every notebook, and six notebooks on 16 cores wait on each other's."""
    return max(1, (cores or os.cpu_count() or 1) // max(1, processes))


def edit_load(entry: dict) -> str:
    """``, load L on C cores``: the machine's load at the end of the entry's longest edit, and the seconds it waited
    for its race runs after its checks (empty where not recorded)."""
    seconds, loads = entry.get("edit_seconds") or [], entry.get("edit_loads") or []
    if not loads or len(loads) != len(seconds) or not entry.get("cores"):
        return ""
    longest = seconds.index(max(seconds))
    waits = entry.get("edit_race_waits_s") or []
    race = f"; {waits[longest]:.0f} s of it waiting for races" if len(waits) == len(seconds) else ""
    return f", load {loads[longest]:.0f} on {entry['cores']} cores{race}"


def verdicts(
    tests: TestCounts | None,
    whole: list[dict],
    core: list[dict],
    ledger_rows: list[dict],
    stems: list[str],
    steps: list[tuple[str, float, int]] | None = None,
) -> list[tuple[str, bool, str]]:
    """(target, met, what was measured) for each target of the proof; ``stems``: the GPU notebooks, each of which
    needs a passing ledger row of both variants in ``ledger_rows`` (this run's); ``steps``: this run's (name,
    seconds, exit), for the prebuild's time and the whole run's (a step that did not run in this invocation gets no
    verdict: a report of an earlier run's logs, or the whole run's time when some steps ran before it resumed)."""
    out: list[tuple[str, bool, str]] = []
    steps = steps or []
    resumed = any(name.endswith("(earlier)") for name, _, _ in steps)  # "all" then times this invocation only
    for step, target, label in (("prebuild", "prebuild_s", "the prebuild"), ("all", "proof_s", "the whole proof")):
        took = [(seconds, code) for name, seconds, code in steps if name == step]
        if not took or (step == "all" and resumed):
            continue
        (seconds, code), limit = took[0], TARGETS[target]
        said = f"{seconds:.0f} s" + (f", exit {code}" if code else "")
        out.append((f"{label} <= {limit:.0f} s", code == 0 and seconds <= limit, said))
    if tests is None:
        out.append(("GPU tests: 0 failed, 0 errors", False, "did not run"))
    else:
        said = f"{tests.passed} passed, {tests.failed} failed, {tests.errors} errors, {tests.skipped} skipped"
        out.append(
            ("GPU tests: 0 failed, 0 errors", tests.failed == 0 and tests.errors == 0 and tests.passed > 0, said)
        )
    failed = [f"{r['notebook']} ({r['variant']}): {r.get('error', '')}" for r in ledger_rows if not r["passed"]]
    ran = {(r["notebook"], r["variant"]) for r in ledger_rows}
    missing = [f"{stem} ({variant}): no run" for stem in stems for variant in VARIANTS if (stem, variant) not in ran]
    out.append(
        (
            "every GPU notebook passes, solution and filled exercise",
            bool(stems) and not failed and not missing,
            "; ".join(failed + missing) or f"{len(ledger_rows)} runs passed",
        )
    )
    for label, entries in (("whole", whole), ("core path", core)):
        stopped = [f"{e['notebook']}: {e['error'].splitlines()[0]}" for e in entries if e.get("error")]
        out.append(
            (
                f"run-through ({label}) runs to the end",
                bool(entries) and not stopped,
                "; ".join(stopped) or f"{len(entries)} notebooks",
            )
        )
    linked = [f"{e['notebook']}: {', '.join(e['course_links'])}" for e in whole + core if e.get("course_links")]
    out.append(("no course kernel linked in the run-through", bool(whole) and not linked, "; ".join(linked) or "none"))
    waits = sum(e["build_wait_s"] for e in whole)
    out.append(
        (
            f"build waits <= {TARGETS['build_wait_s']:.0f} s over the whole run-through",
            bool(whole) and waits <= TARGETS["build_wait_s"],
            f"{waits:.0f} s",
        )
    )
    worst = max(whole + core, key=lambda e: e["longest_check_after_edit_s"], default=None)
    edit = worst["longest_check_after_edit_s"] if worst else 0.0
    out.append(
        (
            f"every check after an edit <= {TARGETS['check_after_edit_s']:.0f} s",
            bool(whole) and edit <= TARGETS["check_after_edit_s"],
            f"longest {edit:.0f} s" + (f" ({worst['notebook']}{edit_load(worst)})" if worst and edit else ""),
        )
    )
    longest = max(whole + core, key=lambda e: e["wall_s"], default=None)
    out.append(
        (
            f"each notebook <= {TARGETS['notebook_s']:.0f} s",
            longest is not None and longest["wall_s"] <= TARGETS["notebook_s"],
            f"longest {longest['notebook']} {longest['wall_s']:.0f} s" if longest else "none ran",
        )
    )
    return out


def report(steps: list[tuple[str, float, int]], checks: list[tuple], head: dict) -> str:
    """The proof as Markdown: the run, its steps, the targets."""
    lines = [f"# GPU proof: {head['gpu']}, commit {head['commit']}, {head['date']}", "", f"`{head['command']}`", ""]
    lines += ["| step | seconds | exit |", "| --- | ---: | ---: |"]
    lines += [f"| {name} | {seconds:.0f} | {code} |" for name, seconds, code in steps]
    lines += ["", "| target | met | measured |", "| --- | --- | --- |"]
    lines += [f"| {target} | {'yes' if met else '**no**'} | {said} |" for target, met, said in checks]
    return "\n".join(lines) + "\n"


# --- running it ---------------------------------------------------------------------------------------------------


class Runner:
    """Starts the steps' processes with their logs, and remembers which steps finished (``<logs>/<step>.done``)."""

    def __init__(self, logs: Path, report_only: bool = False):
        self.logs = logs
        self.report_only = report_only  # start nothing: a step without its marker is said not to have finished
        self.steps: list[tuple[str, float, int]] = []

    def done(self, step: str) -> bool:
        marker = self.logs / f"{step}.done"
        if marker.exists():
            name, seconds, code = json.loads(marker.read_text())
            self.steps.append((f"{name} (earlier)", seconds, code))
            print(f"gpu-proof: {step}: done earlier (exit {code}), skipped", flush=True)
            return True
        return False

    threads: int | None = None  # BLAS and OpenMP threads each process may use (None: as the environment says)

    def start(self, step: str, cmd: list[str]) -> tuple[str, subprocess.Popen, float] | None:
        if self.report_only:
            self.steps.append((f"{step} (did not finish)", 0.0, -1))
            return None
        log = self.logs / f"{step}.log"
        print(f"gpu-proof: {step}: $ {' '.join(cmd)}  (log {log})", flush=True)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        if self.threads is not None:
            env |= {name: str(self.threads) for name in THREAD_VARIABLES}
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env)
        return step, proc, time.perf_counter()

    def wait(self, *started: tuple[str, subprocess.Popen, float] | None) -> list[int]:
        """Wait for every started step; each is recorded (its seconds, its exit status) as soon as it ends."""
        codes: dict[str, int] = {}
        started = tuple(item for item in started if item is not None)
        running = list(started)
        while running:
            for item in list(running):
                step, proc, began = item
                code = proc.poll()
                if code is None:
                    continue
                running.remove(item)
                seconds = round(time.perf_counter() - began, 1)
                self.steps.append((step, seconds, code))
                (self.logs / f"{step}.done").write_text(json.dumps([step, seconds, code]))
                tail = (self.logs / f"{step}.log").read_text(errors="replace").splitlines()[-3:]
                print(f"gpu-proof: {step}: exit {code} after {seconds:.0f} s | " + " | ".join(tail), flush=True)
                codes[step] = code
            if running:
                time.sleep(1.0)
        return [codes[step] for step, _, _ in started]


def report_date(logs: Path, from_logs: bool) -> str:
    """The day of the results: today, or for a report of logs the day their last step finished (UTC)."""
    finished = [m.stat().st_mtime for m in logs.glob("*.done")] if from_logs else []
    return time.strftime("%Y-%m-%d", time.gmtime(max(finished) if finished else None))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m utilities.gpu_proof", description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", default=None, help="import this bundle (or its first part) before the prebuild")
    parser.add_argument("--no-prebuild", action="store_true", help="no prebuild: the build cache as it is")
    parser.add_argument("--out", default=str(ROOT / "results"), help="where the results go (default results/)")
    parser.add_argument("--logs", default=None, help="logs and step markers (default /tmp/course-proof-<commit>)")
    parser.add_argument("--parallel", type=int, default=4, help="notebook processes at once in each step")
    parser.add_argument(
        "--report-only",
        metavar="GPU",
        default=None,
        help="run nothing: write the results of the steps that finished in --logs (a run cut short) for this GPU "
        "(e.g. 'NVIDIA H200'), on any machine",
    )
    args = parser.parse_args(argv)
    from . import ledger
    from . import report as report_format
    from .notebooks import DAY
    from .peaks import gpu_slug
    from .preflight import PreflightError, preflight

    if args.report_only:
        gpu = args.report_only
        if not args.logs:
            parser.error("--report-only needs --logs: the folder of the run's logs and step markers")
    else:
        try:
            env = preflight(require_gpu=True, require_mathdx=True)
        except PreflightError as exc:
            print(f"gpu-proof: cannot run: {exc}", file=sys.stderr)
            return 2
        gpu = env.gpu.name
    out = Path(args.out)
    slug = gpu_slug(gpu)
    commit = ledger.commit_of()
    logs = Path(args.logs) if args.logs else Path(tempfile.gettempdir()) / f"course-proof-{commit}"
    for folder in (out, logs):
        folder.mkdir(parents=True, exist_ok=True)
    os.environ["COURSE_COMMIT"] = commit  # the ledger's rows, written by the steps' processes
    command = "python -m utilities.gpu_proof " + " ".join(argv if argv is not None else sys.argv[1:])
    py = sys.executable
    runner = Runner(logs, report_only=bool(args.report_only))
    began = time.perf_counter()

    # 1. the build cache
    if args.bundle and not runner.done("import"):
        runner.wait(runner.start("import", [py, "-m", "utilities.prebuild", "--import", args.bundle]))
    if not args.no_prebuild and not runner.done("prebuild"):
        # each job's kernels and keys, to hold beside the bundle's (tools/cpu_bundle.sh) and the run-through's links
        runner.wait(
            runner.start("prebuild", [py, "-m", "utilities.prebuild", "--keys", str(logs / "prebuild-keys.json")])
        )
    done_before = [f"an import of {Path(args.bundle).name}"] if args.bundle else []
    cache = " and ".join(done_before + ([] if args.no_prebuild else ["./course prebuild"])) or "the cache as it was"

    stems = ledger.gpu_notebooks()
    previous = out / f"{slug}-workshop.json"
    weights = {}
    if previous.exists():
        entries = json.loads(previous.read_text()).get("notebooks", [])
        weights = {e["notebook"]: e["wall_s"] for e in entries if not e.get("core")}
    groups = split_evenly(stems, weights, args.parallel)
    # 2. the whole run-through, first: the attendee's clocks (builds, checks after an edit) on the cache as the day
    # finds it (nothing else has built the notebooks' kernels yet), among notebook processes only
    core_stems = [s for s in DAY if s in stems]
    core_groups = split_evenly(core_stems, weights, 2)
    runner.threads = threads_each(len(groups))
    started = []

    def workshop(step: str, *arguments: str) -> tuple[str, subprocess.Popen, float] | None:
        """A run-through step: ``python -m utilities.workshop ARGUMENTS --json <logs>/<step>.json``."""
        return runner.start(step, [py, "-m", "utilities.workshop", *arguments, "--json", str(logs / f"{step}.json")])

    for i, group in enumerate(groups):
        if not runner.done(f"workshop-{i}"):
            ledger_rows = str(logs / f"ledger-exercise-{i}.json")
            started.append(workshop(f"workshop-{i}", *group, "--ledger", ledger_rows, "--sharing", str(len(groups))))
    runner.wait(*started)

    # 3. the GPU tests beside the solutions in fresh kernels and the core path's run-through (what is right and runs
    # to the end; no attendee's clock measured here)
    test_files = sorted(f"tests/{p.name}" for p in (ROOT / "tests").glob("test_*.py"))
    test_groups = split_evenly(test_files, file_seconds(out / f"{slug}-gpu-tests.json"), TEST_PROCESSES)
    runner.threads = threads_each(len(test_groups) + args.parallel + len(core_groups))
    started = []
    for i, files in enumerate(test_groups):
        if not runner.done(f"tests-{i}"):
            junit = logs / f"tests-{i}.xml"
            cmd = [py, "-m", "pytest", "-m", TEST_MARKS, "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", *files]
            started.append(runner.start(f"tests-{i}", cmd))
    if not runner.done("solutions"):
        started.append(
            runner.start(
                "solutions",
                [
                    py,
                    "-m",
                    "utilities.ledger",
                    "run",
                    "--variants",
                    "solution",
                    "--parallel",
                    str(args.parallel),
                    "--ledger",
                    str(logs / "ledger-solution.json"),
                ],
            )
        )
    for i, group in enumerate(core_groups):
        if not runner.done(f"core-{i}"):
            started.append(workshop(f"core-{i}", "--core", "--no-edits", *group))
    runner.wait(*started)

    # the results
    date = report_date(logs, bool(args.report_only))
    parts = [
        junit_counts(logs / f"tests-{i}.xml") for i in range(len(test_groups)) if (logs / f"tests-{i}.xml").exists()
    ]
    tests = merge_counts(parts) if parts and len(parts) == len(test_groups) else None
    if tests is not None:
        run = {
            "gpu": gpu,
            "date": date,
            "command": "pytest -m 'gpu or device' tests (python -m utilities.gpu_proof)",
            "commit": commit,
            "passed": tests.passed,
            "failed": tests.failed,
            "errors": tests.errors,
            "skipped": tests.skipped,
            "seconds": tests.seconds,
            "failures": tests.failures,
            "file_seconds": tests.file_seconds,  # how the next run spreads the files over its processes
        }
        path = out / f"{slug}-gpu-tests.json"
        runs = add_test_run(path, run)
        report_format.validate_test_runs(runs)
        path.write_text(json.dumps(runs, indent=1) + "\n")

    def entries(prefix: str, count: int) -> list[dict]:
        found = []
        for i in range(count):
            path = logs / f"{prefix}-{i}.json"
            found += json.loads(path.read_text())["notebooks"] if path.exists() else []
        return found

    whole, core = entries("workshop", len(groups)), entries("core", len(core_groups))
    (out / f"{slug}-workshop.json").write_text(
        json.dumps(
            {
                "date": date,
                "gpu": gpu,
                "commit": commit,
                "command": f"{command}: after {cache}, {len(groups)} notebook processes at once (whole), before "
                f"anything else ran the notebooks; then {len(core_groups)} (core) beside the tests and the solutions",
                "notebooks": whole + core,
            },
            indent=1,
        )
        + "\n"
    )
    ledger_path = out / f"{slug}-notebooks.json"
    data = {**ledger.load(ledger_path), "gpu": gpu, "command": command}
    rows: list[dict] = []
    for part in sorted(logs.glob("ledger-*.json")):
        rows += ledger.load(part).get("rows", [])
    data = ledger.merge(data, [ledger.Row(**row) for row in rows])
    ledger.save(ledger_path, data)
    if not args.report_only:
        runner.steps.append(("all", round(time.perf_counter() - began, 1), 0))
    checks = verdicts(tests, whole, core, rows, stems, runner.steps)
    head = {"gpu": gpu, "commit": commit, "date": date, "command": command}
    text = report(runner.steps, checks, head)
    (out / f"{slug}-proof.md").write_text(text)
    print(text)
    return 0 if all(met for _, met, _ in checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())

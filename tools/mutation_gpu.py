"""GPU mutants of the kernel exercises, each built and checked by its notebook's own check cell, on a GPU.

    python tools/mutation_gpu.py --dry-run                  # list every mutant and estimate the run (no GPU needed)
    python tools/mutation_gpu.py                            # every exercise: one process each, all at once
    python tools/mutation_gpu.py --only 3b,3d --max-mutants 12 --timeout 300
    tools/gpu_session.sh mutation; tools/gpu_session.sh poll 540   # on a lent machine, past one call's 10 minutes

For each exercise (an exercise cell of a solution notebook, by id, and the cell that checks it), one process:
the notebook's code cells before the check cell, the exercise's left out, run once (imports, preflight, the build
cache, the other exercises' solutions), then the solution and its check (the baseline, which must pass), then each
mutant as an attendee would edit and re-run: the exercise cell with one change, then the check cell. Mutants:

- syntactic: a deterministic sample of ``utilities.mutants``' single changes of the solution regions
  (``--max-mutants``, spread evenly over the list);
- semantic: every ``MISTAKES`` entry of ``tools/mistakes/*.py`` for the exercise, and every ``CORRECT`` one
  (an alternative, which must pass).

A syntactic mutant is rejected when the check cell raises (``CheckFailure`` names the stage; another error counts
too, as the attendee sees it at once), survives when the check passes, and times out past ``--timeout`` seconds:
the process is then killed and started again from the next mutant, as it is after a CUDA error that leaves the
context unusable. A survivor is not proven to change a result (no wider differential test runs on the GPU): review
each; one shown equivalent by review goes into :data:`EQUIVALENT` (its exercise, its change, the mutated line as
the mutant's source has it, and why), and is then reported among the ``equivalents``, not the survivors
(``--rescore`` applies the table to a report already written, without a GPU). A semantic mistake is rejected only
by the checker's own verdict: a ``CheckFailure`` of the stage the mistake breaks (``utilities.mutants.sort_rejection``)
whose message names it; any other error, or a time-out, is reported as what it is.
Kernels go through the build cache (``utilities.machinery.buildcache.install()``), so after ``./course prebuild``
only the mutated kernel compiles: once per block of the exercise's contract (two: ``tests/test_course_parameters.py``),
and the check's race run (racecheck and synccheck; memcheck too where the check asks) loads it from the cache. The
dry run estimates the run from those builds and what the last run-through measured (:func:`estimate`). Results:
``results/mutation-gpu.json``, in the form of ``mutation-cpu.json`` (its ``equivalent`` counts only the survivors of
:data:`EQUIVALENT`, each with its reason under ``reviewed``: no differential test runs on a GPU).
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from utilities import mutants  # noqa: E402

MISTAKES = ROOT / "tools" / "mistakes"
RESULTS = ROOT / "results" / "mutation-gpu.json"


@dataclass(frozen=True)
class GpuExercise:
    """An exercise cell of ``solutions/<stem>.ipynb`` and the cell that checks it (ids); ``builds``: the builds of
    the mutated kernel one check needs (one per block of its contract), ``races``: whether the check runs its
    race run (a kernel whose threads share memory), ``plain``: whether they are plain numba kernels (seconds a build,
    not a cuBLASDx kernel's link)."""

    stem: str
    cell: str
    check: str
    builds: int = 2
    races: bool = True
    plain: bool = False


GPU_EXERCISES: dict[str, GpuExercise] = {
    "0 primer": GpuExercise("0_primer", "5a154c68", "a44a93f2"),
    "1 multipass": GpuExercise("1_multipass", "8c696818", "23b9f981"),
    "2a gemm_bias_relu": GpuExercise("2a_epilogue_fusion", "41e8a00f", "71d73ac1"),
    "2b b2b": GpuExercise("2b_back_to_back", "4bf83648", "6433fcd3"),
    "2c conv epilogue": GpuExercise("2c_conv_fusion", "1adead88", "57e7ddee"),
    "2d b2b epilogues": GpuExercise("2d_conv_back_to_back", "81a0b8c6", "8e9d76cc"),
    "3b products": GpuExercise("3b_ozaki_unfused", "9aeaea33", "c514e398"),
    "3c diagonals": GpuExercise("3c_ozaki_partial", "9859615e", "f139800c"),
    "3d fused": GpuExercise("3d_ozaki_fused", "e020ac1f", "0760b8c8"),
    # plain numba kernels: the residue's row and value kernels at 2 and 20 moduli, the digits' at 20, the
    # reconstruction at 5 counts read early and 2 read late
    "4b residue": GpuExercise("4b_ozaki2_gpu", "de0cfbfc", "06af9f15", builds=4, races=False, plain=True),
    "4b digit": GpuExercise("4b_ozaki2_gpu", "526bc1d1", "6eceaa16", builds=1, races=False, plain=True),
    "4b reconstruct": GpuExercise("4b_ozaki2_gpu", "d14ca3ab", "85ebdd0b", builds=7, races=False, plain=True),
}


@dataclass(frozen=True)
class Equivalent:
    """A syntactic mutant shown equivalent by review: the exercise, the change (``utilities.mutants``' ``what``), the
    mutated line as the mutant's source has it (``ast.unparse``'d, comments gone), and why no valid input can tell it
    from the solution."""

    exercise: str
    what: str
    line: str
    why: str


_TILE_VIEW = (
    "make_tensor takes only the view's data pointer (nvmath.device's OpaqueTensor: the slice's start) and the "
    "layout's shape and strides (gmem_{0}(k)); k1:k1 - TK starts where k1:k1 + TK does (k1 - TK >= 0 is only a "
    "shorter end), so the copy reads the same {1} x TK elements"
)
_RELU = (
    "at {0} == 0 both branches store a zero ({0} itself, or 0): only the sign of a zero could differ, which the "
    "FP16 output's comparison (and ReLU's definition) does not tell apart"
)
EQUIVALENT = (
    Equivalent("1 multipass", "Add -> Sub", "copy(make_tensor(a_rows[:, k1:k1 - TK], gmem_a(k)), next_a)",
               _TILE_VIEW.format("a", "TM")),
    Equivalent("1 multipass", "Add -> Sub", "copy(make_tensor(b_cols[:, k1:k1 - TK], gmem_b(k)), next_b)",
               _TILE_VIEW.format("b", "TN")),
    Equivalent("2a gemm_bias_relu", "Gt -> GtE", "tile[i] = x if x >= 0 else float32(0)", _RELU.format("x")),
    Equivalent("2c conv epilogue", "Gt -> GtE", "tile[i] = v if v >= 0 else float32(0)", _RELU.format("v")),
    Equivalent("3c diagonals", "constant 1 -> 2", "for s in range(d + 2):",
               "the extra term s = d + 1 pairs A's slice d + 1 with B's slice t = -1, and the pipeline loads B through "
               "a TMA tensor map over (k, n, S): a box at slice coordinate -1 lies outside it and arrives as zeros "
               "(as does A's slice S at the last diagonal), so the term adds 0 to the exact int32 sum. It costs one "
               "wasted tile product a diagonal, which the notebook's timing shows, not its results"),
)  # fmt: skip


def mutated_line(original: str, source: str) -> str:
    """The line a syntactic mutant changed: the first line of its ``source`` that ``original`` (the cell, unparsed as
    the mutant was) does not hold there, stripped ("" when none differs)."""
    before = ast.unparse(ast.parse(original)).splitlines()
    added = [line[2:] for line in difflib.ndiff(before, source.splitlines()) if line.startswith("+ ")]
    return added[0].strip() if added else ""


def reviewed(name: str, what: str, line: str) -> Equivalent | None:
    """The entry of :data:`EQUIVALENT` for exercise ``name``'s mutant ``what`` (``"line 46: Gt -> GtE"`` or
    ``"Gt -> GtE"``) that changed ``line`` into what it is, or None."""
    change = what.split(": ", 1)[1] if what.startswith("line ") else what
    for entry in EQUIVALENT:
        if entry.exercise == name and entry.what == change and entry.line == line:
            return entry
    return None


# What the estimate takes where the run-through measured nothing: a build of a cuBLASDx kernel after a prebuild, a
# check's own time, the race run (racecheck and synccheck at once on the smallest case: not yet measured on a GPU;
# issue 41 sets its limit at 10 s), a notebook's setup. Guesses, labelled as such where printed.
GUESS = {"build_s": 25.0, "plain_build_s": 4.0, "check_s": 15.0, "race_s": 10.0, "setup_s": 120.0}


# ---------------------------------------------------------------------------------------------------------------
# The plan: cells and mutants (no GPU)
# ---------------------------------------------------------------------------------------------------------------


def notebook_cells(stem: str) -> list[dict[str, Any]]:
    return json.loads((ROOT / "solutions" / f"{stem}.ipynb").read_text())["cells"]


def cell_plan(exercise: GpuExercise) -> tuple[list[str], str, str]:
    """The setup (the code cells before the check cell but the exercise's: 3b's end-to-end check, for one, also
    needs the epilogue exercise between them), the exercise cell's source, the check cell's."""
    cells = notebook_cells(exercise.stem)
    sources = {cell.get("id"): "".join(cell["source"]) for cell in cells if cell["cell_type"] == "code"}
    for want in (exercise.cell, exercise.check):
        if want not in sources:
            raise KeyError(f"solutions/{exercise.stem}.ipynb has no code cell with id {want!r}")
    order = [cell.get("id") for cell in cells if cell["cell_type"] == "code"]
    if order.index(exercise.check) < order.index(exercise.cell):
        raise KeyError(f"solutions/{exercise.stem}.ipynb: the check cell {exercise.check} comes before the exercise")
    setup = [sources[i] for i in order[: order.index(exercise.check)] if i != exercise.cell]
    return setup, sources[exercise.cell], sources[exercise.check]


@dataclass(frozen=True)
class Planned:
    """One mutant to run: its kind (``syntactic``, a mistake's kind, or ``alternative``), what it changes, the whole
    mutated cell, and for a mistake the text its rejection must hold."""

    kind: str
    what: str
    source: str
    message: str = ""
    stage: str = ""
    changed: str = ""  # a syntactic mutant's mutated line (:func:`mutated_line`)

    @property
    def alternative(self) -> bool:
        return self.kind == "alternative"

    @property
    def semantic(self) -> bool:
        return self.kind != "syntactic"


def sample(items: list[Any], count: int) -> list[Any]:
    """``count`` items spread evenly over ``items`` (all of them when there are fewer), always the same ones."""
    if count <= 0:
        return []
    if len(items) <= count:
        return list(items)
    return [items[(i * len(items)) // count] for i in range(count)]


def plan_mutants(name: str, source: str, max_mutants: int) -> tuple[list[Planned], list[str]]:
    """The mutants of exercise ``name`` (cell ``source``), and the semantic entries that do not apply, with why."""
    planned = [
        Planned("syntactic", f"line {m.line}: {m.what}", m.source, changed=mutated_line(source, m.source))
        for m in sample(mutants.mutants(source), max_mutants)
    ]
    mistakes, alternatives = mutants.load_mistakes(MISTAKES)
    broken = []
    for item in mutants.for_exercise(mistakes, name) + mutants.for_exercise(alternatives, name):
        kind = item.kind if isinstance(item, mutants.Mistake) else "alternative"
        try:
            message, stage = getattr(item, "message", ""), getattr(item, "stage", "")
            planned.append(Planned(kind, item.what, item.apply(source), message, stage))
        except ValueError as error:
            broken.append(str(error))
    return planned, broken


def selected(only: str) -> list[str]:
    """The exercises that one of the comma-separated ``only`` names (all when empty): a part of the exercise's name
    (``2a``, ``gemm_bias_relu``, ``1 multipass``), ``1_multipass`` for ``1 multipass``, or its notebook's name
    (``3b_ozaki_unfused``). A pattern that names none is an error: a GPU run would skip it silently."""

    def names(pattern: str, name: str) -> bool:
        return pattern in name or pattern.replace("_", " ") in name or pattern in GPU_EXERCISES[name].stem

    patterns = [p.strip() for p in only.split(",") if p.strip()]
    unknown = [p for p in patterns if not any(names(p, n) for n in GPU_EXERCISES)]
    if unknown:
        raise SystemExit(
            f"mutation_gpu: --only {', '.join(map(repr, unknown))} names no exercise; the exercises are "
            + ", ".join(map(repr, GPU_EXERCISES))
        )
    return [n for n in GPU_EXERCISES if not patterns or any(names(p, n) for p in patterns)]


def measured(root: Path = ROOT) -> tuple[str, dict[str, dict[str, float]]]:
    """The newest run-through of ``results/*-workshop.json`` (the GPU's name, and each notebook's row: its wall time,
    its longest check after an edit, its longest build), or ("", {}) without one."""
    found = []
    for path in (root / "results").glob("*-workshop.json"):
        try:
            data = json.loads(path.read_text())
            found.append((data.get("date", ""), data.get("gpu", path.stem), data["notebooks"]))
        except (OSError, ValueError, KeyError):
            continue
    if not found:
        return "", {}
    _, gpu, rows = max(found, key=lambda item: item[0])
    return gpu, {row["notebook"]: row for row in rows if "notebook" in row}


def estimate(
    name: str, mutants: int, rows: dict[str, dict[str, float]], guess: dict[str, float] = GUESS
) -> tuple[float, str]:
    """Seconds for exercise ``name`` with ``mutants`` mutants, and how they were reckoned: its notebook's setup and
    baseline (the run-through's wall time), then per mutant the check after an edit as the run-through measured it
    (an edit and its check, as a mutant is run: every build of the edited kernel, the race run's wait). Without a
    measurement, guesses: a cuBLASDx kernel's blocks build side by side (``utilities.contract_builds``), one plain
    kernel after another."""
    exercise = GPU_EXERCISES[name]
    row = rows.get(exercise.stem, {})
    setup = float(row.get("wall_s") or guess["setup_s"])
    after_edit = float(row.get("longest_check_after_edit_s") or 0.0)
    if after_edit:
        how = f"{after_edit:.0f} s a mutant: the run-through's longest check after an edit"
        return setup + (1 + mutants) * after_edit, how
    build = exercise.builds * guess["plain_build_s"] if exercise.plain else guess["build_s"]
    race = guess["race_s"] if exercise.races else 0.0
    how = f"guessed: {build:.0f} s of builds a mutant, {guess['check_s']:.0f} s its check" + (
        f", {race:.0f} s race run" if race else ""
    )
    return setup + (1 + mutants) * (build + guess["check_s"] + race), how


def dry_run(names: list[str], max_mutants: int, parallel: int = 0) -> int:
    """Print every exercise's mutants and the run's estimate; 1 when a cell is missing or a semantic entry does not
    apply."""
    problems = 0
    gpu, rows = measured()
    seconds: list[float] = []
    for name in names:
        exercise = GPU_EXERCISES[name]
        try:
            _, source, _ = cell_plan(exercise)
        except (KeyError, OSError) as error:
            print(f"{name}: {error}")
            problems += 1
            continue
        planned, broken = plan_mutants(name, source, max_mutants)
        print(
            f"{name} (solutions/{exercise.stem}.ipynb, cell {exercise.cell}, checked by {exercise.check}): "
            f"{len(planned)} mutants"
        )
        for p in planned:
            print(f"  {p.kind}: {p.what}")
        for why in broken:
            print(f"  DOES NOT APPLY: {why}")
        problems += len(broken)
        took, how = estimate(name, len(planned), rows)
        seconds.append(took)
        print(f"  estimate: {took / 60:.0f} min ({how})")
    if seconds:
        at_once = max(1, min(parallel or len(seconds), len(seconds)))
        total = max(max(seconds), sum(seconds) / at_once)
        source = f"the run-through on {gpu}" if gpu else "guesses (no run-through in results/)"
        print(
            f"estimate: {total / 60:.0f} min with {at_once} processes at once, {sum(seconds) / 60:.0f} min of process "
            f"time (from {source}; builds that run at once share the CPU's cores, which this does not model)"
        )
    return 1 if problems else 0


# ---------------------------------------------------------------------------------------------------------------
# The worker: one exercise, in a fresh process on the GPU machine
# ---------------------------------------------------------------------------------------------------------------


def _error_of(result: Any) -> BaseException | None:
    return result.error_before_exec or result.error_in_exec


def worker(plan_path: Path, out_dir: Path) -> int:
    """Run the setup, the baseline (when starting from the first mutant) and the mutants from ``start``; one JSON line
    per event in ``out_dir/results.jsonl``, the mutant under way in ``out_dir/progress``. Exits 3 after a CUDA error
    that leaves the context unusable (the parent starts a fresh process from the next mutant)."""
    from IPython.core.interactiveshell import InteractiveShell

    from utilities.checker import STICKY_CUDA_ERRORS, cuda_error_name

    plan = json.loads(plan_path.read_text())
    results = (out_dir / "results.jsonl").open("a")

    def emit(**event: Any) -> None:
        results.write(json.dumps(event) + "\n")
        results.flush()

    shell = InteractiveShell.instance()
    shell.run_cell("%matplotlib agg", silent=True)
    for index, source in enumerate(plan["setup"]):
        error = _error_of(shell.run_cell(source, silent=False))
        if error is not None:
            emit(event="setup failed", cell=index, error=f"{type(error).__name__}: {error}"[:800])
            return 2
    try:
        import cupy

        gpu = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    except Exception:  # the report says so
        gpu = "unknown"

    def attempt(cell: str) -> tuple[str, str, str, BaseException | None]:
        """(status, message, stage, error) of one edit: the cell, then the check; ``stage`` is the CheckFailure's
        ("" for any other error)."""
        error = _error_of(shell.run_cell(cell, silent=False))
        if error is not None:
            return "rejected", f"the exercise cell raised {type(error).__name__}: {error}"[:800], "", error
        error = _error_of(shell.run_cell(plan["check"], silent=False))
        if error is None:
            return "passed", "", "", None
        verdict = type(error).__name__ == "CheckFailure"
        how = "" if verdict else f"{type(error).__name__}: "
        return "rejected", (how + str(error))[:4000], getattr(error, "stage", "") if verdict else "", error

    if plan["start"] == 0:
        started = time.perf_counter()
        status, message, _, _ = attempt(plan["cell"])
        emit(event="baseline", status=status, message=message, gpu=gpu, seconds=time.perf_counter() - started)
        if status != "passed":
            return 2
    for index in range(plan["start"], len(plan["mutants"])):
        mutant = plan["mutants"][index]
        (out_dir / "progress").write_text(json.dumps({"index": index, "since": time.time()}))
        started = time.perf_counter()
        status, message, stage, error = attempt(mutant["source"])
        seconds = time.perf_counter() - started
        emit(event="mutant", index=index, status=status, message=message, stage=stage, seconds=seconds)
        if error is not None and cuda_error_name(error) in STICKY_CUDA_ERRORS:
            return 3
    (out_dir / "progress").write_text(json.dumps({"index": None}))
    return 0


# ---------------------------------------------------------------------------------------------------------------
# The parent: processes, time limits, the report
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class Job:
    """One exercise's process and what it has done so far."""

    name: str
    planned: list[Planned]
    setup: list[str]
    cell: str
    check: str
    folder: Path
    process: subprocess.Popen | None = None
    start: int = 0
    outcome: dict[int, tuple[str, str, float, str]] | None = None  # status, message, seconds, CheckFailure's stage
    baseline: str = ""
    gpu: str = ""
    failure: str = ""
    started: float = 0.0

    def launch(self, jobs_per_process: int) -> None:
        plan = {
            "setup": self.setup,
            "cell": self.cell,
            "check": self.check,
            "start": self.start,
            "mutants": [{"source": p.source} for p in self.planned],
        }
        plan_path = self.folder / f"plan-{self.start}.json"
        plan_path.write_text(json.dumps(plan))
        (self.folder / "progress").unlink(missing_ok=True)
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            "MPLBACKEND": "agg",
            "COURSE_BUILD_JOBS": str(jobs_per_process),
        }
        log = (self.folder / "log.txt").open("a")
        command = [sys.executable, str(Path(__file__).resolve()), "--worker", str(plan_path), str(self.folder)]
        self.process = subprocess.Popen(
            command, cwd=ROOT / "notebooks", env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.started = time.time()

    def events(self) -> list[dict[str, Any]]:
        path = self.folder / "results.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def running_since(self) -> tuple[int | None, float]:
        try:
            progress = json.loads((self.folder / "progress").read_text())
        except (OSError, ValueError):
            return None, self.started
        return progress.get("index"), progress.get("since", self.started)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def run_jobs(jobs: list[Job], parallel: int, timeout: float, setup_timeout: float, deadline: float = 0.0) -> None:
    """Run every job to its end, at most ``parallel`` processes at once, killing a mutant that runs past ``timeout``
    seconds (and a setup past ``setup_timeout``), and starting again from the next mutant. Past ``deadline`` seconds
    (0: none) every process is stopped: the mutants not finished are reported as not run."""
    waiting, active = list(jobs), []
    per_process = max(1, (os.cpu_count() or 2) // max(1, min(parallel, len(jobs))))
    stop_at = time.time() + deadline if deadline > 0 else float("inf")
    while waiting or active:
        if time.time() > stop_at:
            for job in active:
                job.kill()
                job.failure = job.failure or f"stopped at the deadline ({deadline:.0f} s)"
            return
        while waiting and len(active) < parallel:
            job = waiting.pop(0)
            job.outcome = job.outcome or {}
            job.launch(per_process)
            active.append(job)
        time.sleep(2)
        for job in list(active):
            done = {e["index"]: e for e in job.events() if e["event"] == "mutant"}
            for index, e in done.items():
                job.outcome[index] = (e["status"], e["message"], e["seconds"], e.get("stage", ""))
            index, since = job.running_since()
            code = job.process.poll()
            over = timeout if index is not None else setup_timeout
            if code is None and time.time() - since > over:
                job.kill()
                code = -9
                if index is not None:
                    job.outcome[index] = ("timed out", f"killed after {over:.0f} s", over, "")
                else:
                    job.failure = f"the setup or the baseline ran past {over:.0f} s"
            if code is None:
                continue
            for e in job.events():
                if e["event"] == "baseline":
                    job.baseline, job.gpu = e["status"] + (f": {e['message']}" if e["message"] else ""), e["gpu"]
                elif e["event"] == "setup failed":
                    job.failure = f"setup cell {e['cell']} failed: {e['error']}"
            if index is not None and index not in job.outcome:  # the process died on this mutant
                job.outcome[index] = ("rejected", f"the process died (exit {code}): a crash the attendee sees", 0.0, "")
            rest = [i for i in range(len(job.planned)) if i not in job.outcome]
            active.remove(job)
            if rest and not job.failure and job.baseline.startswith("passed"):
                job.start = rest[0]
                waiting.append(job)
            elif rest and not job.failure:
                job.failure = job.failure or f"the baseline did not pass: {job.baseline or 'no result'}"


def semantic_status(p: Planned, outcome: tuple[str, str, float, str] | None) -> tuple[str, str]:
    """(status, message) of a semantic mutant from its outcome: an alternative is ``accepted`` or a ``false alarm``;
    a mistake is ``rejected`` only by a CheckFailure of its stage that names it (``utilities.mutants``), else
    ``wrong stage``, ``misnamed``, ``error`` (another exception, or the process died), ``timed out``, ``missed``."""
    if outcome is None:
        return "not run", ""
    status, message, _, stage = outcome
    if p.alternative:
        return ("accepted" if status == "passed" else "false alarm"), message
    if status == "passed":
        return "missed", message
    if status == "timed out":
        return "timed out", message
    if not stage:  # not a CheckFailure: the exercise cell raised, another exception, or the process died
        return "error", message
    return mutants.sort_rejection(p, [(stage, message)]), message


def entry(job: Job) -> dict[str, Any]:
    """The exercise's entry of ``results/mutation-gpu.json``."""
    outcome = job.outcome or {}
    syntactic = [(p, outcome.get(i)) for i, p in enumerate(job.planned) if not p.semantic]
    judged = [(p, reviewed(job.name, p.what, p.changed)) for p, o in syntactic if o and o[0] == "passed"]
    equivalent = [(p, e) for p, e in judged if e is not None]
    survived = [p for p, e in judged if e is None]
    rejected = [p for p, o in syntactic if o and o[0] in ("rejected", "timed out")]
    verdicts = [mutants.Verdict(job.name, p.kind, p.what, *semantic_status(p, outcome.get(i)))
                for i, p in enumerate(job.planned) if p.semantic]  # fmt: skip
    semantic = mutants.SemanticScore(
        job.name, [v for v in verdicts if v.kind != "alternative"], [v for v in verdicts if v.kind == "alternative"]
    )
    counted = len(rejected) + len(survived)
    return {
        "exercise": job.name,
        "date": time.strftime("%Y-%m-%d"),
        "baseline": job.baseline or job.failure or "not run",
        "syntactic": {
            "rejected": len(rejected),
            "survived": len(survived),
            "equivalent": len(equivalent),  # no differential test on a GPU: only those shown so by review
            "score": len(rejected) / counted if counted else 1.0,
            "survivors": [p.what for p in survived],
            "equivalents": [p.what for p, _ in equivalent],
            "reviewed": [{"mutant": p.what, "line": e.line, "why": e.why} for p, e in equivalent],
            "sampled": len(syntactic),
            "timed_out": [p.what for p, o in syntactic if o and o[0] == "timed out"],
            "not_run": [p.what for p, o in syntactic if o is None],
        },
        "semantic": semantic.as_json(),
        "seconds": round(sum(o[2] for o in outcome.values()), 1),
    }


COMMUTING = "the swapped arguments commute (utilities.mutants.COMMUTATIVE): such a swap is no longer made"


def commuting_swap(cell: str, label: str) -> str:
    """The line of ``cell`` that a survivor ``label`` of an earlier run ("line 42: first two arguments swapped")
    changed, when every call on it with two arguments or more is one whose first two commute ("" otherwise)."""
    where, _, what = label.partition(": ")
    if what != "first two arguments swapped" or not where.startswith("line "):
        return ""
    number = int(where.removeprefix("line "))
    calls = [n for n in ast.walk(ast.parse(cell)) if isinstance(n, ast.Call) and getattr(n, "lineno", 0) == number]
    calls = [c for c in calls if len(c.args) >= 2]
    if calls and all(mutants.called_name(c) in mutants.COMMUTATIVE for c in calls):
        return ast.unparse(calls[0])
    return ""


def rescore_entry(entry: dict[str, Any], planned: list[Planned], cell: str = "") -> list[str]:
    """Move the survivors of ``entry`` (a report's exercise) that :data:`EQUIVALENT` holds to its equivalents, each
    found by its label among ``planned`` (the run's sample, rebuilt: one mutant per label, else it stays), and those
    that swapped commuting arguments of ``cell`` (:func:`commuting_swap`); returns the labels moved."""
    name, syntactic = entry["exercise"], entry["syntactic"]
    by_label: dict[str, list[Planned]] = {}
    for p in planned:
        by_label.setdefault(p.what, []).append(p)
    moved = []
    for label in list(syntactic["survivors"]):
        found = by_label.get(label, [])
        equivalent = reviewed(name, label, found[0].changed) if len(found) == 1 else None
        swapped = commuting_swap(cell, label) if equivalent is None and cell else ""
        if equivalent is None and not swapped:
            continue
        line, why = (equivalent.line, equivalent.why) if equivalent else (swapped, COMMUTING)
        syntactic["survivors"].remove(label)
        syntactic["equivalents"] = [*syntactic.get("equivalents", []), label]
        syntactic.setdefault("reviewed", []).append({"mutant": label, "line": line, "why": why})
        moved.append(label)
    syntactic["survived"] = len(syntactic["survivors"])
    syntactic["equivalent"] = len(syntactic["equivalents"])
    counted = syntactic["rejected"] + syntactic["survived"]
    syntactic["score"] = syntactic["rejected"] / counted if counted else 1.0
    return moved


def rescore(path: Path, parser: argparse.ArgumentParser) -> int:
    """Apply :data:`EQUIVALENT` to the report at ``path`` without a GPU: each exercise's sample is rebuilt as its run
    drew it (the report's command gives ``--max-mutants``), and its reviewed survivors become equivalents."""
    report = json.loads(path.read_text())
    words = shlex.split(report.get("command", ""))
    tool = next((i for i, w in enumerate(words) if w.endswith("mutation_gpu.py")), len(words) - 1)
    known, _ = parser.parse_known_args(words[tool + 1 :])
    for entry in report["exercises"]:
        if entry["exercise"] not in GPU_EXERCISES:
            continue
        _, cell, _ = cell_plan(GPU_EXERCISES[entry["exercise"]])
        planned, _ = plan_mutants(entry["exercise"], cell, known.max_mutants)
        for label in rescore_entry(entry, [p for p in planned if not p.semantic], cell):
            print(f"{entry['exercise']}: {label}: equivalent (reviewed)")
        for label in entry["syntactic"]["survivors"]:
            print(f"{entry['exercise']}: {label}: SURVIVED")
    command = f"python tools/mutation_gpu.py --rescore --json {path}"
    report["rescored"] = {"date": time.strftime("%Y-%m-%d"), "command": command}
    path.write_text(json.dumps(report, indent=1) + "\n")
    return 0 if not any(e["syntactic"]["survivors"] for e in report["exercises"]) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated: exercises whose name contains one of these")
    parser.add_argument("--max-mutants", type=int, default=10, help="syntactic mutants per exercise (default 10)")
    parser.add_argument("--timeout", type=float, default=240, help="seconds per mutant, build and check (default 240)")
    parser.add_argument("--setup-timeout", type=float, default=900, help="seconds for the setup and the baseline")
    parser.add_argument("--parallel", type=int, default=len(GPU_EXERCISES), help="processes at once (default: all)")
    parser.add_argument(
        "--deadline",
        type=float,
        default=0,
        help="stop everything after this many seconds, write what finished (the rest: not_run)",
    )
    parser.add_argument("--json", default=str(RESULTS), help="where to write the scores")
    parser.add_argument("--dry-run", action="store_true", help="list the mutants, run nothing (no GPU needed)")
    parser.add_argument(
        "--rescore", action="store_true", help="apply the table of reviewed equivalents to the report at --json"
    )
    parser.add_argument("--worker", nargs=2, metavar=("PLAN", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(Path(args.worker[0]), Path(args.worker[1]))
    if args.rescore:
        return rescore(Path(args.json), parser)
    names = selected(args.only)
    if args.dry_run:
        return dry_run(names, args.max_mutants, args.parallel)
    jobs = []
    folder = Path(tempfile.mkdtemp(prefix="mutation-gpu-"))
    for name in names:
        setup, cell, check = cell_plan(GPU_EXERCISES[name])
        planned, broken = plan_mutants(name, cell, args.max_mutants)
        for why in broken:
            print(f"{name}: a semantic entry does not apply: {why}", flush=True)
        job_dir = folder / name.replace(" ", "_")
        job_dir.mkdir()
        jobs.append(Job(name, planned, setup, cell, check, job_dir))
    print(f"{sum(len(j.planned) for j in jobs)} mutants of {len(jobs)} exercises; logs in {folder}", flush=True)
    started = time.perf_counter()
    try:
        run_jobs(jobs, args.parallel, args.timeout, args.setup_timeout, args.deadline)
    finally:
        for job in jobs:
            job.kill()
    entries = [entry(job) for job in jobs]
    for e in entries:
        s, m = e["syntactic"], e["semantic"]
        print(
            f"{e['exercise']}: baseline {e['baseline'][:60]}; syntactic {s['rejected']} rejected, {s['survived']} "
            f"survived of {s['sampled']}; semantic {m['rejected']} of {m['mistakes']} rejected, {m['accepted']} "
            f"of {m['alternatives']} alternatives accepted"
        )
        for what in s["survivors"]:
            print(f"    SURVIVED {what}")
        for line in e["semantic"]["holes"] + e["semantic"]["false_alarms"]:
            print(f"    {line}")
    gpu = next((j.gpu for j in jobs if j.gpu), "unknown")
    command = shlex.join(["python", "tools/mutation_gpu.py", *(argv if argv is not None else sys.argv[1:])])
    write(Path(args.json), command, gpu, entries)
    print(f"wrote {args.json} ({time.perf_counter() - started:.0f} s)")
    return 0 if all(not e["syntactic"]["survivors"] and not e["semantic"]["holes"] for e in entries) else 1


def write(path: Path, command: str, gpu: str, entries: list[dict[str, Any]]) -> None:
    """Merge ``entries`` into the report at ``path`` (an exercise's new entry replaces its old one)."""
    try:
        old = {e["exercise"]: e for e in json.loads(path.read_text())["exercises"]}
    except (OSError, ValueError, KeyError):
        old = {}
    old.update({e["exercise"]: e for e in entries})
    rank = {name: i for i, name in enumerate(GPU_EXERCISES)}
    merged = sorted(old.values(), key=lambda e: rank.get(e["exercise"], len(rank)))
    report = {"command": command, "date": time.strftime("%Y-%m-%d"), "gpu": gpu, "exercises": merged}
    path.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())

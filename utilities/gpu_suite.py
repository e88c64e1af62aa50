"""The GPU suite: one command that checks and measures the course on the GPU at hand, and writes its report.

    ./course gpu-suite                  # everything
    python -m utilities.gpu_suite --parts tests,bench

Parts (in this order):
- ``prebuild``: builds every kernel the tests and notebooks use, in parallel processes, into the build cache;
- ``builds``: the kernel build times with and without the build cache (``tools/build_times.py``);
- ``tests``: the GPU tests and the plain kernels' tests on the device (``pytest -m 'gpu or device'``);
- ``notebooks``: nbval on every solution notebook;
- ``exercises``: nbval on every exercise notebook as generated: they must run to the end, their checkers
  reporting the unfinished exercises;
- ``bench``: the benchmarks of every track beside cuBLAS, at the sizes of the report;
- ``workshop`` (only when named): the run-through of the day (``utilities.workshop``): every exercise notebook with
  the solutions filled in, after the prebuild; ``results/<gpu>-workshop.json``, and its table in the report;
- ``ledger`` (only when named): every GPU notebook, solution and filled exercise, in fresh kernels, four at a time
  (``utilities.ledger``): ``<out>/<gpu>-notebooks.json``, to merge with ``python -m utilities.ledger merge``.

A prebuild of the whole course (no ``--jobs``) is recorded as the report's ``prebuild`` build entry.

Figures that notebooks and benchmarks record go through ``$COURSE_RESULTS`` (JSON lines), and the report is
written to ``results/<gpu>.json`` and ``results/<gpu>.md`` (format: the RESULTS contract, ``utilities.report``).
On a machine without a GPU it says so and exits with status 2: it never passes silently.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("prebuild", "builds", "tests", "notebooks", "exercises", "bench", "workshop", "ledger")
DEFAULT_PARTS = PARTS[:-2]


def _run(cmd: list[str], log: Path, env: dict[str, str] | None = None, background: bool = False):
    print(f"gpu-suite: $ {' '.join(cmd)}  (log: {log})", flush=True)
    out = log.open("w")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env or os.environ.copy())
    if background:
        return proc
    code = proc.wait()
    print(f"gpu-suite: exit {code}; last lines of {log.name}:\n" + "".join(log.read_text().splitlines(True)[-15:]))
    return code


def run_notebooks(paths: list[Path], logs: Path, part: str) -> int:
    """nbval on each notebook in its own process, all at once (each builds its own kernels); 1 if any failed."""
    procs = []
    for path in paths:
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(path.relative_to(ROOT))]
        procs.append((path, _run(cmd, logs / f"{part}_{path.stem}.log", background=True)))
    failed = [path.name for path, proc in procs if proc.wait() != 0]
    for path, _ in procs:
        lines = (logs / f"{part}_{path.stem}.log").read_text().splitlines()
        print(f"gpu-suite: {part} {path.name}: {lines[-1] if lines else 'no output'}")
    return 1 if failed else 0


def build_times(logs: Path, results: Path) -> list[subprocess.Popen]:
    """Start the before/after build measurements (background; each is a fresh process)."""
    cache = Path(tempfile.mkdtemp(prefix="build-times-"))
    py = [sys.executable, "tools/build_times.py"]
    before = _run([*py, "--mode", "before"], logs / "builds_before.log", background=True)
    # the cached build generates code in worker processes: leave a core to the build without the cache beside it
    jobs = os.environ.get("COURSE_BUILD_JOBS", str(max(1, (os.cpu_count() or 2) - 2)))
    env = {**os.environ, "COURSE_BUILD_JOBS": jobs}
    after = subprocess.Popen(
        [
            "bash",
            "-c",
            f"{' '.join(py)} --mode after --cache {cache} && {' '.join(py)} --mode after --cache {cache} --restart",
        ],
        cwd=ROOT,
        stdout=(logs / "builds_after.log").open("w"),
        stderr=subprocess.STDOUT,
        env=env,
    )
    return [before, after]


def collect_builds(logs: Path) -> list[dict]:
    runs = {}
    for name in ("builds_before.log", "builds_after.log"):
        path = logs / name
        for line in path.read_text().splitlines() if path.exists() else []:
            if line.startswith("{"):
                row = json.loads(line)
                runs[(row["mode"], row["restart"])] = row
    entries = []
    for mode in ("before", "after"):
        main = runs.get((mode, False))
        if not main:
            continue
        restart = runs.get((mode, True))
        digests = dict(main.get("output_sha256", {}))
        if restart and "first" in restart.get("output_sha256", {}):
            digests["warm_restart"] = restart["output_sha256"]["first"]
        workers = main.get("workers", 0)
        entries.append(
            {
                "kernel": f"ozaki.fused ({'no cache' if mode == 'before' else f'build cache, {workers} workers'})",
                "first_s": main["first_s"],
                "edit_s": main["edit_s"],
                "new_shape_s": main["new_shape_s"],
                # without the cache nothing outlives the process: a restart is a first build
                "warm_restart_s": restart["first_s"] if restart else (main["first_s"] if mode == "before" else None),
                "cache": main.get("cache"),
                "output_sha256": digests,
                "checks": main.get("checks"),
            }
        )
    return same_outputs(entries)


def same_outputs(entries: list[dict]) -> list[dict]:
    """Mark each cached build whose outputs are bit for bit those of the build without the cache."""
    plain = next((e["output_sha256"] for e in entries if "no cache" in e["kernel"]), None)
    for entry in entries:
        if plain is not None and "no cache" not in entry["kernel"]:
            mine = entry["output_sha256"]
            # the warm restart builds the first shape again; "first" of the plain build is its reference
            reference = {**plain, "warm_restart": plain.get("first")}
            pairs = [(digest, reference[k]) for k, digest in mine.items() if reference.get(k)]
            entry["same_output_as_no_cache"] = bool(pairs) and all(a == b for a, b in pairs)
    return entries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the course's GPU suite")
    parser.add_argument("--parts", default=",".join(DEFAULT_PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    parser.add_argument("--out", default=str(ROOT / "results"))
    parser.add_argument("--logs", default=None, help="folder for logs (default: a temporary one)")
    parser.add_argument("--sizes", default="2048,4096,8192")
    parser.add_argument("--accuracy", default="yes", choices=["yes", "no", "only"])
    parser.add_argument("--tracks", default="ozaki,ozaki2,fusion,conv,multipass", help="benchmarks of these tracks")
    parser.add_argument("--jobs", default="", help="prebuild only these kind:shape jobs (default: all the course's)")
    parser.add_argument("--select", default="", help="tests, notebooks, exercises: names containing one of these")
    args = parser.parse_args(argv)
    parts = args.parts.split(",")
    # subprocesses (tools/build_times.py, pytest, nbval kernels) import utilities from this checkout
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    from .preflight import PreflightError, preflight

    try:
        env = preflight(require_gpu=True, require_mathdx=True)
    except PreflightError as exc:
        print(f"gpu-suite: cannot run: {exc}", file=sys.stderr)
        return 2
    logs = Path(args.logs or tempfile.mkdtemp(prefix="gpu-suite-"))
    logs.mkdir(parents=True, exist_ok=True)
    records_dir = logs / "records"
    records_dir.mkdir(exist_ok=True)
    os.environ["COURSE_RESULTS"] = str(records_dir)
    start = time.perf_counter()
    failures = []
    background = build_times(logs, records_dir) if "builds" in parts else []
    prebuilt: list[dict] = []
    if "prebuild" in parts:
        jobs = ["--jobs", args.jobs] if args.jobs else []
        began = time.perf_counter()
        code = _run([sys.executable, "-m", "utilities.prebuild", *jobs], logs / "prebuild.log")
        failures += ["prebuild"] if code else []
        if not code and not args.jobs:
            prebuilt.append(
                {
                    "kernel": "prebuild",
                    "prebuild_s": round(time.perf_counter() - began, 1),
                    "note": "every kernel of the course",
                }
            )
    if "tests" in parts:
        select = ["-k", " or ".join(args.select.split(","))] if args.select else []
        code = _run(
            [sys.executable, "-m", "pytest", "-m", "gpu or device", "-q", "-p", "no:cacheprovider", *select, "tests"],
            logs / "tests.log",
        )
        failures += ["tests"] if code else []
    for part, folder in (("notebooks", "solutions"), ("exercises", "notebooks")):
        if part in parts:
            paths = sorted((ROOT / folder).glob("*.ipynb"))
            paths = [p for p in paths if any(s in p.name for s in args.select.split(","))]
            failures += [part] if run_notebooks(paths, logs, part) else []
    if "bench" in parts:
        cmd = [
            sys.executable,
            "-m",
            "utilities.bench_all",
            "--sizes",
            args.sizes,
            "--plots",
            str(Path(args.out)),
            "--accuracy",
            args.accuracy,
            "--tracks",
            args.tracks,
        ]
        code = _run(cmd, logs / "bench.log")
        failures += ["bench"] if code else []
    workshop_json = Path(args.out) / "workshop.json"
    if "workshop" in parts:
        from .peaks import gpu_slug

        workshop_json = Path(args.out) / f"{gpu_slug(env.gpu.name)}-workshop.json"
        select = [s for s in args.select.split(",") if s]
        code = _run(
            [sys.executable, "-m", "utilities.workshop", *select, "--json", str(workshop_json)], logs / "workshop.log"
        )
        failures += ["workshop"] if code else []
    if "ledger" in parts:
        from .peaks import gpu_slug

        select = [s for s in args.select.split(",") if s]
        ledger_json = Path(args.out) / f"{gpu_slug(env.gpu.name)}-notebooks.json"
        code = _run(
            [sys.executable, "-m", "utilities.ledger", "run", *select, "--parallel", "4", "--ledger", str(ledger_json)],
            logs / "ledger.log",
        )
        failures += ["ledger"] if code else []
    if any([proc.wait() for proc in background]):  # wait for every run; a failed one fails the suite
        failures.append("builds")
    from . import report

    records, builds = report.merge_jsonl(records_dir)
    builds = [*builds, *collect_builds(logs), *prebuilt]
    gpu = env.gpu
    command = "./course gpu-suite " + " ".join(argv if argv is not None else sys.argv[1:])
    json_path, md_path = report.write_report(
        records,
        builds,
        gpu=gpu.name,
        compute_capability=gpu.cc,
        command=command.strip(),
        versions=report.collect_versions(),
        out_dir=args.out,
    )
    if "workshop" in parts and workshop_json.exists():
        from .workshop import Entry, table

        entries = [Entry(**e) for e in json.loads(workshop_json.read_text())["notebooks"]]
        with md_path.open("a") as md:
            md.write(f"\n## Workshop run-through\n\n`{workshop_json.name}`, after the prebuild:\n\n{table(entries)}\n")
    print(f"gpu-suite: {time.perf_counter() - start:.0f} s; report: {json_path}, {md_path}; logs: {logs}")
    print(md_path.read_text())
    if failures:
        print(f"gpu-suite: FAILED parts: {', '.join(failures)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Does a course kernel get the same build-cache key whatever its process built before? Checked on the CPU.

For each prebuild job (``python -m utilities.prebuild --list``) two fresh processes build it on the CPU
(``utilities.machinery.cpu_build``): one builds the job alone, the other first builds the jobs a notebook builds
before it (:func:`history`: the course's jobs before it in the notebooks' order, and a cuBLASDx kernel before a
plain one, as 4b builds its Ozaki-I kernel before its plain kernels). Every kernel the job builds must get the same
key in both, and the same whatever order numba gives its modules (each process also tries two others). Usage::

    python tools/key_determinism.py                          # every job, linked: the build cache's real keys
    python tools/key_determinism.py --typing-only            # kernels typed, no code generated, nothing linked
    python tools/key_determinism.py --jobs multipass:int8:1 --typing-only

It needs the GPU stack as pinned and a C compiler (not a GPU). With ``--typing-only`` libmathdx generates no code;
a linked kernel's key names each piece of its code by the piece's recipe too, so the typed keys are the keys a link
looks up. Prints one line a job and exits 1 if any key differed.
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
PLAIN_KINDS = ("slicing", "ozaki_auto", "ozaki2", "ozaki2_auto")  # plain numba kernels: no cuBLASDx
CUBLASDX_BEFORE_PLAIN = "fused:256x256x384"  # 4b builds its Ozaki-I fused kernel before its plain kernels


def history(job: str, jobs: list[str]) -> list[str]:
    """The jobs a process builds before ``job`` in the "after" run: the one before it in ``jobs`` (the last for the
    first), and a cuBLASDx kernel first when ``job`` is a plain one."""
    i = jobs.index(job) if job in jobs else 0
    before = [jobs[i - 1]] if len(jobs) > 1 else []
    if job.partition(":")[0] in PLAIN_KINDS and before[:1] != [CUBLASDX_BEFORE_PLAIN]:
        before.insert(0, CUBLASDX_BEFORE_PLAIN)
    return [b for b in before if b != job]


def worker(jobs: list[str], link: bool) -> None:
    """Build ``jobs`` in this process on the CPU, in order; print one JSON line: each job's kernels and keys."""
    from utilities.machinery import cpu_build

    cpu_build.enter(link=link)
    from utilities import prebuild
    from utilities.machinery import buildcache
    from utilities.machinery.buildcache import linking

    buildcache.install(quiet=True)
    found = {}
    for job in jobs:
        keys, typed = len(linking.KEYS), len(cpu_build.TYPED)
        kind, _, spec = job.partition(":")
        prebuild.BUILDERS[kind](kind, spec, 7)
        found[job] = sorted(linking.KEYS[keys:] if link else cpu_build.TYPED[typed:])
    print(json.dumps(found))


def run(jobs: list[str], link: bool, cache: Path) -> dict[str, list[list[str]]]:
    # a fresh process on the real numba-cuda: not the simulator the CPU tests choose (conftest.py)
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM", "COURSE_SIMULATOR_AUTO")}
    env.update(COURSE_BUILD_CACHE=str(cache), COURSE_CPU_BUILD=os.environ.get("COURSE_CPU_BUILD", "9.0"))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.setdefault("COURSE_BUILD_JOBS", "2")
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", ",".join(jobs)]
    cmd += [] if link else ["--typing-only"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT, check=False)
    if done.returncode:
        raise RuntimeError(f"{' '.join(jobs)}: exit {done.returncode}\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def compare(job: str, alone: list[list[str]], after: list[list[str]]) -> list[str]:
    """What differs between the job's kernels and keys built alone and built after others (empty: nothing). A kernel
    the history built already is not looked up again (numba's dispatcher holds it), so "after" may list fewer; every
    key it lists must be one the job got alone."""
    problems = [f"{name}: {key}" for name, key in alone + after if "another order" in key]
    keys = {(name, key) for name, key in alone}
    differ = sorted({name for name, key in after if (name, key) not in keys})
    if differ:
        problems.append(f"other keys for {', '.join(differ)}")
    if not alone:
        problems.append("it built no kernel")
    return problems


def check(jobs: list[str], order: list[str], link: bool, cache: Path) -> list[tuple[str, float, list[str]]]:
    """(job, seconds, problems) for each job: alone, then after its :func:`history`, sharing ``cache``."""
    results = []
    for job in jobs:
        start = time.perf_counter()
        before = history(job, order)
        try:
            alone = run([job], link, cache)[job]
            after = run([*before, job], link, cache)[job]
            problems = compare(job, alone, after)
        except RuntimeError as error:
            problems = [f"failed: {error}"]
        results.append((job, time.perf_counter() - start, problems))
        verdict = "same keys" if not problems else "; ".join(problems)
        print(
            f"key_determinism: {job} (after {', '.join(before) or 'nothing'}): {verdict} [{results[-1][1]:.0f} s]",
            flush=True,
        )
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", help="comma-separated prebuild jobs (default: every job of the course)")
    parser.add_argument("--typing-only", action="store_true", help="type the kernels; generate and link nothing")
    parser.add_argument("--cache", help="the build cache to share (default: a fresh temporary folder)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker.split(","), link=not args.typing_only)
        return 0
    sys.path.insert(0, str(ROOT))
    from utilities import prebuild
    from utilities.machinery import cpu_build

    why = cpu_build.unavailable()
    if why:
        print(f"key_determinism: cannot build kernels on this CPU: {why}", file=sys.stderr)
        return 2
    order = prebuild.COURSE_JOBS.split(",")
    jobs = args.jobs.split(",") if args.jobs else order
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="key-determinism-") as scratch:
        cache = Path(args.cache) if args.cache else Path(scratch)
        results = check(jobs, order, not args.typing_only, cache)
    bad = [job for job, _, problems in results if problems]
    minutes = (time.perf_counter() - start) / 60
    print(f"key_determinism: {len(jobs) - len(bad)} of {len(jobs)} jobs kept their keys in {minutes:.1f} min")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())

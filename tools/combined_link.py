"""nvJitLink's time for a check's kernel, its libmathdx functions linked as separate modules and as one combined code
(``utilities.machinery.buildcache.combined``), built on this machine's CPU for sm_90a: the seconds of each, and
whether the two links made the same machine code.

    python tools/combined_link.py --jobs unfused:256x256x384,b2b:576x64x128 [--cache DIR]

Runs in the CPU build's environment (``tools/cpu_bundle.sh`` makes one: ``$CPU_BUILD_VENV/bin/python``). Each job is
a prebuild job of a check's twin (``python -m utilities.prebuild --list``; its kernel is the one an attendee edits).
Per job, in fresh processes: a build that fills the cache; its kernels' cubins removed and linked again from separate
modules (``COURSE_COMBINED_LINK=off``); removed again and built as a prebuild job keeps code (the combined code
generated); removed again and linked from the combined code. Prints a table and, with ``--json``, writes it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

STAGE = "linking kernels (nvJitLink)"
SCRIPT = """
import json, sys
from utilities import prebuild
prebuild.build_one(sys.argv[1], 7)
from utilities.machinery import buildcache
from utilities.machinery.buildcache import linking
lazy = buildcache._STATE["lazy"]
print("RESULT " + json.dumps({"seconds": dict(lazy.seconds), "keys": linking.KEYS, "linked": linking.LINKED}))
"""


def build(job: str, cache: Path, combined: bool) -> dict:
    """One prebuild job in a fresh CPU-build process: its stage seconds, kernels' keys and what it linked."""
    env = {
        **os.environ,
        "COURSE_CPU_BUILD": "9.0",
        "COURSE_BUILD_CACHE": str(cache),
        "COURSE_COMBINED_LINK": "on" if combined else "off",  # a CPU build combines only when told
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run([sys.executable, "-c", SCRIPT, job], env=env, capture_output=True, text=True, cwd=ROOT)
    if done.returncode:
        raise SystemExit(f"{job}: the build failed:\n{done.stderr[-3000:]}")
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def relink(job: str, keys: list[str], cache: Any, cache_dir: Path, combined: bool) -> dict:
    """The job built again with its kernels' cubins removed from the cache: each is linked anew."""
    for key in keys:
        cache.remove(key)
    return build(job, cache_dir, combined)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default="unfused:256x256x384", help="prebuild jobs of check twins, comma-separated")
    parser.add_argument("--cache", help="build cache folder (default: a new one; codes are generated first)")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    from utilities import prebuild
    from utilities.machinery import cpu_build
    from utilities.machinery.buildcache import DiskCache
    from utilities.machinery.buildcache.linking import _unnamed
    from utilities.machinery.cubin import machine_code

    why = cpu_build.unavailable()
    if why:
        raise SystemExit(f"no CPU build of kernels here: {why}")
    twins = prebuild.check_kernels()
    cache_dir = Path(args.cache) if args.cache else Path(tempfile.mkdtemp(prefix="combined-link-"))
    cache = DiskCache(cache_dir)
    rows = []
    for job in args.jobs.split(","):
        if prebuild.kernel_of(job) not in twins:
            raise SystemExit(f"{job}: not a check's twin (no attendee edits its kernel); one of {sorted(twins)}")
        keys = [key for _, key in build(job, cache_dir, combined=False)["keys"]]

        separate = relink(job, keys, cache, cache_dir, False)
        cubins_separate = {k: _unnamed(cache.get(k))[1] for k in keys}
        relink(job, keys, cache, cache_dir, True)  # from separate modules again; the job keeps the combined code
        merged = relink(job, keys, cache, cache_dir, True)
        same = all(machine_code(_unnamed(cache.get(k))[1]) == machine_code(cubins_separate[k]) for k in keys)
        rows.append(
            {
                "job": job,
                "kernels_linked": len(merged["linked"]),
                "separate_s": round(separate["seconds"].get(STAGE, 0.0), 2),
                "combined_s": round(merged["seconds"].get(STAGE, 0.0), 2),
                "same_machine_code": same,
            }
        )
    print(f"{'job':<40} {'kernels':>7} {'separate s':>10} {'combined s':>10}  same machine code")
    for r in rows:
        print(
            f"{r['job']:<40} {r['kernels_linked']:>7} {r['separate_s']:>10.2f} {r['combined_s']:>10.2f}  "
            f"{'yes' if r['same_machine_code'] else 'NO'}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"cpu": os.uname().machine, "rows": rows}, indent=1) + "\n")
    return 0 if all(r["same_machine_code"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""What ptxas made of course kernels built on this machine's CPU for sm_90a: registers, stack, machine code, and (with
``nvdisasm``) the tensor-core and shared-memory instructions and the offsets of the ``ldmatrix`` loads.

    python tools/cubin_report.py --jobs conv_halo:64x64,conv_halo_b2b:64x64x64 [--cache DIR] [--nvdisasm PATH]

Runs in the CPU build's environment (``tools/cpu_bundle.sh`` makes one: ``$CPU_BUILD_VENV/bin/python``): builds the
prebuild jobs (``python -m utilities.prebuild --arch sm_90 --keys``), then reads each kernel's cubin from the build
cache (``utilities.machinery.cubin``). ``nvdisasm`` is not part of the course's stack: ``pip install
nvidia-cuda-nvdisasm`` puts one under ``site-packages/nvidia/cu13/bin`` (found there, on PATH, or given). The
``ldmatrix`` offsets show a tile's row stride: a padded layout's rows 144 bytes apart (0x900 for 16 rows), a dense
one's 128 (0x800).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

COUNTED = ("HMMA", "LDSM", "LDGSTS", "UTMALDG", "SYNCS", "BAR.SYNC", "STG", "LDS", "STS", "STL", "LDL", "CALL")


def find_nvdisasm(given: str | None) -> str | None:
    if given:
        return given
    found = shutil.which("nvdisasm")
    if found:
        return found
    import site

    for folder in site.getsitepackages():
        candidate = Path(folder) / "nvidia" / "cu13" / "bin" / "nvdisasm"
        if candidate.exists():
            return str(candidate)
    return None


def disassembly(cubin: bytes, nvdisasm: str) -> dict[str, object]:
    """Counts of :data:`COUNTED` instructions and the distinct ``LDSM`` offsets (bytes past their base register)."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([nvdisasm, f.name], capture_output=True, text=True, check=True).stdout
    ops = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9]*(?:\.[A-Z0-9]+)*)", text)
    counts = {name: sum(1 for op in ops if op == name or op.startswith(name + ".")) for name in COUNTED}
    offsets = sorted({int(v, 16) for v in re.findall(r"LDSM[.\w]*\s+R\d+,\s*\[R\d+\+0x([0-9a-f]+)\]", text)})
    return {**counts, "ldsm_offsets": [hex(v) for v in offsets]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", required=True, help="prebuild jobs, comma-separated")
    parser.add_argument("--cache", help="build cache folder (default: a new one)")
    parser.add_argument("--nvdisasm", help="path of nvdisasm (default: on PATH or in site-packages)")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    from utilities.machinery import cpu_build, cubin
    from utilities.machinery.buildcache import DiskCache
    from utilities.machinery.buildcache.linking import _unnamed

    why = cpu_build.unavailable()
    if why:
        raise SystemExit(f"no CPU build of kernels here: {why}")
    cache_dir = Path(args.cache) if args.cache else Path(tempfile.mkdtemp(prefix="cubin-report-"))
    keys_file = cache_dir / "cubin-report-keys.json"
    env = {**os.environ, "COURSE_BUILD_CACHE": str(cache_dir), "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "utilities.prebuild", "--arch", "sm_90", "--jobs", args.jobs]
    done = subprocess.run([*command, "--keys", str(keys_file)], env=env, cwd=ROOT)
    if done.returncode:
        raise SystemExit(f"the prebuild failed (exit {done.returncode})")
    nvdisasm = find_nvdisasm(args.nvdisasm)
    cache = DiskCache(cache_dir)
    rows = []
    for job, kernels in json.loads(keys_file.read_text()).items():
        for kernel in kernels:
            payload = cache.get(kernel["key"], count=False)
            if payload is None:
                continue
            code = _unnamed(payload)[1]
            for found in cubin.resources(code).values():
                if "text" not in found or "registers" not in found:
                    continue  # a callee (division routines, libmathdx's copies): its kernel's row counts it
                row = {"job": job, "kernel": kernel["kernel"], **found}
                if nvdisasm:
                    row.update(disassembly(code, nvdisasm))
                rows.append(row)
    for r in rows:
        counts = " ".join(f"{n}={r[n]}" for n in COUNTED if n in r)
        print(f"{r['job']:<44} {r['kernel'].rsplit('.', 1)[-1]:<24} registers {r['registers']:>3}, stack "
              f"{r.get('max_stack', r.get('min_stack', 0))} B, code {r['text']} B  {counts}")  # fmt: skip
        if r.get("ldsm_offsets"):
            print(f"{'':<44} ldmatrix offsets: {' '.join(r['ldsm_offsets'])}")
    if not nvdisasm:
        print("(no nvdisasm: pip install nvidia-cuda-nvdisasm, or --nvdisasm PATH, for the instruction counts)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

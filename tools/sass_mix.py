"""The machine-code instruction mix of the course's plain numba kernels, built on this machine's CPU (no GPU).

    $CPU_BUILD_VENV/bin/python tools/sass_mix.py "residue_known_rows" "reconstruct_kernel" [--sm 90] [--top 12]

Each name picks the kernels of ``tools/compile_kernels.py`` whose name contains it (the same signatures). numba
compiles the kernel to PTX, ``ptxas`` assembles it, and ``nvdisasm`` (as ``tools/cubin_report.py`` finds it) lists
its instructions. Run it in the CPU build's environment (``tools/cpu_bundle.sh`` makes one), whose NVVM is the GPU
machine's, so that the PTX is the GPU's; ``ptxas`` is the newest under /usr/local/cuda*/bin, else on PATH, else
``--ptxas`` (one older than that NVVM refuses its PTX version). Static counts: what one thread's code holds, not what it
executes (a loop body counts once). The FP64 line adds DADD, DFMA, DMUL and DSETP.
"""

from __future__ import annotations

import argparse
import collections
import glob
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # tools/, the repo

import compile_kernels  # noqa: E402  (real numba, the signatures, and the patched compute capability)
from cubin_report import find_nvdisasm  # noqa: E402

FP64 = ("DADD", "DFMA", "DMUL", "DSETP")


def find_ptxas(given: str | None) -> str | None:
    return given or next(iter(sorted(glob.glob("/usr/local/cuda*/bin/ptxas"), reverse=True)), shutil.which("ptxas"))


def opcode_counts(ptx: str, sm: int, ptxas: str, nvdisasm: str) -> collections.Counter:
    """Each opcode's count (without its modifiers) in the machine code ptxas makes of ``ptx`` for sm_<sm>."""
    with tempfile.TemporaryDirectory() as folder:
        source, cubin = Path(folder) / "k.ptx", Path(folder) / "k.cubin"
        source.write_text(ptx)
        subprocess.run([ptxas, f"-arch=sm_{sm}", "-O3", str(source), "-o", str(cubin)], check=True)
        text = subprocess.run([nvdisasm, str(cubin)], capture_output=True, text=True, check=True).stdout
    ops = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", text)
    return collections.Counter(ops)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="+", help="parts of tools/compile_kernels.py's kernel names")
    parser.add_argument("--sm", type=int, default=90, help="the target's compute capability (default 90)")
    parser.add_argument("--top", type=int, default=12, help="opcodes listed per kernel (default 12)")
    parser.add_argument("--ptxas", help="path of ptxas (default: the newest CUDA toolkit's, else on PATH)")
    parser.add_argument("--nvdisasm", help="path of nvdisasm (default: on PATH or in site-packages)")
    args = parser.parse_args()
    ptxas, nvdisasm = find_ptxas(args.ptxas), find_nvdisasm(args.nvdisasm)
    if ptxas is None or nvdisasm is None:
        print("needs ptxas (the CUDA toolkit) and nvdisasm (pip install nvidia-cuda-nvdisasm)", file=sys.stderr)
        return 2
    chosen = {k: v for k, v in compile_kernels.KERNELS.items() if any(name in k for name in args.names)}
    if not chosen:
        parser.error(f"no kernel of tools/compile_kernels.py has {args.names} in its name")
    cc = (args.sm // 10, args.sm % 10)
    compile_kernels.TARGET.compute_capability = cc
    for name, (kernel, sig) in chosen.items():
        ptx, _ = compile_kernels.cuda.compile_ptx(kernel.py_func, sig, cc=cc)
        ops = opcode_counts(ptx, args.sm, ptxas, nvdisasm)
        fp64 = sum(ops[op] for op in FP64)
        parts = ", ".join(f"{op} {ops[op]}" for op in FP64)
        top = ", ".join(f"{op} {n}" for op, n in ops.most_common(args.top))
        print(f"{name} sm_{args.sm}: {sum(ops.values())} instructions, FP64 {fp64} ({parts}); {top}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Instructions a thread spends per 16-byte copy in the pipelined convolution's gathers, without a GPU.

Compiles the stream of ``utilities.conv.tensorcore_persistent.make_stream`` (the real ``issue``, with a stand-in
for the cuBLASDx descriptor: only its sizes are read, and ``parts="gather"`` leaves the MMA out) into a K loop,
to PTX for sm_90; counts the divisions in the PTX; then, where ``ptxas`` and ``cuobjdump`` (or ``nvdisasm``) are
found (on PATH, or given), assembles it and counts the SASS instructions between consecutive ``LDGSTS`` (the
copies) and the registers. The counts behind ``instructor-notes/conv.md``'s analysis.

    python tools/conv_gather_sass.py --tile 128x64x64-t128-d3-g1-r [--cuobjdump PATH]

On a machine without nvmath-python's device API or CuPy (no GPU driver), the modules the kernel module imports
are stood in for: the gather path needs neither.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import types as pytypes
from pathlib import Path
from typing import Any

os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _stand_ins() -> None:
    """Importable stand-ins for the GPU-only modules ``tensorcore_persistent`` imports at its top."""
    for name in ("cupy", "nvmath.device", "nvmath.device.common"):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 (no driver: NotSupportedError, ImportError, ...)
            module = pytypes.ModuleType(name)
            sys.modules[name] = module
    device, common = sys.modules["nvmath.device"], sys.modules["nvmath.device.common"]
    device.Matmul = getattr(device, "Matmul", object)
    for fn in ("copy", "copy_fragment", "copy_wait", "make_tensor"):
        setattr(common, fn, getattr(common, fn, None))


class _Layout:
    def __init__(self, cosize: int) -> None:
        self.cosize = cosize


class _Descriptor:
    """What ``make_stream`` reads of a cuBLASDx ``Matmul`` on the gather path: sizes and layout sizes."""

    def __init__(self, tm: int, tn: int, tk: int, threads: int) -> None:
        self.size, self.block_size = (tm, tn, tk), threads

    def suggest_layout_smem_a(self) -> _Layout:
        return _Layout(self.size[0] * self.size[2])

    def suggest_layout_smem_b(self) -> _Layout:
        return _Layout(self.size[2] * self.size[1])

    def suggest_layout_smem_c(self) -> _Layout:
        return _Layout(self.size[0] * self.size[1])


def gather_ptx(spec: str, taps: int = 9, c_in: int = 64) -> str:
    """PTX (sm_90) of a K loop of ``issue`` calls at tile ``spec``, waits and barriers as in ``kloop``."""
    from types import SimpleNamespace

    import numba.cuda.dispatcher

    numba.cuda.dispatcher.get_current_device = lambda: SimpleNamespace(compute_capability=(9, 0))
    _stand_ins()
    from utilities.machinery import aligned_copy

    aligned_copy.gmem_layout = lambda MM, which: None  # the streamed filters' copy is not compiled here
    import numpy as np
    from numba import cuda, int32, types

    from utilities.conv import layout
    from utilities.conv import tensorcore_persistent as tp
    from utilities.machinery import cp_async

    cfg = layout.PipeConfig.parse(spec)
    if not cfg.resident:
        cfg = dataclasses.replace(cfg, resident=True)
        print("(the streamed filters' copies are cuBLASDx's: counted with resident filters instead)")
    MM = _Descriptor(cfg.tile_m, cfg.tile_n, cfg.tile_k, cfg.threads)
    n_stages = layout.stages(taps, c_in, cfg.tile_k)
    L = tp.conv_layout(MM, cfg, n_stages)
    issue, _ = tp.make_stream(MM, cfg, taps, n_stages, L, "gather")
    depth, phases = cfg.depth, n_stages // cfg.group
    rows = cfg.tile_m // (cfg.threads // cfg.chunks_per_row)
    wait, TM = cp_async.wait_prior(depth - 2), cfg.tile_m

    def gather_loop(x: Any, w: Any, out: Any, height: Any, width: Any) -> None:
        smem = cuda.shared.array(shape=(0,), dtype=np.float16, alignment=1024)
        t0, step = int32(cuda.blockIdx.x), int32(cuda.gridDim.x)
        tiles = int32(out.shape[0] // TM)
        c = int32(w.shape[0] // taps)
        pix = cuda.local.array(rows, np.int32)
        inside = cuda.local.array(rows, np.int32)
        for p in range(depth - 1):
            issue(smem, x, w, p, t0, step, tiles, 0, c, height, width, pix, inside)
        p = 0
        tile = t0
        while tile < tiles:
            for _ in range(phases):
                wait()
                cuda.syncthreads()
                issue(smem, x, w, p + depth - 1, t0, step, tiles, 0, c, height, width, pix, inside)
                p += 1
            out[tile, cuda.threadIdx.x] = smem[cuda.threadIdx.x]
            tile += step

    sig = (types.float16[::1], types.float16[:, ::1], types.float16[:, ::1], types.int32, types.int32)
    ptx, _ = cuda.compile_ptx(gather_loop, sig, cc=(9, 0))
    return ptx


def sass_counts(ptx: str, ptxas: str, disassembler: str) -> dict[str, Any]:
    """Registers, and SASS instructions between consecutive copies (``LDGSTS``), of the assembled PTX."""
    with tempfile.TemporaryDirectory() as tmp:
        src, obj = Path(tmp) / "k.ptx", Path(tmp) / "k.cubin"
        src.write_text(re.sub(r"^\.version \d+\.\d+", ".version 8.0", ptx, flags=re.M))  # as old a ptxas as can
        done = subprocess.run([ptxas, "-arch=sm_90", "-v", str(src), "-o", str(obj)], capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(done.stderr)
        registers = int(re.search(r"Used (\d+) registers", done.stderr).group(1))
        args = [disassembler, "-sass", str(obj)] if "cuobjdump" in disassembler else [disassembler, str(obj)]
        sass = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    at = [int(m.group(1), 16) // 16 for m in re.finditer(r"/\*([0-9a-f]{4,})\*/\s+[^;]*LDGSTS", sass)]
    gaps = [b - a for a, b in zip(at, at[1:], strict=False) if b > a]
    return {"registers": registers, "copies": len(at), "per_copy_median": statistics.median(gaps) if gaps else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tile", default="128x64x64-t128-d3-g1-r", help="a layout.PipeConfig spec")
    parser.add_argument("--ptxas", default=shutil.which("ptxas") or "", help="ptxas to assemble with")
    parser.add_argument(
        "--cuobjdump",
        default=shutil.which("cuobjdump") or shutil.which("nvdisasm") or "",
        help="cuobjdump or nvdisasm, to read the SASS",
    )
    args = parser.parse_args(argv)
    ptx = gather_ptx(args.tile)
    divisions = len(re.findall(r"^\s*(?:div|rem)\.s64", ptx, flags=re.M))
    print(
        f"{args.tile}: {divisions} 64-bit integer divisions or remainders in the PTX (a SASS subroutine each, "
        "behind a 32-bit fast path taken when both operands fit)"
    )
    if not (args.ptxas and args.cuobjdump):
        print("no ptxas or cuobjdump/nvdisasm here: the SASS counts are left out")
        return 0
    counts = sass_counts(ptx, args.ptxas, args.cuobjdump)
    print(
        f"{args.tile}: {counts['registers']} registers, {counts['copies']} copy instructions in the SASS, "
        f"median {counts['per_copy_median']} instructions from one copy to the next"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Developer tool (issue 44): can a second row of warps run cuBLASDx's copy of a GEMM's operand in full?

Run on a GPU: ``python tools/blockdim_probe.py [--json FILE]``.

A warp-specialised 3x3 kernel would launch the GEMM's 128 threads (the 3x3 kernel's ``Matmul``, 128 x 64 x 64 FP16)
as the first row of a (128, 2) block and let the second row gather. nvmath's ``copy`` is code that libmathdx
generates for the operands' layouts, which carry the GEMM's block of 128 threads. If cuBLASDx indexes that block
by ``threadIdx.x`` alone, the second row's threads (``threadIdx.y == 1``, ``threadIdx.x`` 0 to 127) run the whole
copy too, and could stream the filters; if it takes the linear index, they copy nothing (or past the tile).

The kernel zeroes a shared buffer, lets one row of warps copy B (64 x 64 FP16, random) into it with ``copy``, waits,
and has the first row copy the buffer back out. One launch for each row: row 0 is the control (it must give B
back); row 1 is the question. Prints and writes, for each row, the entries that came back equal to B.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TILE = (128, 64, 64)  # the 3x3 kernel's default GEMM: B is its 64 x 64 filter block
THREADS = 128


def make_kernel(row: int):  # type: ignore[no-untyped-def]
    """``(kernel, shared bytes)``: ``kernel[1, (128, 2), 0, shared](w, out)`` zeroes a shared buffer, has the warps
    of row ``row`` (``threadIdx.y``) copy B (K x N FP16, ``w``) into it with nvmath's ``copy``, and row 0 copy the
    buffer out to ``out``."""
    import numpy as np
    from numba import cuda, float32
    from nvmath.device.common import copy, copy_wait, make_tensor

    from utilities.machinery.aligned_copy import gmem_layout
    from utilities.tiles import block_matmul

    MM = block_matmul("float16", TILE, THREADS, b="row_major")
    N, SB, ROW = MM.size[1], MM.suggest_layout_smem_b().cosize, row
    gmem_b = gmem_layout(MM, "b")

    @cuda.jit
    def copy_by_row(w, out):
        smem = cuda.shared.array(shape=(0,), dtype=np.float16, alignment=1024)
        for i in range(cuda.threadIdx.y * THREADS + cuda.threadIdx.x, SB, 2 * THREADS):
            smem[i] = float32(0)
        cuda.syncthreads()
        sb = make_tensor(smem[0:SB], MM.suggest_layout_smem_b())
        if cuda.threadIdx.y == ROW:
            copy(make_tensor(w, gmem_b(N)), sb)
        copy_wait()  # every thread: it is a barrier
        if cuda.threadIdx.y == 0:
            copy(sb, make_tensor(out, gmem_b(N)))
        copy_wait()

    return copy_by_row, 2 * SB


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the result here")
    args = parser.parse_args(argv)

    from utilities.preflight import PreflightError, preflight

    try:
        env = preflight(require_gpu=True, require_mathdx=True)
    except PreflightError as exc:
        print(f"blockdim_probe: cannot run: {exc}", file=sys.stderr)
        return 2
    import cupy as cp
    import numpy as np

    rng = np.random.default_rng(0)
    K, N = TILE[2], TILE[1]
    w = cp.asarray(rng.standard_normal((K, N)).astype(np.float16))
    rows = []
    for row in (0, 1):
        out = cp.full((K, N), np.float16(np.nan), dtype=np.float16)
        kernel, shared_bytes = make_kernel(row)
        kernel[1, (THREADS, 2), 0, shared_bytes](w, out)
        cp.cuda.Device().synchronize()
        same = int((out == w).sum())
        rows.append({"copying_row": row, "entries_equal": same, "entries": K * N})
        print(f"row {row} copied B: {same} of {K * N} entries came back equal")
    verdict = "the second row copies the whole tile" if rows[1]["entries_equal"] == K * N else "it does not"
    print(f"{env.gpu.name}: with the control at {rows[0]['entries_equal']} of {K * N}: {verdict}")
    if args.json:
        Path(args.json).write_text(json.dumps({"gpu": env.gpu.name, "tile": TILE, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Where cuBLASDx's suggested shared-memory layout puts each element of an FP16 A tile, or a row-major B tile (GPU
only).

Copies a TM x TK tile whose entries are their own row index (then their column index) into shared memory with
``copy`` and the suggested layout, dumps the raw shared memory, and prints, for the first rows, the 8-element
(16-byte) chunk each (row, chunk) lands in: the swizzle a kernel must follow to write that layout by hand.
Writes the whole map as JSON with ``--json``: ``{"gpu", "date", "command", "rows": [{"tile", "operand", "chunks",
"map"}]}`` (``map``: [row, col] of each shared-memory element; ``chunks``: the printed 16-byte chunks, all rows).

    python tools/smem_layout_probe.py --tile 128x64 --json probe.json
    python tools/smem_layout_probe.py --operand b --tile 64x64     (the filters' K x N tile of the convolution)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tile", default="128x64", help="TM x TK of the FP16 A tile (with --operand b: TK x TN)")
    parser.add_argument("--operand", choices=("a", "b"), default="a", help="the A tile, or a row-major B tile")
    parser.add_argument("--threads", type=int, default=128)
    parser.add_argument("--json", default="", help="write the map and the chunks (see above)")
    args = parser.parse_args(argv)
    import cupy as cp
    import numpy as np
    from numba import cuda
    from nvmath.device import Matmul
    from nvmath.device.common import copy, copy_wait, make_tensor

    from utilities.machinery.aligned_copy import gmem_layout

    tm, tk = (int(v) for v in args.tile.split("x"))  # rows x columns of the probed tile
    size = (tm, 64, tk) if args.operand == "a" else (64, tk, tm)  # B: TK (its rows) x TN (its columns)
    MM = Matmul(
        size=size,
        precision=(np.float16, np.float16, np.float32),
        data_type="real",
        arrangement=("row_major", "row_major", "row_major"),
        execution="Block",
        block_size=args.threads,
        alignment=(16, 16, 16),
        static_block_dim=True,
    )
    B = args.operand == "b"
    SA = (MM.suggest_layout_smem_b() if B else MM.suggest_layout_smem_a()).cosize
    gmem_a = gmem_layout(MM, args.operand)
    THREADS = args.threads

    @cuda.jit
    def probe(src, dst):
        smem = cuda.shared.array(shape=(0,), dtype=np.float16, alignment=1024)
        if B:  # a compile-time constant: numba keeps one branch
            copy(make_tensor(src, gmem_a(src.shape[1])), make_tensor(smem[0:SA], MM.suggest_layout_smem_b()))
        else:
            copy(make_tensor(src, gmem_a(src.shape[1])), make_tensor(smem[0:SA], MM.suggest_layout_smem_a()))
        copy_wait()
        cuda.syncthreads()
        for i in range(cuda.threadIdx.x, SA, THREADS):
            dst[i] = smem[i]

    rows = cp.asarray(np.repeat(np.arange(tm, dtype=np.float16)[:, None], tk, 1))
    cols = cp.asarray(np.repeat(np.arange(tk, dtype=np.float16)[None, :], tm, 0))
    maps = []
    for src in (rows, cols):
        dst = cp.full(SA, -1, cp.float16)
        probe[1, THREADS, 0, 2 * SA](src, dst)
        maps.append(cp.asnumpy(dst).astype(int))
    where = np.stack(maps, 1)  # smem element -> (row, col)
    print(f"tile {tm}x{tk}: cosize {SA}; shared-memory chunk of (row, 16-byte chunk), first 16 rows:")
    chunk_of = {}
    for e in range(0, SA, 8):
        r, c = where[e]
        chunk_of[(int(r), int(c) // 8)] = e // 8
    for r in range(min(16, tm)):
        print(r, [chunk_of.get((r, c), -1) for c in range(tk // 8)])
    if args.json:
        import datetime

        row = {
            "tile": args.tile,
            "operand": args.operand,
            "chunks": [[chunk_of.get((r, c), -1) for c in range(tk // 8)] for r in range(tm)],
            "map": where.tolist(),
        }
        report = {
            "gpu": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
            "date": datetime.date.today().isoformat(),
            "command": "python tools/smem_layout_probe.py " + " ".join(sys.argv[1:] if argv is None else argv),
            "rows": [row],
        }
        Path(args.json).write_text(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

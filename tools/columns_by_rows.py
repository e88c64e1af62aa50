"""Developer helper (issue 43): B's residues by way of its transpose, a candidate for the scaling's column kernel.

The course's ``residue_cols_kernel`` reads B (k, n) row-major and writes the residues of its columns transposed, B^T
K-contiguous, through shared memory. The candidate: transpose B into a scratch (n, k) buffer first (one read and
one write of B, in 32 x 32 tiles through shared memory), then run the rows kernel that A's residues use
(``residue_known_rows_kernel``) on B^T with the column statistics: the same ``istats`` form (3, lines), the same
exponents, the same residues, into the same (count, n, kp / 4) words. ``tools/ozaki2_scaling_probe.py --by-rows``
times it beside the course's kernel and checks words and shifts against it.

    transpose, rows = columns_by_rows_launches(k, n, kp, count)
    transpose.kernel[transpose.grid, transpose.block](b, bt)            # bt: an empty (n, k) float64 buffer
    rows.kernel[rows.grid, rows.block](bt, istats_cols, words, nu)
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from numba import cuda, float64  # noqa: E402

TILE, ROWS = 32, 8  # a block moves a 32 x 32 tile, each thread 4 of its entries


@functools.cache
def make_transpose_kernel() -> Any:
    """``transpose_kernel[(ceil(cols / 32), ceil(rows / 32)), (32, 8)](x, xt)``: xt = x^T for x (rows, cols); reads
    and writes along rows of 32 doubles (coalesced), the tile padded to 33 columns (no bank conflicts)."""

    @cuda.jit
    def transpose_kernel(x, xt):
        rows, cols = x.shape
        tile = cuda.shared.array((TILE, TILE + 1), float64)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        col0, row0 = cuda.blockIdx.x * TILE, cuda.blockIdx.y * TILE
        for i in range(ty, TILE, ROWS):
            if row0 + i < rows and col0 + tx < cols:
                tile[i, tx] = x[row0 + i, col0 + tx]
        cuda.syncthreads()
        for i in range(ty, TILE, ROWS):
            if col0 + i < cols and row0 + tx < rows:
                xt[col0 + i, row0 + tx] = tile[tx, i]

    return transpose_kernel


def columns_by_rows_launches(k: int, n: int, kp: int, count: int, threads: int | None = None) -> tuple[Any, Any]:
    """The two launches for a (k, n) B: its transpose into (n, k), then the rows kernel on it, ``threads`` a row
    (by default the course's choice for A's rows) (``Launch`` tuples of ``utilities.ozaki2.simt``)."""
    from utilities.ozaki2 import simt

    transpose = simt.Launch("B transposed", make_transpose_kernel(), (-(-n // TILE), -(-k // TILE)), (TILE, ROWS))
    return transpose, simt.residue_known_launch(n, k, kp, count, threads=threads)


def main() -> None:
    import argparse

    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    print("a helper of tools/ozaki2_scaling_probe.py --by-rows (import it); nothing to run on its own")


if __name__ == "__main__":
    main()

"""Developer tool (issue 43): candidate rewrites of Ozaki-II's column kernel, timed beside the course's by
``tools/ozaki2_scaling_probe.py --candidates`` and checked there, word for word, against its output.

The course's ``simt.make_residue_cols_kernel`` stores each residue as one byte into a shared tile of
count x 32 x 68 bytes and reads four bytes back for each word it writes; on an H200 (2026-11-29) it took 2.44 ms
at 8192 and 15 moduli, 6.6x its bytes at the copy rate, and 0.20 ms more for each modulus (the row kernel 0.06).
Both candidates write the same words (same launch: 32 columns by 64 rows, 8 rows a thread) and pack four residues
into a word in registers, so the shared tile holds words (a quarter of the shared stores and loads):

- ``words``: every modulus's words in one tile (count x 32 x 17 words: the shared memory of the course's kernel),
  one barrier; 64 registers at any count (``ptxas -v``, sm_90, compiled on a CPU).
- ``turns``: one modulus at a time through two 2 KiB tiles, one barrier a modulus; 4 KiB of shared memory at any
  count, but 121 registers (every row's split kept across the moduli): two blocks an SM.

Neither is in the course until a run says which is faster.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from numba import cuda, float64, int32, int64  # noqa: E402

from utilities.ozaki2 import simt  # noqa: E402
from utilities.precision_gpu import BAD, EXP, TERMS  # noqa: E402
from utilities.simt import pack_digits  # noqa: E402

CANDIDATES = ("words", "turns")
PER = simt.COLS_DEPTH // simt.COLS_ROWS  # rows a thread
TILE, DEPTH, THREADS = simt.COLS_TILE, simt.COLS_DEPTH, simt.COLS_TILE * simt.COLS_ROWS
WORDS_PER_COL, WORDS_PER_THREAD = simt.COLS_DEPTH // 4, PER // 4
PADDED_WORDS = WORDS_PER_COL + 1  # a pad word a column: a warp's stores of 32 columns meet no bank twice


@functools.cache
def make_load_column(count: int) -> Any:
    """A device function ``load_column(b, istats, nu, vals) -> shift``: the course kernel's first part, the same
    in both candidates: the thread's column's exponent (written to ``nu`` by the first row tile) and its ``PER``
    rows of B into ``vals`` (zeros past the edges and in a column with a NaN or an Inf)."""
    exponent = simt.make_exponent(count)

    @cuda.jit(device=True)
    def load_column(b, istats, nu, vals):
        k, n = b.shape
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        col, row0 = cuda.blockIdx.x * TILE + tx, cuda.blockIdx.y * DEPTH + ty * PER
        shift = int32(0)
        bad = int64(0)
        if col < n:
            bad = istats[BAD, col]
            shift = exponent(istats[EXP, col], istats[TERMS, col], bad)
            if cuda.blockIdx.y == 0 and ty == 0:
                nu[col] = shift
        for i in range(PER):  # all loads first
            row = row0 + i
            vals[i] = b[row, col] if row < k and col < n and bad == 0 else 0.0
        return shift

    return load_column


@functools.cache
def make_words_kernel(count: int) -> Any:
    """The candidate ``words`` (see the module docstring); the course kernel's arguments and launch."""
    N = count
    load_column = make_load_column(count)
    split_residue = simt.make_split_residue(count, simt.make_residue)
    split = simt.split

    @cuda.jit
    def residue_cols_words_kernel(b, istats, words, nu):
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        tile = cuda.shared.array((N, TILE, PADDED_WORDS), int32)
        vals = cuda.local.array(PER, float64)
        shift = load_column(b, istats, nu, vals)
        for j in range(WORDS_PER_THREAD):
            h0, l0 = split(vals[4 * j], shift)
            h1, l1 = split(vals[4 * j + 1], shift)
            h2, l2 = split(vals[4 * j + 2], shift)
            h3, l3 = split(vals[4 * j + 3], shift)
            for t in range(N):  # four residues of one modulus, one 4-byte store
                tile[t, tx, ty * WORDS_PER_THREAD + j] = pack_digits(
                    split_residue(h0, l0, t), split_residue(h1, l1, t),
                    split_residue(h2, l2, t), split_residue(h3, l3, t),
                )  # fmt: skip
        cuda.syncthreads()
        for t in range(N):
            store_plane(tile, t, t, words, b.shape[1])

    return residue_cols_words_kernel


@cuda.jit(device=True)
def store_plane(tile, at, t, words, n):
    """The block's words of plane ``t`` from ``tile[at]``, 16 a column, two columns a warp store."""
    col0, word0 = cuda.blockIdx.x * TILE, cuda.blockIdx.y * WORDS_PER_COL
    for idx in range(cuda.threadIdx.y * TILE + cuda.threadIdx.x, TILE * WORDS_PER_COL, THREADS):
        c, w = idx // WORDS_PER_COL, idx % WORDS_PER_COL
        if col0 + c < n and word0 + w < words.shape[2]:
            words[t, col0 + c, word0 + w] = tile[at, c, w]


@functools.cache
def make_turns_kernel(count: int) -> Any:
    """The candidate ``turns`` (see the module docstring); the course kernel's arguments and launch."""
    N = count
    load_column = make_load_column(count)
    split_residue = simt.make_split_residue(count, simt.make_residue)
    split = simt.split

    @cuda.jit
    def residue_cols_turns_kernel(b, istats, words, nu):
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        tile = cuda.shared.array((2, TILE, PADDED_WORDS), int32)
        his = cuda.local.array(PER, float64)
        lows = cuda.local.array(PER, float64)
        shift = load_column(b, istats, nu, his)
        for i in range(PER):
            his[i], lows[i] = split(his[i], shift)
        for t in range(N):
            turn = t % 2  # written again two moduli later: past the barrier of the modulus between
            for j in range(WORDS_PER_THREAD):
                i = 4 * j
                tile[turn, tx, ty * WORDS_PER_THREAD + j] = pack_digits(
                    split_residue(his[i], lows[i], t), split_residue(his[i + 1], lows[i + 1], t),
                    split_residue(his[i + 2], lows[i + 2], t), split_residue(his[i + 3], lows[i + 3], t),
                )  # fmt: skip
            cuda.syncthreads()
            store_plane(tile, turn, t, words, b.shape[1])

    return residue_cols_turns_kernel


FACTORIES: dict[str, Callable[[int], Any]] = {"words": make_words_kernel, "turns": make_turns_kernel}


def main() -> None:
    """``python tools/ozaki2_cols_candidates.py``: the candidates, one line each (the probe times them on a GPU)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    for name, factory in FACTORIES.items():
        print(f"{name}: {factory.__doc__.splitlines()[0]}")
    print("time them beside the course's kernel: python tools/ozaki2_scaling_probe.py --candidates")


if __name__ == "__main__":
    main()

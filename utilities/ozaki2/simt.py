"""The plain numba (SIMT) kernels of Ozaki-II, with their launches: residues of A's rows and of B's columns, the
CRT digit of each int32 product, and the reconstruction; and the plan's host side, :class:`SimtPlan`: every buffer
``Ozaki2Gemm`` allocates and its plain numba stages (run on NumPy in numba's simulator by the tests).

They reproduce ``utilities.ozaki2.reference`` bit for bit: exponents, residues and digits (integer arithmetic, and
FP64 operations whose results are exact integers, fused into multiply-adds by the GPU's compiler or not), and C:
the reconstruction writes each multiply-add it rounds once as ``fma`` (``utilities.simt.fma``: exact in the
simulator too), the reference rounds those once as well, and the compiler fuses nothing else there
(``tests/test_ozaki2_rounding.py`` reads the PTX). They run under numba's CUDA simulator in the tests and on the
device in the plan. The designs, for 8192^3 with 15 moduli (``utilities.ozaki2.model`` counts the bytes,
``utilities.ozaki2.benchmarks`` times them):

- ``residue_rows_kernel``: one block per row of A, the row read once into registers; the row's exact statistics
  (``utilities.precision_gpu.make_row_statistics``), its exponent mu, then every residue of ``trunc(x 2^mu)``,
  four int8 residues to a 4-byte store, K-contiguous for cuBLAS;
- ``residue_cols_kernel``: every residue plane of B is B^T, K-contiguous (the layout cuBLAS's int8 GEMM is fast
  in, B column-major). One pass over B: a block reads a tile of B's rows along its columns with the statistics of
  B's columns, and packs the tile's residues transposed through shared memory, so B is read once;
- B's columns by rows (``SimtPlan(columns="by-rows")``, the design before it, kept so that one run can time both):
  ``transpose_kernel`` writes B^T (32 x 32 tiles through shared memory) into memory the products take later, and
  ``residue_known_rows_kernel`` turns its rows into residues as it does A's. That moves B twice more (B^T written,
  then read); since both were rewritten the one pass is the faster on an H200 (``tools/ozaki2_scaling_probe.py
  --by-rows``, and the instructor notes);
- ``digits_kernel``: right after the int32 GEMM of modulus t, each product becomes its CRT digit
  ``u = (P_t mod p) y_t mod p`` in [0, p), one byte: the reconstruction then reads N bytes an entry, not 4N;
- ``reconstruct_kernel``: one thread per entry of C: the three sums of ``u_t c_t``, the fraction in double-double,
  C = alpha 2^(-mu - nu) P frac(...) + beta C (C not read when beta = 0), every product that meets a sum fused
  with it: one rounding fewer each than ``a * b + c`` in NumPy, and one instruction.

How a residue stays exact and cheap. An integer x = trunc(v 2^mu) has at most 78 bits; it is split once into
``h 2^40 + l`` (both exact, |h| < 2^38, |l| < 2^40), and for each modulus ``w = h (2^40 mod p) + l`` (below 2^47,
exact) is reduced by the multiple of p nearest to it: ``w - round(w / p) p``. Rounding uses 1.5 2^52 (two FP64
adds): a GPU's floor and rint are conversions, which run at a quarter of the FP64 rate, and a residue kernel does
N of them per entry. Only an even p can tie (w / p = n + 1/2), and 256 is the only even modulus: the residue tests
``EVEN[t]`` before its tie fix, so that with t a literal the compiler keeps the fix (a compare and a subtraction,
both FP64) for 256 alone (``tools/compile_kernels.py`` counts the tests in the PTX).

Why the loops over the moduli are written out. The reconstruction and the residues run ``for t in range(N)``
under ``utilities.written_out.written_out``: numba compiles the body once for each modulus, t a literal, so each
table entry (``C1[t]``, ``P[t]``...) is a constant in the code, not a load. Measured both ways on an H200 (tools/
``ozaki2_reconstruct_probe.py``, ``ozaki2_scaling_probe.py --written-out``), that made the reconstruction and the
rows kernel faster, and the first column kernel slower; the column kernel as it is now (each thread's two words one
after the other, the copy-out without tests on whole tiles) is written out too, and ``--looped`` times it with its
loops kept.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from numba import cuda, float64, int32, int64, uint64

from .. import plans
from ..machinery import launch
from ..operands import NONFINITE_SHIFT
from ..precision import Choice
from ..precision_gpu import (
    BAD,
    EXP,
    ROWS_THREADS,
    TERMS,
    GemmStatistics,
    col_kernel,
    items_per_thread,
    make_row_statistics,
    row_kernel,
    rows_threads,
    scheme_tables,
)
from ..simt import fma, int32_of, pack_digits, round_near, scale2, trunc_f64
from ..smem import ceil_to
from ..written_out import written_out
from . import reference as ref
from .precision import SCHEME

SPLIT = 2.0**40  # x = h 2^40 + l: |h| < 2^38 and |l| < 2^40 for |x| < 2^78
COLS_TILE, COLS_ROWS, COLS_DEPTH = 32, 8, 64  # residue_cols_kernel: 32 columns by 64 rows, 8 rows a thread
COLS_GROUP = 4  # residue_cols_kernel: four row tiles of a column tile in consecutive blocks (two 128-byte lines)
T_TILE, T_ROWS, T_PADDED = 32, 8, 33  # transpose_kernel: a 32 x 32 tile (33 columns in shared memory), 4 a thread
RECONSTRUCT_BLOCK = (32, 8)  # 32 columns (coalesced) by 8 rows
DIGITS_THREADS = 256
KNOWN_ROWS_THREADS = 512  # the widest default block of residue_known_rows_kernel: 32 entries a thread at k = 16384


def tables(count: int) -> dict[str, np.ndarray]:
    """The per-modulus constants the kernels read: p, 1/p, 2^40 mod p, the residue ranges, y_t, 1/p as c1 + c2 + c3."""
    c = ref.crt(count)
    ps = c.moduli
    return {
        "p": np.array(ps, np.float64),
        "inv": np.array([1.0 / p for p in ps]),
        "k40": np.array([pow(2, 40, p) for p in ps], np.float64),
        "lo": np.array([ref.residue_range(p)[0] for p in ps], np.float64),
        "hi": np.array([ref.residue_range(p)[1] for p in ps], np.float64),
        "even": np.array([p % 2 == 0 for p in ps]),
        "y": np.array(c.inverses, np.float64),
        "c1": np.array(c.c1),
        "c2": np.array(c.c2),
        "c3": np.array(c.c3),
    }


@functools.cache
def make_residue(count: int):
    """A device function ``residue(w, t)``: the symmetric residue of the integer-valued double w (|w| < 2^47, which
    the kernels guarantee) modulo the t-th modulus, exactly, in ``reference.residue_range`` (up to HI[t]), as a
    double."""
    T = tables(count)
    P, INV, HI, EVEN = T["p"], T["inv"], T["hi"], T["even"]

    @cuda.jit(device=True)
    def residue(w, t):
        # TODO (about 4 lines): subtract from w the multiple of P[t] nearest to it (round_near(w * INV[t]) is
        # w / p rounded to an integer, exact here); the result can exceed HI[t] by one (a tie, where EVEN[t]):
        # bring it into range
        # SKELETON: return 0.0
        # BEGIN SOLUTION
        r = w - round_near(w * INV[t]) * P[t]  # |w| < 2^47: w / p is rounded to its nearest integer, r is exact
        if EVEN[t] and r > HI[t]:  # a tie (w / p = n + 1/2) needs an even p: 256's 128 is -128
            r -= P[t]
        return r
        # END SOLUTION

    return residue


@functools.cache
def make_digit(count: int):
    """A device function ``digit(v, t)``: the CRT digit ``v y mod p`` in [0, p) of the int32 product v of modulus t
    (t-th p, y = ``(P / p)^-1 mod p``), as a double, in one reduction, by the multiple of p at or below u = v y.
    u is exact (below 2^39), and ``u INV[t]`` is within 2^-20 of u / p (INV[t] and the product each round once,
    u / p < 2^32). u / p = n + f with f = 0 or 1/p <= f <= 1 - 1/p, so ``u INV[t] - (1/2 - 2^-10)`` lies strictly
    between n - 1/2 + 2^-11 and n + 1/2 - 2^-11: its nearest integer is n = floor(u / p), whether the GPU fuses the
    multiply and the subtraction or not, and u - n p is the digit."""
    T = tables(count)
    P, INV, Y = T["p"], T["inv"], T["y"]
    BELOW = 0.5 - 2.0**-10  # round_near(u * INV[t] - BELOW) is floor(u / p) (the docstring says why)

    @cuda.jit(device=True)
    def digit(v, t):
        # TODO (about 3 lines): u = v times Y[t] (exact), minus the multiple of P[t] at or below it: a digit in
        # [0, P[t]) (or the nearest multiple subtracted, as in residue, and P[t] added where the result is negative)
        # SKELETON: return 0.0
        # BEGIN SOLUTION
        u = v * Y[t]  # |v| < 2^31 and Y[t] < 2^8: exact, below 2^39
        q = round_near(u * INV[t] - BELOW)  # floor(u / p) by FP64 adds, not a slower conversion
        return u - q * P[t]  # exact, in [0, p)
        # END SOLUTION

    return digit


@cuda.jit(device=True)
def ceil_log2(v):
    """Bits of v - 1 (0 for v <= 1): ``int(v - 1).bit_length()`` for an int64 v >= 1 (once a line: a loop will do)."""
    bits = 0
    rest = v - 1
    while rest > 0:
        rest >>= 1
        bits += 1
    return bits


@cuda.jit(device=True)
def line_offset(amax, e, s):
    """``reference.line_offset``: the exponent for t moduli is ``floor((t + g) / 2)`` (the choice kernels' g)."""
    return int64(10 - 2 * (e - ref.SPAN) - ceil_log2(s))


@functools.cache
def make_exponent(count: int):
    """A device function ``exponent(e, s, bad)``: mu of a line from its statistics (``reference.exponent_from_terms``
    for ``count`` moduli; ``NONFINITE_SHIFT`` if the line holds a NaN or an Inf)."""
    TT = ref.crt(count).t

    @cuda.jit(device=True)
    def exponent(e, s, bad):
        if bad != 0:
            return int32(NONFINITE_SHIFT)
        if s <= 0:
            return int32(0)
        return int32((TT + line_offset(0.0, e, s)) // 2)

    return exponent


@cuda.jit(device=True)
def split(v, mu):
    """``trunc(v 2^mu) = h 2^40 + l``, both exact doubles (|h| < 2^38, |l| < 2^40 while |v 2^mu| < 2^78)."""
    x = trunc_f64(math.ldexp(v, int(mu)))
    h = trunc_f64(x * (1.0 / SPLIT))
    return h, x - h * SPLIT


@functools.cache
def make_split_residue(count: int, residue_factory: Callable[[int], Any] = make_residue):
    """A device function ``split_residue(h, l, t)``: the residue modulo the t-th modulus of ``h 2^40 + l`` as an int32
    (``h (2^40 mod p) + l`` is below 2^47: exact, and within ``residue``'s range)."""
    K40 = tables(count)["k40"]
    residue = residue_factory(count)

    @cuda.jit(device=True)
    def split_residue(h, low, t):
        return int32_of(residue(h * K40[t] + low, t))

    return split_residue


@functools.cache
def make_residue_rows_kernel(
    k: int, kp: int, count: int, threads: int = ROWS_THREADS, residue_factory: Callable[[int], Any] = make_residue
):
    """``residue_rows_kernel[m, threads](x, words, mu)``: one block per row of x (m, k), one pass over x.

    The row's entries stay in registers while the block finds its statistics; then ``mu[row]``
    (``NONFINITE_SHIFT`` if the row holds a NaN or an Inf) and the residues of ``trunc(x 2^mu)`` modulo each of the
    ``count`` moduli, four to an int32 word of ``words``, the int32 view (count, m, kp/4) of the int8 residues
    (count, m, kp); columns k..kp-1 get zeros.
    """
    THREADS, WORDS = threads, kp // 4
    ITEMS = items_per_thread(kp, threads)
    GROUPS = ITEMS // 4  # runs of four entries a thread
    row_statistics = make_row_statistics(k, kp, threads)
    exponent = make_exponent(count)
    split_residue = make_split_residue(count, residue_factory)
    store_group = make_store_word_group(count, split_residue)

    @row_kernel
    @written_out(GROUPS, bound="GROUPS")  # every run's index a constant, as in the known-rows kernel
    def residue_rows_kernel(x, words, mu):
        row, tid = cuda.blockIdx.x, cuda.threadIdx.x
        vals = cuda.local.array(ITEMS, float64)
        si = cuda.shared.array(THREADS, int32)
        sl = cuda.shared.array(THREADS, int64)
        sd = cuda.shared.array(THREADS, float64)
        bad, _, e, s = row_statistics(x, row, vals, si, sl, sd, tid)
        shift = exponent(e, s, bad)
        if tid == 0:
            mu[row] = shift
        for g in range(GROUPS):  # a row with a NaN or an Inf gets zero residues
            word = tid + g * THREADS
            if word < WORDS:
                v0, v1 = (vals[4 * g], vals[4 * g + 1]) if bad == 0 else (0.0, 0.0)
                v2, v3 = (vals[4 * g + 2], vals[4 * g + 3]) if bad == 0 else (0.0, 0.0)
                store_group(v0, v1, v2, v3, shift, words, uint64(row), uint64(word))

    return residue_rows_kernel


def make_store_word_group(count: int, split_residue: Any) -> Any:
    """A device function ``store_group(v0, v1, v2, v3, shift, words, row, word)``: four consecutive entries of a line,
    shifted by 2^shift, as residues: for each of the ``count`` moduli, the four packed into the 4-byte word
    ``words[t, row, word]`` (the residue planes (count, m, kp / 4), or the column kernel's tile in shared memory;
    ``row`` and ``word`` unsigned, so that no store pays numba's negative-index fix-up)."""
    N = count

    @cuda.jit(device=True)
    @written_out(N)  # each modulus's constants in the code: no table loads (the module's docstring)
    def store_group(v0, v1, v2, v3, shift, words, row, word):
        h0, l0 = split(v0, shift)
        h1, l1 = split(v1, shift)
        h2, l2 = split(v2, shift)
        h3, l3 = split(v3, shift)
        for t in range(N):  # four residues of one modulus, one 4-byte store
            words[t, row, word] = pack_digits(
                split_residue(h0, l0, t),
                split_residue(h1, l1, t),
                split_residue(h2, l2, t),
                split_residue(h3, l3, t),
            )

    return store_group


@functools.cache
def make_residue_known_rows_kernel(
    k: int, kp: int, count: int, threads: int = ROWS_THREADS, residue_factory: Callable[[int], Any] = make_residue
):
    """``residue_known_rows_kernel[m, threads](x, istats, words, mu)``: ``residue_rows_kernel`` for rows whose
    statistics are known (``istats`` (3, m) int64, ``utilities.precision_gpu``'s rows: exponent, S, non-finite flag,
    as the choice's pass over A wrote them): the row is read once, straight into the residues, with no reduction
    and no barrier. Same layout, same mu, same residues (S is an exact integer sum over the same 128-entry chunks,
    whatever the block's width), so the plan with ``moduli="auto"`` need not find A's statistics twice.
    """
    THREADS, WORDS, K = threads, kp // 4, k
    GROUPS = items_per_thread(kp, threads) // 4  # runs of four entries a thread
    EARLY = min(GROUPS, 4)  # runs loaded before any is stored: 16 entries fit the 64 registers, 32 (k > 16384) spill
    exponent = make_exponent(count)
    split_residue = make_split_residue(count, residue_factory)
    store_group = make_store_word_group(count, split_residue)

    @row_kernel
    @written_out(GROUPS, bound="GROUPS")  # every run's index a constant: the entries stay in registers, not the stack
    def residue_known_rows_kernel(x, istats, words, mu):
        row, tid = cuda.blockIdx.x, cuda.threadIdx.x
        bad = istats[BAD, row]
        shift = exponent(istats[EXP, row], istats[TERMS, row], bad)
        if tid == 0:
            mu[row] = shift
        line = x[uint64(row)]  # unsigned offsets: no negative-index fix-up a load
        vals = cuda.local.array((GROUPS, 4), float64)
        for g in range(GROUPS):  # the first runs' loads first; a row with a NaN or an Inf gets zero residues
            if g < EARLY:
                for q in range(4):
                    col = 4 * (tid + g * THREADS) + q
                    vals[g, q] = line[uint64(col)] if col < K and bad == 0 else 0.0
        for g in range(GROUPS):
            if g >= EARLY:  # a later run, once the runs before it are stored
                for q in range(4):
                    col = 4 * (tid + g * THREADS) + q
                    vals[g, q] = line[uint64(col)] if col < K and bad == 0 else 0.0
            word = tid + g * THREADS
            if word < WORDS:
                store_group(vals[g, 0], vals[g, 1], vals[g, 2], vals[g, 3], shift, words, uint64(row), uint64(word))

    return residue_known_rows_kernel


@functools.cache
def make_residue_cols_kernel(count: int, residue_factory: Callable[[int], Any] = make_residue, group: int = COLS_GROUP):
    """``residue_cols_kernel[grid, (32, 8)](b, istats, words, nu)`` (``residue_cols_launch``): the residues of the
    columns of a row-major B (k, n), each plane stored transposed: ``words`` is the int32 view (count, n, kp/4) of
    the int8 residues (count, n, kp) of B^T; rows k..kp-1 get zeros. Each column's exponent nu comes from its
    statistics (``istats`` (3, n) int64, ``utilities.precision_gpu``: exponent, S, non-finite flag) and is written
    to ``nu`` (n,) by the blocks of the first row tile.

    A block reads 32 columns by 64 rows (each warp 32 consecutive doubles of a row, each thread 8 consecutive rows
    of its column), packs the residues of four rows into a word in registers, keeps the block's words in shared
    memory (count x 32 x 17 words: a column's 16 and a pad word that keeps a warp's stores free of bank conflicts)
    and writes each column's 16 words (two columns, 128 bytes, per warp store).

    ``group``: consecutive blocks take ``group`` row tiles of one column tile before the next column tile (the grid's
    rows padded to a multiple of ``group``: ``residue_cols_launch``), so that the two 64-byte halves of a plane's
    128-byte line reach L2 together; with 1, blocks go along B's rows, a row tile's columns first, and at 16384^3
    the first halves of 15 planes' lines (15.7 MB) wait in L2 for their second.
    """
    N, MODULI, PER, GROUP = count, count, COLS_DEPTH // COLS_ROWS, group
    WORDS_PER_COL = COLS_DEPTH // 4
    PADDED = WORDS_PER_COL + 1
    THREADS = COLS_TILE * COLS_ROWS
    STORES = COLS_TILE * WORDS_PER_COL // THREADS  # a block's words a thread copies out, for each modulus
    assert PER == 8 and STORES * THREADS == COLS_TILE * WORDS_PER_COL  # two words a thread, two copied out
    exponent = make_exponent(count)
    store_group = make_store_word_group(count, make_split_residue(count, residue_factory))

    @col_kernel  # at most 64 registers: four blocks an SM
    @written_out(N)  # each modulus's constants in the code, as in the rows kernel
    def residue_cols_kernel(b, istats, words, nu):
        k, n = b.shape
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        tile_x, tile_y = cuda.blockIdx.x, cuda.blockIdx.y
        if GROUP > 1:  # the block's place in the grid's order: GROUP row tiles of a column tile, then the next one
            order = tile_y * cuda.gridDim.x + tile_x
            tile_x = (order // GROUP) % cuda.gridDim.x
            tile_y = order // (GROUP * cuda.gridDim.x) * GROUP + order % GROUP
            if tile_y * WORDS_PER_COL >= words.shape[2]:  # a padded row of the grid: the whole block leaves
                return
        col0, row0 = tile_x * COLS_TILE, tile_y * COLS_DEPTH + ty * PER
        col = col0 + tx
        tile = cuda.shared.array((N, COLS_TILE, PADDED), int32)
        vals = cuda.local.array(PER, float64)
        shift = int32(0)
        bad = int64(0)
        if col < n:
            bad = istats[BAD, col]
            shift = exponent(istats[EXP, col], istats[TERMS, col], bad)
            if tile_y == 0 and ty == 0:
                nu[col] = shift
        if row0 + PER <= k and col < n and bad == 0:  # the thread's rows all in B (all but the last row tile)
            first = b[uint64(row0) :, uint64(col)]  # unsigned offsets: no negative-index fix-up a load
            for i in range(PER):  # all loads first
                vals[i] = first[uint64(i)]
        else:  # a column with a NaN or an Inf, or past the edge: zero residues
            for i in range(PER):
                row = row0 + i
                vals[i] = b[row, col] if row < k and col < n and bad == 0 else 0.0
        # the thread's two words of each modulus (its rows 0-3, then 4-7) into the tile, as a row's words go out
        utx, word = uint64(tx), uint64(2 * ty)
        store_group(vals[0], vals[1], vals[2], vals[3], shift, tile, utx, word)
        store_group(vals[4], vals[5], vals[6], vals[7], shift, tile, utx, word + uint64(1))
        cuda.syncthreads()
        tid = ty * COLS_TILE + tx
        word0 = tile_y * WORDS_PER_COL
        if col0 + COLS_TILE <= n and word0 + WORDS_PER_COL <= words.shape[2]:  # a whole tile: no tests
            ucol0, uword0 = uint64(col0), uint64(word0)
            for t in range(N):
                for r in range(STORES):
                    idx = uint64(tid + r * THREADS)
                    c, w = idx // uint64(WORDS_PER_COL), idx % uint64(WORDS_PER_COL)
                    words[t, ucol0 + c, uword0 + w] = tile[t, c, w]
        else:  # the edges' tiles: a loop (not written out: it runs on few blocks)
            for t in range(MODULI):
                for idx in range(tid, COLS_TILE * WORDS_PER_COL, THREADS):
                    c, w = idx // WORDS_PER_COL, idx % WORDS_PER_COL
                    if col0 + c < n and word0 + w < words.shape[2]:
                        words[t, col0 + c, word0 + w] = tile[t, c, w]

    return residue_cols_kernel


@functools.cache
def make_transpose_kernel():
    """``transpose_kernel[(ceil(cols / 32), ceil(rows / 32)), (32, 8)](x, xt)``: xt (cols, rows) = x^T for a float64
    x (rows, cols). A block moves one 32 x 32 tile: it reads it along x's rows and writes it along xt's, both
    coalesced, through shared memory whose 33rd column keeps a warp's column reads free of bank conflicts."""

    @cuda.jit
    def transpose_kernel(x, xt):
        rows, cols = x.shape
        tile = cuda.shared.array((T_TILE, T_PADDED), float64)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        row0, col0 = cuda.blockIdx.y * T_TILE, cuda.blockIdx.x * T_TILE
        if row0 + T_TILE <= rows and col0 + T_TILE <= cols:  # a whole tile (all but the edges'): no tests
            # unsigned offsets (no negative-index fix-up an access), a loop of constant length (unrolled)
            utx, urow0, ucol0 = uint64(tx), uint64(row0), uint64(col0)
            for i in range(T_TILE // T_ROWS):
                r = uint64(ty + i * T_ROWS)
                tile[r, utx] = x[urow0 + r, ucol0 + utx]
            cuda.syncthreads()
            for i in range(T_TILE // T_ROWS):  # xt's row col0 + r, its entries row0 + tx: x's column, read down
                r = uint64(ty + i * T_ROWS)
                xt[ucol0 + r, urow0 + utx] = tile[utx, r]
            return
        for i in range(ty, T_TILE, T_ROWS):
            if row0 + i < rows and col0 + tx < cols:
                tile[i, tx] = x[row0 + i, col0 + tx]
        cuda.syncthreads()
        for i in range(ty, T_TILE, T_ROWS):  # xt's row col0 + i, its entries row0 + tx: x's column, read down
            if col0 + i < cols and row0 + tx < rows:
                xt[col0 + i, row0 + tx] = tile[tx, i]

    return transpose_kernel


@functools.cache
def make_digits_kernel(count: int, digit_factory: Callable[[int], Any] = make_digit):
    """``digits_kernel[ceil(size / 256), 256](products, t, digits)``: the CRT digit of modulus t of each int32
    product (a flat array of m n), as uint8 (``reference.reduce_products`` for one plane)."""
    digit = digit_factory(count)

    @cuda.jit
    def digits_kernel(products, t, digits):
        i = cuda.grid(1)
        if i < products.shape[0]:
            digits[i] = int32_of(digit(float64(products[i]), t))

    return digits_kernel


@functools.cache
def make_residue_values_kernel(count: int, residue_factory: Callable[[int], Any] = make_residue):
    """``residue_values_kernel[ceil(size / 256), 256](w, out)``: ``out[t, i] = residue(w[i], t)`` (count, size) as
    the device function returns it, a double: for the checker, which must see a residue of 128 for p = 256 that
    the kernels' byte stores would turn into -128."""
    residue = residue_factory(count)
    N = count

    @cuda.jit
    def residue_values_kernel(w, out):
        i = cuda.grid(1)
        if i < w.shape[0]:
            for t in range(N):
                out[t, i] = residue(w[i], t)

    return residue_values_kernel


@functools.cache
def make_reconstruct_kernel(count: int, from_products: bool = False, digit_factory: Callable[[int], Any] = make_digit):
    """``reconstruct_kernel[grid, block](planes, mu, nu, a, b, alpha, beta, c, out)``: C from the N planes
    (count, m, n) of CRT digits (uint8), or of int32 products when ``from_products`` (each reduced here with
    ``digit``), as ``reference.reconstruct``, bit for bit: the three sums, the fraction ``(s1 - q) + s2 + s3`` in
    double-double, times P in double-double (``h P_hi`` exact inside the last ``fma``, one rounding), scaled back by
    2^(-mu - nu); alpha and beta as a GEMM's (C not read when beta = 0). Each product that meets a sum is one
    ``fma``, rounded once: a GPU's compilers fuse a product into the sum it feeds anyway (NVVM ``s += u * w``, the
    assembler a plain ``mul.f64`` into the ``add.f64`` after it); written so, the simulator rounds as the GPU does.
    Where mu or nu is the non-finite sentinel, what DGEMM gives: the FP64 dot product of A's row and B's column
    (those lines hold a NaN or an Inf, which the result must carry as DGEMM carries it)."""
    T = tables(count)
    N, FROM_PRODUCTS = count, from_products
    C1, C2, C3 = T["c1"], T["c2"], T["c3"]
    crt = ref.crt(count)
    P_HI, P_LO = crt.product_hi, crt.product_lo
    digit = digit_factory(count)

    @cuda.jit
    @written_out(N)  # each modulus's constants in the code: no table loads (the module's docstring)
    def reconstruct_kernel(planes, mu, nu, a, b, alpha, beta, c, out):
        j, i = cuda.grid(2)
        if i >= out.shape[0] or j >= out.shape[1]:
            return
        if mu[i] == NONFINITE_SHIFT or nu[j] == NONFINITE_SHIFT:  # rare: a line with a NaN or an Inf
            native = 0.0
            for col in range(a.shape[1]):
                native = fma(a[i, col], b[col, j], native)
            native *= alpha
            if beta != 0.0:
                native = fma(beta, c[i, j], native)
            out[i, j] = native
            return
        s1 = 0.0
        s2 = 0.0
        s3 = 0.0
        for t in range(N):
            u = digit(float64(planes[t, i, j]), t) if FROM_PRODUCTS else float64(planes[t, i, j])
            # TODO (about 3 lines): add u, weighted by C1[t], C2[t] and C3[t], to s1, s2 and s3 (a GPU fuses each
            # s += u * w into one multiply-add, rounded once: fma(u, w, s) says so, and the simulator then agrees)
            # BEGIN SOLUTION
            s1 = fma(u, C1[t], s1)  # exact, fused or not
            s2 = fma(u, C2[t], s2)  # exact, fused or not
            s3 = fma(u, C3[t], s3)  # rounded once
            # END SOLUTION
        q = math.floor(s1 + 0.5)
        frac = s1 - q  # exact
        h = frac + s2  # TwoSum: h + low = frac + s2 exactly
        back = h - frac
        low = ((frac - (h - back)) + (s2 - back)) + s3
        value = fma(h, P_HI, fma(low, P_HI, h * P_LO))  # (h + low)(P_hi + P_lo), h P_hi exact inside the fma
        value = alpha * scale2(value, -int(mu[i] + nu[j]))
        if beta != 0.0:
            value = fma(beta, c[i, j], value)
        out[i, j] = value

    return reconstruct_kernel


class Launch(NamedTuple):
    """One kernel launch: what to run, on which grid and block (its arguments are the caller's)."""

    name: str
    kernel: Any
    grid: Any
    block: Any


def residue_launch(
    m: int, k: int, kp: int, count: int, residue_factory: Callable[[int], Any] | None = None, threads: int | None = None
) -> Launch:
    """The residues of an m x k matrix's rows: ``kernel[grid, block](x, words, mu)`` (``threads`` per row: by
    default ``precision_gpu.rows_threads(kp)``)."""
    threads = threads or rows_threads(kp)
    kernel = make_residue_rows_kernel(k, kp, count, threads, residue_factory or make_residue)
    return Launch("residues of rows", kernel, m, threads)


def residue_known_launch(
    m: int, k: int, kp: int, count: int, residue_factory: Callable[[int], Any] | None = None, threads: int | None = None
) -> Launch:
    """The residues of an m x k matrix's rows from their known statistics: ``kernel[grid, block](x, istats, words,
    mu)`` (``threads`` per row: by default ``precision_gpu.rows_threads(kp)``, at most ``KNOWN_ROWS_THREADS``: with no
    reduction to share, two blocks of 512 on an SM take turns, where one of 1024 leaves it idle while its last warps
    drain)."""
    threads = threads or min(rows_threads(kp), KNOWN_ROWS_THREADS)
    kernel = make_residue_known_rows_kernel(k, kp, count, threads, residue_factory or make_residue)
    return Launch("residues of rows, statistics known", kernel, m, threads)


def residue_cols_launch(
    k: int,
    n: int,
    kp: int,
    count: int,
    residue_factory: Callable[[int], Any] | None = None,
    group: int = COLS_GROUP,
) -> Launch:
    """The residues of a k x n matrix's columns, transposed: ``kernel[grid, block](b, istats, words, nu)``: a block a
    32-column tile and 64-row tile, the grid's rows padded to a multiple of ``group`` (``make_residue_cols_kernel``)."""
    kernel = make_residue_cols_kernel(count, residue_factory or make_residue, group)
    depth_tiles = -(-kp // COLS_DEPTH)
    grid = (-(-n // COLS_TILE), -(-depth_tiles // group) * group)
    return Launch("residues of columns", kernel, grid, (COLS_TILE, COLS_ROWS))


def transpose_launch(rows: int, cols: int) -> Launch:
    """The transpose of a float64 (rows, cols) matrix into (cols, rows): ``kernel[grid, block](x, xt)``."""
    grid = (-(-cols // T_TILE), -(-rows // T_TILE))
    return Launch("transpose", make_transpose_kernel(), grid, (T_TILE, T_ROWS))


def residue_values_launch(size: int, count: int, residue_factory: Callable[[int], Any] | None = None) -> Launch:
    """The device function's own values on ``size`` doubles: ``kernel[grid, block](w, out)``, out (count, size)."""
    kernel = make_residue_values_kernel(count, residue_factory or make_residue)
    return Launch("residue values", kernel, -(-size // DIGITS_THREADS), DIGITS_THREADS)


def digits_launch(size: int, count: int, digit_factory: Callable[[int], Any] | None = None) -> Launch:
    """The digits of one plane of ``size`` products: ``kernel[grid, block](products, t, digits)`` (flat arrays)."""
    kernel = make_digits_kernel(count, digit_factory or make_digit)
    return Launch("digits", kernel, -(-size // DIGITS_THREADS), DIGITS_THREADS)


def reconstruct_launch(
    m: int, n: int, count: int, reconstruct_factory: Callable[..., Any] | None = None, *, from_products: bool = False
) -> Launch:
    """The reconstruction of an m x n C: ``kernel[grid, block](planes, mu, nu, a, b, alpha, beta, c, out)``."""
    tx, ty = RECONSTRUCT_BLOCK
    factory = reconstruct_factory or make_reconstruct_kernel
    kernel = factory(count, from_products) if from_products else factory(count)
    return Launch("reconstruct", kernel, (-(-n // tx), -(-m // ty)), RECONSTRUCT_BLOCK)


# ------------------------------------------------------------------------------------------------------------
# The plan's host side: its buffers and its plain numba stages, one code path on CuPy and in numba's simulator
# ------------------------------------------------------------------------------------------------------------

K_ALIGN = 16  # the residue planes' padded width: cuBLAS's int8 GEMM wants lda = ldb a multiple of 4 (16 B lines)
PRODUCTS = ("per-modulus", "batched")
DIGITS = ("early", "late")
LATE_SHARE = 4  # digits="auto" reads them late when the int32 products fit in 1/LATE_SHARE of the free memory
PANEL_ALIGN = 8  # row panels start on multiples of 8 rows (the reconstruction's block height)
PANELS_ABOVE, PANEL_ROWS = 8192, 4096  # panels="auto": above 8192 rows, panels of at most 4096 rows


def panels_for(m: int, digits: str, products: str) -> int:
    """``panels="auto"``: one panel up to ``PANELS_ABOVE`` rows (or with early digits, or a batched call), else
    panels of at most ``PANEL_ROWS`` rows. On an H200 cuBLAS's int8 GEMMs ran 13% faster in panels of 2048 to 8192
    rows than at m = 16384, and the panels' reconstructions hide under the GEMMs; at m = 8192 panels gained
    nothing (``instructor-notes/ozaki2.md``)."""
    if digits != "late" or products != "per-modulus" or m <= PANELS_ABOVE:
        return 1
    return -(-m // PANEL_ROWS)


def row_panels(m: int, panels: int) -> list[slice]:
    """A's rows in ``panels`` runs as even as multiples of ``PANEL_ALIGN`` rows allow (fewer where m is small;
    one run, the whole, with ``panels`` 1)."""
    blocks = -(-m // PANEL_ALIGN)
    count = max(1, min(panels, blocks))
    edges = [min(m, PANEL_ALIGN * (blocks * q // count)) for q in range(count + 1)]
    return [slice(lo, hi) for lo, hi in zip(edges, edges[1:], strict=False) if hi > lo]


def digits_for(planes: int, m: int, n: int, memory_bytes: int) -> str:
    """The digits design ``Ozaki2Gemm(digits="auto")`` takes: "late" (every int32 product kept, read once by the
    reconstruction: 4 bytes an entry a modulus after the GEMMs, against early's 6) when ``planes`` int32 planes of
    m x n take at most a quarter of ``memory_bytes`` (the GPU's free memory when the plan is made), else "early"
    (two int32 planes at a time)."""
    return "late" if planes * m * n * 4 * LATE_SHARE <= memory_bytes else "early"


STATISTICS = ("reuse", "recompute")  # A's row statistics in the scaling of moduli="auto": the choice's, or found again
COLUMNS = ("direct", "by-rows")  # B's residues: one pass (residue_cols_kernel), or B^T's rows (transpose, rows kernel)


@dataclass(frozen=True)
class Kernels(plans.Kernels):
    """Kernel factories a plan uses instead of the course's (the exercises pass the attendee's), in stage order.

    None means the course's: ``make_residue``, ``make_digit`` and ``make_reconstruct_kernel`` (this module).
    """

    residue: Callable[..., Any] | None = None
    digit: Callable[..., Any] | None = None
    reconstruct: Callable[..., Any] | None = None

    def course(self) -> dict[str, Callable[..., Any]]:
        return {"residue": make_residue, "digit": make_digit, "reconstruct": make_reconstruct_kernel}


class SimtPlan:
    """An Ozaki-II plan without its int8 GEMMs: every buffer the plan allocates, and its plain numba stages (the
    choice's statistics, the residues, the CRT digits, the reconstruction), on the array module ``xp``.

    ``Ozaki2Gemm`` (``utilities.ozaki2.tensorcore``) is this plan on CuPy with cuBLAS's products (and their stream)
    added. The tests run it on NumPy in numba's simulator, where an index past the end of a buffer raises: the
    buffers are the plan's own, allocated here and nowhere else, and so are the launches' grids
    (``tests/test_ozaki2_plans.py``). Residue planes (top, m, kp) and (top, n, kp), kp = k padded to 16, for the
    largest count the plan may use; int32 products (top or 2, m, n); uint8 digits (top, m, n) when they come early.
    ``statistics`` (``moduli="auto"`` only): "reuse" takes A's residues from the statistics of A's rows that the
    choice found (``residue_known_rows_kernel``), "recompute" finds them again in the residues' pass (the design
    before it: kept so that one run can time both; C is the same bit for bit). ``columns``: B's residues by
    ``residue_cols_kernel`` in one pass ("direct") or from the rows of B^T ("by-rows", the design before it: B^T in
    the products' memory when it fits there, else its own (n, k) buffer; the same words bit for bit). ``panels``
    (late digits, per-modulus products): A's rows in that many panels (``row_panels``; "auto": ``panels_for``);
    ``run`` takes each panel's products, then its reconstruction, so that on the GPU one panel's reconstruction runs
    beside the next panel's GEMMs. C is the same bit for bit at any count of panels.
    """

    def __init__(
        self,
        m: int,
        n: int,
        k: int,
        moduli: int | str = 14,
        kernels: Kernels | None = None,
        *,
        products: str = "per-modulus",
        digits: str = "early",
        statistics: str = "reuse",
        columns: str = "direct",
        panels: int | str = "auto",
        xp: Any = None,
    ):
        if moduli != "auto":
            moduli = ref.check_moduli(moduli)
        if not 0 < k <= ref.MAX_K:
            raise ValueError(f"k = {k}: int8 products stay exact in int32 only for 0 < k <= {ref.MAX_K}")
        if products not in PRODUCTS or digits not in DIGITS:
            raise ValueError(
                f"products must be one of {PRODUCTS} and digits one of {DIGITS}, got {products!r}, {digits!r}"
            )
        if statistics not in STATISTICS:
            raise ValueError(f"statistics must be one of {STATISTICS}, got {statistics!r}")
        if columns not in COLUMNS:
            raise ValueError(f"columns must be one of {COLUMNS}, got {columns!r}")
        if panels == "auto":
            panels = panels_for(m, digits, products)
        if not isinstance(panels, int) or panels < 1:
            raise ValueError(f"panels must be a positive int or 'auto', got {panels!r}")
        if panels > 1 and (digits != "late" or products != "per-modulus"):
            raise ValueError(
                f"panels = {panels} needs digits='late' and products='per-modulus' (each panel's reconstruction "
                f"reads its rows of every int32 product), got digits={digits!r}, products={products!r}"
            )
        if xp is None:
            import cupy as xp
        self.xp = xp
        self.m, self.n, self.k, self.moduli = m, n, k, moduli
        self.products_mode, self.digits_mode, self.statistics = products, digits, statistics
        self.columns_mode = columns
        self.row_panels = row_panels(m, panels)
        self.kernels = kernels or Kernels()
        self.kp = ceil_to(k, K_ALIGN)
        top = ref.MAX_MODULI if moduli == "auto" else moduli
        self.a_res = xp.zeros((top, m, self.kp), xp.int8)
        self.b_res = xp.zeros((top, n, self.kp), xp.int8)
        self.mu, self.nu = xp.zeros(m, xp.int32), xp.zeros(n, xp.int32)
        self.stats = GemmStatistics(m, n, k, xp=xp)
        self.keep_all = digits == "late" or products == "batched"  # every int32 product kept, or two planes in turn
        self.products_buffer = xp.empty((top if self.keep_all else 2, m, n), xp.int32)
        # with row panels each panel's planes (top, its rows, n) are one contiguous block of the same memory, so
        # that its reconstruction reads whole arrays
        flat = self.products_buffer.reshape(-1)
        self.panel_planes = (
            [flat[top * n * p.start : top * n * p.stop].reshape(top, p.stop - p.start, n) for p in self.row_panels]
            if len(self.row_panels) > 1
            else [self.products_buffer]
        )
        self.digits = xp.empty((top, m, n), xp.uint8) if digits == "early" else None
        self.b_t = None if columns == "direct" else self._b_t_buffer()
        self.count = None if moduli == "auto" else moduli
        self.choice: Choice | None = None
        self.tables = scheme_tables(SCHEME, k, line_offset, xp=xp) if moduli == "auto" else None

    def _b_t_buffer(self) -> Any:
        """B^T (n, k) float64 for the scaling: the first 8 n k bytes of the products' memory, which the scaling
        is done with before the first product is written, or its own buffer when the products' is smaller."""
        xp, n, k = self.xp, self.n, self.k
        if self.products_buffer.nbytes >= 8 * n * k:
            return self.products_buffer.reshape(-1)[: 2 * n * k].view(xp.float64).reshape(n, k)
        return xp.empty((n, k), xp.float64)

    # -- stages ----------------------------------------------------------------------------------------------------
    def choose(self, a: Any, b: Any) -> Choice:
        """Stage 0: the statistics of A's rows and B's columns, and the count (``moduli="auto"``)."""
        if self.tables is None:
            raise RuntimeError(f"this plan has a fixed count ({self.moduli} moduli): it chooses nothing")
        self.stats.compute(a, b)
        self.choice = self.stats.choose(self.tables)
        self.count = self.choice.count
        return self.choice

    def scale(self, a: Any, b: Any, columns_known: bool = False, rows_known: bool = False) -> None:
        """Stage 1: exponents and residues of A (rows) and of B (columns, transposed). B's column statistics are
        computed first unless ``columns_known`` (the choice took them); A's rows find their own in the residues'
        pass unless ``rows_known`` (the choice's, in ``stats.rows_i``, for this very A)."""
        self.scale_rows(a, rows_known)
        self.scale_columns(b, columns_known)

    def scale_rows(self, a: Any, rows_known: bool = False) -> None:
        """Stage 1 for A: its rows' exponents and residues (``scale``'s ``rows_known``)."""
        N = self.count
        residue = self.kernels.factory("residue")
        a_words = self.a_res[:N].view(self.xp.int32)
        if rows_known:
            rows = residue_known_launch(self.m, self.k, self.kp, N, residue)
            launch.launch(rows.kernel, rows.grid, rows.block, 0, a, self.stats.rows_i, a_words, self.mu)
        else:
            rows = residue_launch(self.m, self.k, self.kp, N, residue)
            launch.launch(rows.kernel, rows.grid, rows.block, 0, a, a_words, self.mu)

    def scale_columns(self, b: Any, columns_known: bool = False) -> None:
        """Stage 1 for B: its columns' statistics unless ``columns_known``, then their exponents and residues.
        Nothing of A's is read or written: ``Ozaki2Gemm`` runs it beside ``scale_rows``."""
        N = self.count
        if not columns_known:
            self.stats.columns(b)
        residue = self.kernels.factory("residue")
        words = self.b_res[:N].view(self.xp.int32)
        if self.b_t is None:
            cols = residue_cols_launch(self.k, self.n, self.kp, N, residue)
            launch.launch(cols.kernel, cols.grid, cols.block, 0, b, self.stats.cols_i, words, self.nu)
            return
        flip = transpose_launch(self.k, self.n)
        launch.launch(flip.kernel, flip.grid, flip.block, 0, b, self.b_t)
        cols = residue_known_launch(self.n, self.k, self.kp, N, residue)
        launch.launch(cols.kernel, cols.grid, cols.block, 0, self.b_t, self.stats.cols_i, words, self.nu)

    def product_plane(self, t: int) -> Any:
        """The int32 plane that product t (modulus t) is written to: its own when every product is kept, else the
        one of two that early digits take turns with (the digits of product t - 2 have been read out of it)."""
        return self.products_buffer[t if self.keep_all else t % 2]

    def int8_gemm(self, t: int, plane: Any, rows: slice = slice(None)) -> None:
        """Product t: A's residues of modulus t times B's, into the int32 ``plane`` (exact: |r| <= 128 and
        K <= MAX_K), for A's ``rows`` only (a panel's, whose own plane ``plane`` is). Here the array module's
        matmul, which the tests run on NumPy; ``Ozaki2Gemm`` calls cuBLAS."""
        xp = self.xp
        xp.matmul(self.a_res[t][rows].astype(xp.int32), self.b_res[t].T.astype(xp.int32), out=plane)

    def products(self) -> None:
        """Stage 2, one modulus after another: each int8 GEMM, and with early digits its digits right after it
        (``Ozaki2Gemm`` also batches the GEMMs, or reduces on a second stream beside the next GEMM). With row
        panels, every modulus of the first panel, then of the next."""
        if len(self.row_panels) > 1:
            for q in range(len(self.row_panels)):
                self.panel_products(q)
            return
        for t in range(self.count):
            plane = self.product_plane(t)
            self.int8_gemm(t, plane)
            if self.digits is not None:
                self.digits_of(plane, t)

    def panel_products(self, q: int) -> None:
        """Stage 2 for row panel ``q`` (late digits): its rows of every product, into its own planes."""
        for t in range(self.count):
            self.int8_gemm(t, self.panel_planes[q][t], self.row_panels[q])

    def digits_of(self, plane: Any, t: int) -> None:
        """Stage 2's reduction: the CRT digits of modulus t from its int32 product ``plane``, into ``digits[t]``."""
        step = digits_launch(self.m * self.n, self.count, self.kernels.factory("digit"))
        launch.launch(step.kernel, step.grid, step.block, 0, plane.ravel(), np.int64(t), self.digits[t].ravel())

    def reconstruct(self, a: Any, b: Any, out: Any, c: Any, alpha: float, beta: float) -> None:
        """Stage 3: C from the digits (or the int32 products); the lines of A and B that hold a NaN or an Inf get
        DGEMM's result (FP64 dot products)."""
        for q in range(len(self.row_panels)):
            self.reconstruct_panel(q, a, b, out, c, alpha, beta)

    def reconstruct_panel(self, q: int, a: Any, b: Any, out: Any, c: Any, alpha: float, beta: float) -> None:
        """Stage 3 for row panel ``q``: C's rows of the panel from its planes (with one panel, the whole C; with
        several, on the rows of C, A and mu that the panel holds, each a contiguous view)."""
        N = self.count
        late = self.digits is None
        panel = self.row_panels[q]
        rows = panel.stop - panel.start
        step = reconstruct_launch(rows, self.n, N, self.kernels.factory("reconstruct"), from_products=late)
        planes = self.panel_planes[q][:N] if late else self.digits[:N]
        mu = self.mu
        if rows < self.m:
            mu, a, c, out = mu[panel], a[panel], c[panel], out[panel]
        scalars = (np.float64(alpha), np.float64(beta))
        launch.launch(step.kernel, step.grid, step.block, 0, planes, mu, self.nu, a, b, *scalars, c, out)

    def run(self, a: Any, b: Any, out: Any, c: Any, alpha: float, beta: float) -> None:
        """Every stage in order, on operands already checked: the choice (``moduli="auto"``), the residues, the
        products and their digits, the reconstruction into ``out``."""
        auto = self.tables is not None
        if auto:
            self.choose(a, b)
        self.scale(a, b, columns_known=auto, rows_known=auto and self.statistics == "reuse")
        if len(self.row_panels) > 1:
            self.panels_run(a, b, out, c, alpha, beta)
            return
        self.products()
        self.reconstruct(a, b, out, c, alpha, beta)

    def panels_run(self, a: Any, b: Any, out: Any, c: Any, alpha: float, beta: float) -> None:
        """Stages 2 and 3 by row panels: each panel's products, then its reconstruction (``Ozaki2Gemm`` runs the
        reconstruction of one panel on a second stream beside the products of the next)."""
        for q in range(len(self.row_panels)):
            self.panel_products(q)
            self.reconstruct_panel(q, a, b, out, c, alpha, beta)

"""The line statistics of ``utilities.precision`` on the GPU, and the count chosen from them on the device.

Both emulated DGEMMs scale each row of A and each column of B by a power of two, and choose their count (slices or
moduli) from the same statistics (``utilities.precision.GemmStats``): each line's largest magnitude, the exact
integers of Ozaki-II's scaling (``precision.line_terms``, 128 entries at a time), its squared norm, and the squared
norm of its line of C (the line's squares weighted by the other operand's line norms). The kernels here compute
them in the units of ``precision.gemm_stats``; the choice kernels then evaluate every count's estimate at once and
pick, and one copy of about a hundred bytes brings the count to the host.

Kernels (plain numba: they run in numba's CUDA simulator in the tests):

- ``make_row_statistics``: a device function for a block that holds one row in registers (four entries a
  thread, runs of 4): the row's non-finite flag, largest magnitude and exact ``(E, S)``, chunk by chunk (a warp's
  128 entries are a chunk), for the stats kernel below and for Ozaki-II's residue kernel;
- ``row_stats_kernel``: a block a row at a time (as many blocks as the GPU holds at once, each over every
  ``blocks``-th row): those, the squared norm and, weighted, the squared norm of C's row, its weights staged
  in shared memory once a block;
- ``col_chunk_kernel``: one block per 32 columns by 128 rows (reads coalesced along the row): each column's chunk
  statistics; ``col_combine_kernel``: eight threads per column: the chunks combined (integers exactly, the
  norms summed in the chunks' order);
- ``normalize_kernel``: line norms brought to the operand's common power of two (the other operand's weights);
- ``make_choice_kernels``: the estimate of every count for every row and column, reduced in a fixed order.

Passes for a choice (A m x k, B k x n, row-major): A by column chunks (A's column norms: weights of B's columns),
B by rows (B's row norms: weights of A's rows), A by rows, B by column chunks: each operand read twice. A plan with
a fixed count reads B's column chunks only (the residues of B need each column's exponent before its first entry).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import config, cuda, float64, int32, int64, uint32, uint64

from .machinery import warp_redux
from .precision import CHUNK, QUANT, SPAN, Choice, U, target
from .simt import hi_word, of_hi_word

ROWS_THREADS = 512  # threads per row in the row kernels at k = 8192: 16 entries a thread
ROW_REGISTERS = 64  # at most: two blocks of 512 threads per SM, so that one computes while the other loads
COL_TILE = 32  # columns per block in col_chunk_kernel (one warp reads 256 contiguous bytes of a row)
COL_REGISTERS = 64  # at most: four blocks of COL_TILE x COL_ROWS threads per SM
COMBINE_TILE = 32  # chunks of a column whose terms col_combine_kernel stages in shared memory at once
COL_ROWS = 8  # threads along the rows: each holds CHUNK / COL_ROWS = 16 entries of its column
CHOICE_THREADS = 256
CHOICE_STAGE = 32  # blocks' partial sums (and worst ratios) the choice kernels stage in shared memory at once
MAX_COUNTS = 24  # counts a choice may try
NO_EXPONENT = -(2**31)
_MAX_FINITE = float(np.finfo(np.float64).max)
SHUFFLES = not config.ENABLE_CUDASIM  # numba's simulator has no warp shuffles: shared memory stands in

# fstats rows (float64) and istats rows (int64) of a line's statistics
AMAX, NORM2, CROSS2 = 0, 1, 2
EXP, TERMS, BAD = 0, 1, 2


@cuda.jit(device=True)
def ceil_shift(s, shift):
    """``ceil(s / 2^shift)`` of an int64 0 < s < 2^50, shift >= 0 (1 once s is shifted out)."""
    if shift >= 62:
        return int64(1)
    return (s + (int64(1) << shift) - 1) >> shift


@cuda.jit(device=True)
def larger(a, b):
    """The larger of two numbers neither of which is a NaN: one compare and a select. Python's ``max`` on doubles
    compiles to ``maxnum``, whose NaN rule costs a select, a fix-up and moves besides (about nine instructions in
    sm_90 machine code, against three): in the passes over every entry that is most of an entry's cost."""
    return a if a > b else b


@functools.cache
def reducers(threads: int):
    """Device functions reducing over a warp or a block of ``threads`` threads, in a fixed order (so floating-point
    sums are the same on every run): each takes the value, a shared scratch array of ``threads`` entries of the
    value's type, and the thread's index, and returns the result in every thread of the warp or block."""
    THREADS, WARPS = threads, threads // 32

    @cuda.jit(device=True)
    def warp_max(value, scratch, tid):
        if SHUFFLES:
            for lane_mask in (16, 8, 4, 2, 1):
                value = max(value, cuda.shfl_xor_sync(0xFFFFFFFF, value, lane_mask))
        else:
            scratch[tid] = value
            cuda.syncthreads()
            base = tid - tid % 32
            value = scratch[base]
            for lane in range(1, 32):
                value = max(value, scratch[base + lane])
            cuda.syncthreads()
        return value

    @cuda.jit(device=True)
    def warp_sum(value, scratch, tid):
        if SHUFFLES:
            for lane_mask in (16, 8, 4, 2, 1):
                value += cuda.shfl_xor_sync(0xFFFFFFFF, value, lane_mask)
        else:
            scratch[tid] = value
            cuda.syncthreads()
            base = tid - tid % 32
            value = scratch[base]
            for lane in range(1, 32):
                value += scratch[base + lane]
            cuda.syncthreads()
        return value

    @cuda.jit(device=True)
    def block_max(value, scratch, tid):
        value = warp_max(value, scratch, tid)
        if tid % 32 == 0:
            scratch[tid // 32] = value
        cuda.syncthreads()
        value = scratch[0]
        for warp in range(1, WARPS):
            value = max(value, scratch[warp])
        cuda.syncthreads()  # everyone has read scratch before it is used again
        return value

    @cuda.jit(device=True)
    def block_sum(value, scratch, tid):
        value = warp_sum(value, scratch, tid)
        if tid % 32 == 0:
            scratch[tid // 32] = value
        cuda.syncthreads()
        value = scratch[0]
        for warp in range(1, WARPS):
            value += scratch[warp]
        cuda.syncthreads()
        return value

    if THREADS % 32:
        raise ValueError(f"threads = {THREADS} must be a multiple of 32 (whole warps)")
    return warp_max, warp_sum, block_max, block_sum


@functools.cache
def first_thread_sums(threads: int):
    """A device function ``sums(a, b, c, sa, sb, sc, tid) -> (a, b, c)``: three block sums (each as
    :func:`reducers`'s ``block_sum`` adds, in the same order) behind one barrier, right in thread 0 only. ``sa``,
    ``sb``, ``sc``: shared scratch of ``threads`` entries of each value's type, not read by any thread since their
    last barrier."""
    WARPS = threads // 32
    _, warp_sum, _, _ = reducers(threads)

    @cuda.jit(device=True)
    def sums(a, b, c, sa, sb, sc, tid):
        a = warp_sum(a, sa, tid)
        b = warp_sum(b, sb, tid)
        c = warp_sum(c, sc, tid)
        if tid % 32 == 0:
            sa[tid // 32] = a
            sb[tid // 32] = b
            sc[tid // 32] = c
        cuda.syncthreads()
        if tid == 0:
            a, b, c = sa[0], sb[0], sc[0]
            for warp in range(1, WARPS):
                a += sa[warp]
                b += sb[warp]
                c += sc[warp]
        return a, b, c

    return sums


def _check_width(k: int, kp: int, threads: int) -> None:
    if kp % 4 or kp < k:
        raise ValueError(f"the padded width kp = {kp} must be a multiple of 4 and at least k = {k}")
    if threads % 32:
        raise ValueError(f"threads = {threads} must be a multiple of 32 (whole warps)")


def capped_kernel(registers: int) -> Callable[[Callable[..., Any]], Any]:
    """``cuda.jit`` with a register cap a thread (numba's simulator takes no cap)."""
    return lambda fn: cuda.jit(fn) if config.ENABLE_CUDASIM else cuda.jit(max_registers=registers)(fn)


row_kernel = capped_kernel(ROW_REGISTERS)  # the row kernels' (here and Ozaki-II's residue rows)
col_kernel = capped_kernel(COL_REGISTERS)  # the column-chunk kernel's


def rows_threads(kp: int) -> int:
    """Threads per row for a row of width kp: 16 entries a thread (registers for the row, and 64 registers a thread
    leave room for two blocks of 512 per SM), between 128 and 1024 threads."""
    return min(1024, max(128, 32 * -(-kp // (16 * 32))))


def items_per_thread(kp: int, threads: int) -> int:
    """Entries a thread of a row kernel holds: runs of 4, ``4 ceil(kp / 4 / threads)``."""
    return 4 * -(-(kp // 4) // threads)


QUANT_SHIFT = 21 - (QUANT.bit_length() - 1)  # floor(f QUANT) is the top bits of a normal double's significand
TWO_64 = 2.0**64  # a subnormal double times this is a normal one, exactly
SCALE_LIMIT = 1022  # 2^-e is a normal double, so x 2^-e is one exact multiply, for |e| <= SCALE_LIMIT
assert QUANT & (QUANT - 1) == 0 and QUANT <= 2**21
assert COL_TILE * COL_ROWS >= CHUNK  # a column-chunk block loads its chunk's weights one a thread


@cuda.jit(device=True)
def exponent_of(v):
    """``math.frexp(v)[1]`` of a finite nonzero v, from its exponent field (a subnormal v's after scaling it by
    ``2^64``, exactly)."""
    field = (hi_word(v) >> 20) & 0x7FF
    if field == 0:  # subnormal: 2^64 v is normal, exactly
        field = ((hi_word(v * TWO_64) >> 20) & 0x7FF) - 64
    return int32(field - 1022)


@cuda.jit(device=True)
def line_exponent(amax):
    """The largest ``frexp`` exponent of a line or chunk whose largest magnitude is ``amax`` (``frexp``'s exponent
    grows with the magnitude), or ``NO_EXPONENT`` when it holds only zeros."""
    return exponent_of(amax) if amax > 0.0 else int32(NO_EXPONENT)


@cuda.jit(device=True)
def unit_scale(e):
    """``2^-e`` where ``x 2^-e`` is one exact multiply (``|e| <= SCALE_LIMIT``), else 0: then ``ldexp`` it."""
    return math.ldexp(1.0, -int(e)) if -SCALE_LIMIT <= e <= SCALE_LIMIT else 0.0


@cuda.jit(device=True)
def scaled(v, e, scale):
    """``v 2^-e``: one multiply by :func:`unit_scale`'s ``scale``, or ``ldexp`` where it is 0. Both round the exact
    product once (a subnormal result included), so they agree bit for bit."""
    return v * scale if scale != 0.0 else math.ldexp(v, -int(e))


@cuda.jit(device=True)
def s_term(v, top):
    """The integer term of a nonzero ``v`` in ``precision.line_terms``'s S of a chunk whose largest exponent is
    ``top``: ``(floor(f QUANT) + 1)^2 4^rel`` for ``v = f 2^e``, ``rel = e - top + SPAN``, or 256 below the span.

    For a normal v, e and ``floor(f QUANT)`` come from the bits of its high word (exponent field, and the top bits
    of the significand with its leading 1), not from ``frexp`` and ``floor``, which libdevice builds with branches
    for zeros, subnormals and non-finite values; a subnormal v is first scaled by ``2^64`` (exact: the same
    significand, its exponent 64 higher)."""
    hi = hi_word(v)
    field = (hi >> 20) & 0x7FF
    if field == 0:  # subnormal: 2^64 v is normal, exactly, with the same significand
        hi = hi_word(v * TWO_64)
        field = ((hi >> 20) & 0x7FF) - 64
    e = field - 1022
    q = int64(((hi & 0xFFFFF) | 0x100000) >> QUANT_SHIFT)
    rel = e - top + SPAN
    if rel >= 0:
        qv = q + 1
        return (qv * qv) << (2 * rel)
    return int64(256)


FAST_TOP = 1 + SPAN - 1022  # -1005: from this chunk exponent on, the span's lowest exponent is a normal double's
_FIELD_AND_TOP4 = int32(0x7FFF0000)  # a double's exponent field and the top four bits of its fraction, no sign
_HI_16 = int32(0x40300000)  # the high word of 16.0 (16^2 = 256, the term below the span)
assert QUANT == 32 and SPAN == 16  # s_root keeps four fraction bits (floor(32 f) = 16 + those) and rel <= 16


@cuda.jit(device=True)
def root_constants(top):
    """The two int32 constants of :func:`s_root` for a chunk whose largest exponent is ``top >= FAST_TOP``: what
    moves an entry's high word (its exponent field and top four fraction bits) to that of ``q 2^rel``, and the
    smallest such high word within the span (``rel >= 0``)."""
    return int32(((21 - top) << 20) + (1 << 16)), int32((top + 1022 - SPAN) << 20)


@cuda.jit(device=True)
def s_root(v, add, floor):
    """The double whose square is :func:`s_term`'s term of ``v``: ``q 2^rel`` within the span, 16 below it, 0 for
    a zero. The squares are integers below ``2^42`` and a chunk's 128 sum below ``2^49``, so FP64 adds them exactly,
    in any order.

    ``q 2^rel`` is the entry's high word with its exponent field moved and 1 added below its top four fraction
    bits (``floor(32 f) + 1``; a carry out of them is the exponent's, as ``q = 32`` needs), over a low word of
    zeros: integer operations on the high word and one FMA an entry in the caller, against an int64 multiply and a
    variable 64-bit shift. Valid for ``top >= FAST_TOP`` (:func:`root_constants`): then a zero or subnormal entry
    is below the span."""
    bits = int32(hi_word(v) & _FIELD_AND_TOP4)
    high = int32(bits + add) if bits >= floor else _HI_16
    return of_hi_word(high if v != 0.0 else int32(0))


@functools.cache
def make_row_load(k: int, kp: int, threads: int = ROWS_THREADS, tested: bool = True):
    """A device function ``row_load(x, row, vals, tid) -> (bad, amax)``: this thread's entries of row ``row`` into
    ``vals`` (run r holds entries ``4 (tid + r threads) .. +3``; NaN and Inf replaced by 0, zeros past k), and this
    thread's non-finite flag and largest magnitude (the block's reductions are the caller's). Without ``tested``,
    where the block's entries fill the row exactly, no entry's column is tested against k (the loads may then be
    issued together: more registers, which the residue kernel cannot spare)."""
    K, THREADS, ITEMS = k, threads, items_per_thread(kp, threads)
    FULL = not tested and K == ITEMS * THREADS

    @cuda.jit(device=True)
    def row_load(x, row, vals, tid):
        bad = int32(0)
        amax = 0.0
        line = x[uint64(row)]  # unsigned offsets: no negative-index fix-up a load
        for j in range(ITEMS):
            col = 4 * (tid + (j // 4) * THREADS) + j % 4
            v = line[uint64(col)] if FULL or col < K else 0.0
            if not abs(v) <= _MAX_FINITE:
                bad = int32(1)
                v = 0.0
            vals[j] = v
            amax = larger(abs(v), amax)  # v finite here
        return bad, amax

    return row_load


@functools.cache
def make_row_largest(k: int, kp: int, threads: int = ROWS_THREADS, tested: bool = True):
    """A device function ``row_largest(x, row, vals, si, sd, tid) -> (bad, amax, e)``: the row loaded into ``vals``
    (:func:`make_row_load`), and, the same in every thread, its non-finite flag, largest magnitude and that
    magnitude's exponent (0 for a zero row). ``si`` and ``sd``: shared scratch of ``threads`` int32 and float64;
    ``tested`` as :func:`make_row_load`'s."""
    _, _, block_max, _ = reducers(threads)
    row_load = make_row_load(k, kp, threads, tested)

    @cuda.jit(device=True)
    def row_largest(x, row, vals, si, sd, tid):
        bad, amax = row_load(x, row, vals, tid)
        bad = int32(1) if cuda.syncthreads_or(bad) else int32(0)
        amax = block_max(amax, sd, tid)
        e_line = 0
        if amax > 0.0:
            _, e_line = math.frexp(amax)
        return bad, amax, e_line

    return row_largest


LANE_TERMS_MAX = 4 * 2**42  # a lane's part of a chunk's S: four terms, each at most 32^2 4^SPAN
TERM_SPLIT = 26  # its low 26 bits and the rest: over 32 lanes, below 2^31 and at most 2^23, so no uint32 sum wraps


@functools.cache
def chunk_reducers(threads: int = ROWS_THREADS):
    """Device functions ``(high_of_warp, total_of_warp)``, each ``f(value, scratch, tid)`` over a warp of a block of
    ``threads``: the largest int32 chunk exponent, and the sum of the lanes' int64 parts of S (each at most
    ``LANE_TERMS_MAX``), in every lane. On a GPU each is ``redux.sync``: one instruction for the exponent, two
    for the sum (the parts' low ``TERM_SPLIT`` bits and the rest, summed apart as uint32 that cannot wrap, then
    joined), against five shuffle steps each. In the simulator, which has no ``redux``, they are
    :func:`reducers`'s (shared memory). Integers: the result is the same either way."""
    warp_max, warp_sum, _, _ = reducers(threads)
    if not SHUFFLES:
        return warp_max, warp_sum
    low_mask = (1 << TERM_SPLIT) - 1

    @cuda.jit(device=True)
    def high_of_warp(value, scratch, tid):
        return warp_redux.max_s32(int32(value))

    @cuda.jit(device=True)
    def total_of_warp(value, scratch, tid):
        low = warp_redux.add_u32(uint32(value & low_mask))
        high = warp_redux.add_u32(uint32(value >> TERM_SPLIT))
        return (int64(high) << TERM_SPLIT) + int64(low)

    return high_of_warp, total_of_warp


@functools.cache
def make_chunk_sum(threads: int = ROWS_THREADS):
    """A device function ``chunk_sum(vals, r, si, sl, tid) -> (chunk, high)``: run r of a row held as
    :func:`make_row_load` holds it is one chunk of 128 entries a warp; the warp finds the chunk's largest exponent
    ``high`` and its integer sum ``chunk`` (:func:`chunk_reducers`), both in every lane (:func:`keep_chunk` takes
    them on)."""
    high_of_warp, total_of_warp = chunk_reducers(threads)

    @cuda.jit(device=True)
    def chunk_sum(vals, r, si, sl, tid):
        big = 0.0
        for q in range(4):
            big = larger(abs(vals[4 * r + q]), big)  # the loads replaced NaN and Inf by 0
        high = high_of_warp(line_exponent(big), si, tid)
        total = int64(0)
        if high >= FAST_TOP:  # the same in every lane of the warp
            add, floor = root_constants(high)
            terms = 0.0
            for q in range(4):
                root = s_root(vals[4 * r + q], add, floor)
                terms += root * root
            total = int64(terms)
        else:
            for q in range(4):
                v = vals[4 * r + q]
                if v != 0.0:
                    total += s_term(v, high)
        return total_of_warp(total, sl, tid), high

    return chunk_sum


SPREAD_RUNS = 32  # up to this many runs a row, lane r of each warp keeps run r's chunk until the last run


@cuda.jit(device=True)
def chunk_shifted(chunk, high, e_line):
    """A chunk's sum, its largest exponent ``high``, in the units of its line's exponent ``e_line``, rounded up
    (``ceil_shift``): its part of ``precision.line_terms``'s S (0 for a chunk of zeros)."""
    return ceil_shift(chunk, 2 * (e_line - high)) if chunk > 0 else int64(0)


@cuda.jit(device=True)
def keep_chunk(spread, lane, r, chunk, high, e_line, kept, kept_high, part):
    """Run r's chunk (:func:`make_chunk_sum`, the same in every lane) into the lane's share of S; returns ``(kept,
    kept_high, part)``. With ``spread`` (at most SPREAD_RUNS runs) lane r keeps it, to be shifted once after the
    last run (``part = chunk_shifted(kept, kept_high, e_line)``): a shift a lane, not one a run that the whole warp
    issues for lane 0. Without, lane 0 adds each run's chunk, shifted, to ``part``. The block's sum of the parts is
    S either way: integers, in any order."""
    if spread:
        if lane == r:
            return chunk, high, part
    elif lane == 0:
        part += chunk_shifted(chunk, high, e_line)
    return kept, kept_high, part


@functools.cache
def make_row_statistics(k: int, kp: int, threads: int = ROWS_THREADS):
    """A device function ``row_statistics(x, row, vals, si, sl, sd, tid) -> (bad, amax, e, s)`` for a block of
    ``threads`` threads on row ``row`` of x (m, k): it loads the row into ``vals`` (this thread's entries: run r
    holds entries ``4 (tid + r threads) .. +3``; NaN and Inf replaced by 0) and returns, the same in every thread,
    the row's non-finite flag, largest magnitude, its exponent and ``precision.line_terms``'s S (one
    :func:`make_chunk_sum` a run, :func:`keep_chunk`). ``si``, ``sl`` and ``sd`` are shared scratch arrays of
    ``threads`` int32, int64 and float64.
    """
    _check_width(k, kp, threads)
    RUNS = items_per_thread(kp, threads) // 4
    SPREAD = RUNS <= SPREAD_RUNS
    _, _, _, block_sum = reducers(threads)
    row_largest = make_row_largest(k, kp, threads)
    chunk_sum = make_chunk_sum(threads)

    @cuda.jit(device=True)
    def row_statistics(x, row, vals, si, sl, sd, tid):
        bad, amax, e_line = row_largest(x, row, vals, si, sd, tid)
        part, kept, kept_high = int64(0), int64(0), int32(0)
        for r in range(RUNS):
            chunk, high = chunk_sum(vals, r, si, sl, tid)
            kept, kept_high, part = keep_chunk(SPREAD, tid % 32, r, chunk, high, e_line, kept, kept_high, part)
        if SPREAD:
            part = chunk_shifted(kept, kept_high, e_line)
        s = block_sum(part, sl, tid)
        return bad, amax, e_line, s

    return row_statistics


@cuda.jit(device=True)
def store_line(fstats, istats, top, line, amax, norm2, cross2, e, s, bad):
    """A line's statistics into ``fstats`` (AMAX, NORM2, CROSS2) and ``istats`` (EXP, TERMS, BAD), and its exponent
    into the operand's largest (``top``, atomic max) where the line is not all zeros: the row kernel's and the
    combine's last step."""
    fstats[AMAX, line] = amax
    fstats[NORM2, line] = norm2
    fstats[CROSS2, line] = cross2
    istats[EXP, line] = e
    istats[TERMS, line] = s
    istats[BAD, line] = bad
    if amax > 0.0:
        cuda.atomic.max(top, 0, int32(e))


@functools.cache
def make_row_stats_kernel(
    k: int,
    kp: int,
    threads: int = ROWS_THREADS,
    weighted: bool = True,
    terms: bool = True,
    staged: bool = False,
):
    """``row_stats_kernel[blocks, threads, 0, shared](x, w, fstats, istats, top)``: the rows of x (m, k), block b
    taking rows b, b + blocks, ... (``blocks = m``: one row each).

    ``fstats`` (3, m) float64 gets each row's largest magnitude, ``sum (x 2^-e)^2`` and, when ``weighted``,
    ``sum (x_l 2^-e)^2 w_l`` (w: k float64); ``istats`` (3, m) int64 its exponent e, S and the non-finite flag;
    ``top`` (1,) int32 the largest e of a nonzero row (atomic max: fill it with a small value first). Without
    ``terms``, S is not found (0 is written): a pass whose norms are the other operand's weights reads only the
    norms and exponents, and S is most of a row's work (an exponent and a term an entry, a warp's
    reductions a chunk).

    ``staged`` (weighted only): the block copies w into shared memory once, zeros past k, and every row reads its
    weights there, not from global memory once a row (``shared = staged_weight_bytes(kp, threads)`` bytes of dynamic
    shared memory at launch): with fewer blocks than rows, w crosses from L2 once a block, not once a row.
    """
    THREADS, K, WEIGHTED, TERMS_TOO = threads, k, weighted, terms
    ITEMS = items_per_thread(kp, threads)
    STAGED = weighted and staged
    WIDTH = ITEMS * THREADS  # the columns the block's entries cover: the staged weights, zeros past k
    FULL = K == ITEMS * THREADS  # the block's entries fill the row: no entry's column tested against k
    _check_width(k, kp, threads)
    SPREAD = ITEMS // 4 <= SPREAD_RUNS
    row_largest = make_row_largest(k, kp, threads, tested=not FULL)
    chunk_sum = make_chunk_sum(threads)
    sums = first_thread_sums(threads)

    @row_kernel
    def row_stats_kernel(x, w, fstats, istats, top):
        tid = cuda.threadIdx.x
        vals = cuda.local.array(ITEMS, float64)
        si = cuda.shared.array(THREADS, int32)
        sl = cuda.shared.array(THREADS, int64)
        sd = cuda.shared.array(THREADS, float64)
        sd2 = cuda.shared.array(THREADS, float64)
        sw = cuda.shared.array(0, float64)  # the staged weights (STAGED only: no bytes are asked for otherwise)
        if STAGED:
            for col in range(tid, WIDTH, THREADS):
                sw[col] = w[col] if col < K else 0.0
            # (the first row's barriers, in row_largest, come before any thread reads sw)
        row, rows = int32(cuda.blockIdx.x), int32(x.shape[0])
        while row < rows:  # (a while loop: range's count, for any step, is a 64-bit division)
            bad, amax, e = row_largest(x, row, vals, si, sd, tid)
            part, kept, kept_high = int64(0), int64(0), int32(0)
            norm2 = 0.0
            cross2 = 0.0
            scale = unit_scale(e)
            for r in range(ITEMS // 4):  # S's chunk and the norms of each run together: its entries die after it
                if TERMS_TOO:
                    chunk, high = chunk_sum(vals, r, si, sl, tid)
                    kept, kept_high, part = keep_chunk(SPREAD, tid % 32, r, chunk, high, e, kept, kept_high, part)
                for q in range(4):
                    v = scaled(vals[4 * r + q], e, scale)
                    norm2 += v * v
                    if WEIGHTED:
                        col = 4 * (tid + r * THREADS) + q
                        if STAGED:
                            cross2 += v * v * sw[col]  # zeros past k, as v is there
                        elif FULL or col < K:
                            cross2 += v * v * w[uint64(col)]
            if TERMS_TOO and SPREAD:
                part = chunk_shifted(kept, kept_high, e)
            s, norm2, cross2 = sums(part, norm2, cross2, sl, sd, sd2, tid)  # right in thread 0, which stores them
            # (sd was last read before block_max's closing barrier in row_largest)
            if tid == 0:
                store_line(fstats, istats, top, row, amax, norm2, cross2, e, s, bad)
            cuda.syncthreads()  # thread 0 has read sl, sd and sd2 before the next row's reductions write them
            row += int32(cuda.gridDim.x)

    return row_stats_kernel


STAGED_WEIGHTS_MAX = 128 * 1024  # bytes of staged weights a row block may take (kp up to 16384 with 16 a thread)


def staged_weight_bytes(kp: int, threads: int) -> int:
    """The dynamic shared memory of a ``staged`` row kernel: one float64 weight for every column its block's entries
    cover, or 0 where that is more than ``STAGED_WEIGHTS_MAX`` (then the weights are read from global memory)."""
    nbytes = 8 * items_per_thread(kp, threads) * threads
    return nbytes if nbytes <= STAGED_WEIGHTS_MAX else 0


def row_blocks(rows: int, threads: int, sms: int) -> int:
    """Blocks of a row kernel launched once over ``rows`` rows on ``sms`` SMs: as many as can run at once (the
    register cap allows ``65536 / (ROW_REGISTERS threads)`` blocks an SM), each taking every ``blocks``-th row."""
    return max(1, min(rows, sms * max(1, 65536 // (ROW_REGISTERS * threads))))


@cuda.jit(device=True)
def _column_max(value, scratch, tx, ty):
    """The largest value over the COL_ROWS threads of column tx (all of them get it)."""
    scratch[ty, tx] = value
    cuda.syncthreads()
    value = scratch[0, tx]
    for other in range(1, COL_ROWS):
        value = max(value, scratch[other, tx])
    cuda.syncthreads()
    return value


@cuda.jit(device=True)
def _column_sums(a, b, c, sa, sb, sc, tx, ty):
    """Three sums over the COL_ROWS threads of column tx, each in the order of ty, behind one barrier: right in the
    column's thread ty = 0 only. ``sa``, ``sb``, ``sc`` are not read by any thread since their last barrier."""
    sa[ty, tx] = a
    sb[ty, tx] = b
    sc[ty, tx] = c
    cuda.syncthreads()
    if ty == 0:
        for other in range(1, COL_ROWS):
            a += sa[other, tx]
            b += sb[other, tx]
            c += sc[other, tx]
    return a, b, c


@functools.cache
def make_col_chunk_kernel(weighted: bool = True, terms: bool = True):
    """``col_chunk_kernel[(ceil(L / 32), ceil(K / 128)), (32, 8)](x, w, cf, ci)``: the chunk statistics of the
    columns of x (K, L), row-major: block (i, c) takes columns 32 i .. 32 i + 31 and rows 128 c .. 128 c + 127,
    each warp reading 32 consecutive doubles of one row.

    ``cf`` (3, chunks, L) float64 gets each chunk's largest magnitude, ``sum (x 2^-E_c)^2`` and, when ``weighted``,
    ``sum (x_l 2^-E_c)^2 w_l`` (w: K float64; a block reads its chunk's 128 once, into shared memory); ``ci``
    (3, chunks, L) int64 its exponent ``E_c``, its integer sum ``S_c`` (without ``terms``: 0, as
    ``make_row_stats_kernel``) and its non-finite flag.
    """
    PER, WEIGHTED, TERMS_TOO = CHUNK // COL_ROWS, weighted, terms

    @col_kernel
    def col_chunk_kernel(x, w, cf, ci):
        rows, cols = x.shape
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        col, chunk = cuda.blockIdx.x * COL_TILE + tx, cuda.blockIdx.y
        row0 = chunk * CHUNK + ty
        vals = cuda.local.array(PER, float64)
        si = cuda.shared.array((COL_ROWS, COL_TILE), int32)
        sl = cuda.shared.array((COL_ROWS, COL_TILE), int64)
        sd = cuda.shared.array((COL_ROWS, COL_TILE), float64)
        sd2 = cuda.shared.array((COL_ROWS, COL_TILE), float64)
        sw = cuda.shared.array(CHUNK, float64)  # the chunk's weights, loaded once a block with its entries
        bad = int32(0)
        amax = 0.0
        if WEIGHTED:
            lane = ty * COL_TILE + tx
            if lane < CHUNK:
                wrow = chunk * CHUNK + lane
                sw[lane] = w[wrow] if wrow < rows else 0.0
        if (chunk + 1) * CHUNK <= rows and col < cols:  # the whole chunk in x (every block but a ragged edge)
            first = x[uint64(row0) :, uint64(col)]  # unsigned offsets: no negative-index fix-up a load
            for i in range(PER):  # all loads first
                vals[i] = first[uint64(i * COL_ROWS)]
        else:
            for i in range(PER):
                row = row0 + i * COL_ROWS
                vals[i] = x[uint64(row), uint64(col)] if row < rows and col < cols else 0.0
        for i in range(PER):
            v = vals[i]
            if not abs(v) <= _MAX_FINITE:
                bad = int32(1)
                v = 0.0
                vals[i] = 0.0
            amax = larger(abs(v), amax)  # v finite here
        if cuda.syncthreads_or(bad):  # the same in every thread: a chunk with a NaN or an Inf is rare
            bad = _column_max(bad, si, tx, ty)
        amax = _column_max(amax, sd, tx, ty)
        top = line_exponent(amax)  # the exponent of the largest magnitude is the largest exponent
        total = int64(0)
        terms = 0.0
        norm2 = 0.0
        cross2 = 0.0
        scale = unit_scale(top)
        fast = TERMS_TOO and top >= FAST_TOP  # S's terms as doubles (s_root); else as int64 (a tiny chunk)
        add, floor = root_constants(top if fast else 0)
        for i in range(PER):  # S's term and the norms of each entry together: its value dies after it
            v = vals[i]
            if fast:
                root = s_root(v, add, floor)
                terms += root * root
            if v != 0.0:
                if TERMS_TOO and not fast:
                    total += s_term(v, top)
                u = scaled(v, top, scale)
                norm2 += u * u
                if WEIGHTED:  # (sw was written before syncthreads_or's barrier below)
                    cross2 += u * u * sw[uint64(ty + i * COL_ROWS)]
        if fast:
            total = int64(terms)
        total, norm2, cross2 = _column_sums(total, norm2, cross2, sl, sd, sd2, tx, ty)
        if ty == 0 and col < cols:
            cf[AMAX, chunk, col] = amax
            cf[NORM2, chunk, col] = norm2
            cf[CROSS2, chunk, col] = cross2
            ci[EXP, chunk, col] = top
            ci[TERMS, chunk, col] = total
            ci[BAD, chunk, col] = bad

    return col_chunk_kernel


@cuda.jit
def col_combine_kernel(cf, ci, fstats, istats, top):
    """``col_combine_kernel[ceil(L / COL_TILE), (COL_TILE, COL_ROWS)](cf, ci, fstats, istats, top)``: each column's
    chunks combined into its statistics, in the layout of ``row_stats_kernel`` (S exactly: ``sum_c ceil(S_c /
    4^(E - E_c))``; the norms rescaled from each chunk's exponent to the column's). A chunk counts where its norm is
    positive, as its S is: it holds a nonzero entry, whose square in the chunk's units is at least 1/4 (S is 0 from
    a pass without ``terms``).

    The COL_ROWS threads of a column read its chunks ``ty, ty + COL_ROWS, ...`` (a warp reads 32 columns of one
    chunk: one 256-byte row), and stage each chunk's rescaled terms in shared memory, COMBINE_TILE chunks at a
    time; the column's thread ty = 0 adds them in the chunks' order, so the sums are those of one thread walking
    the chunks (a skipped chunk adds 0.0, which leaves a sum of non-negative terms as it was)."""
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    col = cuda.blockIdx.x * COL_TILE + tx
    chunks, cols = cf.shape[1], cf.shape[2]
    live = col < cols
    sd = cuda.shared.array((COL_ROWS, COL_TILE), float64)
    sl = cuda.shared.array((COL_ROWS, COL_TILE), int64)
    tn = cuda.shared.array((COMBINE_TILE, COL_TILE), float64)
    tc = cuda.shared.array((COMBINE_TILE, COL_TILE), float64)
    ts = cuda.shared.array((COMBINE_TILE, COL_TILE), int64)
    amax = 0.0
    bad = int64(0)
    if live:
        for c in range(ty, chunks, COL_ROWS):
            amax = max(amax, cf[AMAX, c, col])
            bad = max(bad, ci[BAD, c, col])
    amax = _column_max(amax, sd, tx, ty)
    bad = _column_max(bad, sl, tx, ty)
    e = 0
    if amax > 0.0:
        _, e = math.frexp(amax)
    total = int64(0)
    norm2 = 0.0
    cross2 = 0.0
    for c0 in range(0, chunks, COMBINE_TILE):
        n = min(COMBINE_TILE, chunks - c0)
        for c in range(ty, n, COL_ROWS):
            part, a, b = int64(0), 0.0, 0.0
            if live and cf[NORM2, c0 + c, col] > 0.0:
                down = e - ci[EXP, c0 + c, col]
                s = ci[TERMS, c0 + c, col]
                if s > 0:  # always, after a pass with terms
                    part = ceil_shift(s, 2 * down)
                a = math.ldexp(cf[NORM2, c0 + c, col], -2 * int(down))
                b = math.ldexp(cf[CROSS2, c0 + c, col], -2 * int(down))
            ts[c, tx] = part
            tn[c, tx] = a
            tc[c, tx] = b
        cuda.syncthreads()
        if ty == 0:
            for c in range(n):
                total += ts[c, tx]
                norm2 += tn[c, tx]
                cross2 += tc[c, tx]
        cuda.syncthreads()  # thread 0 of each column has read the tile before the next one is staged
    if ty == 0 and live:
        store_line(fstats, istats, top, col, amax, norm2, cross2, e, total, bad)


@cuda.jit
def normalize_kernel(fstats, istats, top, out):
    """``out[l] = norm2_l 4^(e_l - top)``: the lines' squared norms in the units of the largest (the weights that
    ``row_stats_kernel`` and ``col_chunk_kernel`` take from the other operand)."""
    line = cuda.grid(1)
    if line < out.shape[0]:
        norm2 = fstats[NORM2, line]
        out[line] = math.ldexp(norm2, 2 * int(istats[EXP, line] - top[0])) if norm2 > 0.0 else 0.0


# ------------------------------------------------------------------------------------------------------------
# The choice: every count's estimate, from the statistics, on the device
# ------------------------------------------------------------------------------------------------------------


@cuda.jit(device=True)
def _pow4(x):
    """4^x for an integer x (at most 4^511; 0 below the subnormals)."""
    return math.ldexp(1.0, 2 * int(max(-1100, min(511, x))))


@functools.cache
def make_choice_kernels(line_offset: Callable[..., Any], threads: int = CHOICE_THREADS, stage: int = CHOICE_STAGE):
    """Three kernels that choose a count from the statistics of A's rows and B's columns, for a scheme whose line
    error exponent is ``x = -floor((offset + g) / divisor)``, ``g = line_offset(amax, e, s)`` (a device function of
    the track's). Lines are numbered rows first, then columns; ``blocks = ceil((m + n) / threads)``.

    - ``sums_kernel[blocks, threads](fr, ir, fc, ic, tops, offsets, divisor, partial)``: per block and count, the
      sums of ``eps^2`` over its rows and its columns, and of the squared norms (``partial`` (blocks, 2 (NC + 1)));
    - ``ratios_kernel[blocks, threads](fr, ir, fc, ic, tops, offsets, weights, divisor, partial, worst)``: every
      block adds the partial sums up in the blocks' order (the same totals everywhere), then takes, per count, its
      lines' largest squared ratio of error to norm (``worst`` (blocks, NC));
    - ``pick_kernel[1, t](worst, goal, out)``, 32 <= t <= threads: ``out[1 + c]`` the estimate of count c in units
      of u, ``out[0]`` the first count (an index into ``offsets``) whose estimate meets ``goal``, else the one with
      the lowest.

    Both of the last two read the blocks' rows ``stage`` at a time into shared memory, every thread loading, so
    that no thread waits on a chain of global loads; the sums are still added one block after the other.
    """
    THREADS, STAGE, WARPS = threads, stage, threads // 32
    warp_max, warp_sum, _, _ = reducers(threads)
    SLOTS = 2 * (MAX_COUNTS + 1)

    @cuda.jit(device=True)
    def line_of(g, fr, ir, fc, ic):
        """(valid, side, amax, e, s, bad, norm2, cross2) of line g."""
        m, n = fr.shape[1], fc.shape[1]
        if g < m:
            return True, 0, fr[AMAX, g], ir[EXP, g], ir[TERMS, g], ir[BAD, g], fr[NORM2, g], fr[CROSS2, g]
        if g < m + n:
            j = g - m
            return True, 1, fc[AMAX, j], ic[EXP, j], ic[TERMS, j], ic[BAD, j], fc[NORM2, j], fc[CROSS2, j]
        return False, 0, 0.0, int64(0), int64(0), int64(0), 0.0, 0.0

    @cuda.jit
    def sums_kernel(fr, ir, fc, ic, tops, offsets, divisor, partial):
        tid = cuda.threadIdx.x
        sd = cuda.shared.array(THREADS, float64)
        warps = cuda.shared.array((SLOTS, WARPS), float64)
        count = offsets.shape[0]
        valid, side, amax, e, s, bad, norm2, _ = line_of(cuda.blockIdx.x * THREADS + tid, fr, ir, fc, ic)
        top = tops[side]
        has_eps = valid and bad == 0 and s > 0
        g = line_offset(amax, e, s) if has_eps else int64(0)
        norm = math.ldexp(norm2, 2 * int(e - top)) if valid and bad == 0 and norm2 > 0.0 else 0.0
        width = 2 * (count + 1)
        for slot in range(width):  # each slot's warp sums first, then one barrier for all of them
            which, c = slot // (count + 1), slot % (count + 1)
            v = 0.0
            if valid and which == side:
                if c == count:
                    v = norm
                elif has_eps:
                    v = _pow4(-((offsets[c] + g) // divisor) - top)
            v = warp_sum(v, sd, tid)
            if tid % 32 == 0:
                warps[slot, tid // 32] = v
        cuda.syncthreads()
        if tid < width:  # the warps in their order: block_sum's sum, bit for bit
            v = warps[tid, 0]
            for warp in range(1, WARPS):
                v += warps[tid, warp]
            partial[cuda.blockIdx.x, tid] = v

    @cuda.jit
    def ratios_kernel(fr, ir, fc, ic, tops, offsets, weights, divisor, partial, worst):
        tid = cuda.threadIdx.x
        sd = cuda.shared.array(THREADS, float64)
        totals = cuda.shared.array(SLOTS, float64)
        staged = cuda.shared.array((STAGE, SLOTS), float64)
        maxima = cuda.shared.array((WARPS, MAX_COUNTS), float64)
        count = offsets.shape[0]
        width = 2 * (count + 1)
        acc = 0.0
        for b0 in range(0, partial.shape[0], STAGE):
            n = min(STAGE, partial.shape[0] - b0)
            for i in range(tid, n * width, THREADS):
                staged[i // width, i % width] = partial[b0 + i // width, i % width]
            cuda.syncthreads()
            if tid < width:
                for b in range(n):  # every block in the blocks' order: the same totals everywhere
                    acc += staged[b, tid]
            cuda.syncthreads()  # read before the next stage is written
        if tid < width:
            totals[tid] = acc
        cuda.syncthreads()
        valid, side, amax, e, s, bad, norm2, cross2 = line_of(cuda.blockIdx.x * THREADS + tid, fr, ir, fc, ic)
        live = valid and bad == 0 and cross2 > 0.0
        g = line_offset(amax, e, s) if live else int64(0)
        other = (1 - side) * (count + 1)
        for c in range(count):  # each count's warp maxima first, then one barrier for all of them
            v = 0.0
            if live:
                rho = _pow4(-((offsets[c] + g) // divisor) - e)
                eps_sum, norm_sum = totals[other + c], totals[other + count]
                v = (rho * (norm_sum / 3.0 + weights[c] * eps_sum) + norm2 * eps_sum / 3.0) / cross2
            v = warp_max(v, sd, tid)
            if tid % 32 == 0:
                maxima[tid // 32, c] = v
        cuda.syncthreads()
        if tid < count:
            v = maxima[0, tid]
            for warp in range(1, WARPS):
                v = max(v, maxima[warp, tid])
            worst[cuda.blockIdx.x, tid] = v

    @cuda.jit
    def pick_kernel(worst, goal, out):
        c, t = cuda.threadIdx.x, cuda.blockDim.x
        count = out.shape[0] - 1
        staged = cuda.shared.array((STAGE, MAX_COUNTS), float64)
        largest = 0.0
        for b0 in range(0, worst.shape[0], STAGE):  # a maximum: exact in any order
            n = min(STAGE, worst.shape[0] - b0)
            for i in range(c, n * count, t):
                staged[i // count, i % count] = worst[b0 + i // count, i % count]
            cuda.syncthreads()
            if c < count:
                for b in range(n):
                    largest = max(largest, staged[b, c])
            cuda.syncthreads()
        if c < count:
            out[1 + c] = math.sqrt(largest) / U
        cuda.syncthreads()
        if c == 0:
            chosen = -1
            for i in range(count):
                if chosen < 0 and out[1 + i] <= goal:
                    chosen = i
            if chosen < 0:
                chosen = 0
                for i in range(1, count):
                    if out[1 + i] < out[1 + chosen]:
                        chosen = i
            out[0] = chosen

    return sums_kernel, ratios_kernel, pick_kernel


# ------------------------------------------------------------------------------------------------------------
# Host side: buffers and launches (CuPy)
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SchemeTables:
    """A scheme's counts for one k, as the choice kernels read them: ``offsets`` (NC,) int64 and ``weights`` (NC,)
    float64 on the device, the divisor, the target in units of u, and how many products a count costs."""

    name: str
    counts: tuple[int, ...]
    offsets: Any
    weights: Any
    divisor: int
    goal: float
    products: Callable[[int], int]
    line_offset: Callable[..., Any]


def scheme_tables(
    scheme: Any, k: int, line_offset: Callable[..., Any], counts: Sequence[int] | None = None, *, xp: Any = None
):
    """:class:`SchemeTables` of a ``utilities.precision.Scheme`` for inner dimension k; ``line_offset`` is the device
    function computing the scheme's g (the track's). ``xp``: the array module (CuPy by default; NumPy in numba's
    simulator)."""
    if xp is None:
        import cupy as xp

    counts = tuple(scheme.counts(k) if counts is None else counts)
    if not 0 < len(counts) <= MAX_COUNTS:
        raise ValueError(f"a choice tries 1 to {MAX_COUNTS} counts, got {len(counts)}")
    offsets = xp.asarray([scheme.offset(c) for c in counts], dtype=xp.int64)
    weights = xp.asarray([scheme.weight(c) for c in counts], dtype=xp.float64)
    return SchemeTables(scheme.name, counts, offsets, weights, scheme.divisor, target(k), scheme.products, line_offset)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class GemmStatistics:
    """The statistics of A's rows and B's columns for C = A @ B (m x k by k x n), on the GPU: buffers for one shape.

    ``columns(b)``: B's column statistics alone (a plan with a fixed count: the residues of B need each column's
    exponent); ``compute(a, b)``: everything a choice reads; ``choose(tables)``: the count, with one copy of
    ``1 + NC`` doubles to the host. ``rows_f``, ``rows_i``, ``cols_f``, ``cols_i`` hold the statistics in the
    layout ``(AMAX, NORM2, CROSS2)`` and ``(EXP, TERMS, BAD)``; ``tops`` A's and B's largest exponents. ``xp``: the
    array module of the buffers, CuPy by default; the tests pass NumPy and run the same launches in numba's
    simulator, on these very buffers (``tests/test_ozaki_plans.py``, ``tests/test_ozaki2_plans.py``).
    """

    def __init__(
        self,
        m: int,
        n: int,
        k: int,
        *,
        threads: int | None = None,
        choice_threads: int = CHOICE_THREADS,
        xp: Any = None,
    ):
        if xp is None:
            import cupy as xp

        self.m, self.n, self.k, self.threads, self.choice_threads = m, n, k, threads, choice_threads
        # the row kernels' blocks run over several rows each: as many blocks as the GPU's SMs hold at once (in the
        # simulator, three SMs, so that the tests see blocks that take more than one row)
        self.sms = 3 if xp is np else xp.cuda.Device().attributes["MultiProcessorCount"]
        f, i = xp.float64, xp.int64
        self.rows_f, self.rows_i = xp.zeros((3, m), f), xp.zeros((3, m), i)
        self.cols_f, self.cols_i = xp.zeros((3, n), f), xp.zeros((3, n), i)
        self.a_cols_f, self.a_cols_i = xp.zeros((3, k), f), xp.zeros((3, k), i)
        self.b_rows_f, self.b_rows_i = xp.zeros((3, k), f), xp.zeros((3, k), i)
        self.a_chunks = xp.zeros((3, _ceil_div(m, CHUNK), k), f), xp.zeros((3, _ceil_div(m, CHUNK), k), i)
        self.b_chunks = xp.zeros((3, _ceil_div(k, CHUNK), n), f), xp.zeros((3, _ceil_div(k, CHUNK), n), i)
        self.q, self.r = xp.zeros(k, f), xp.zeros(k, f)  # A's column norms weigh B's columns; B's row norms A's rows
        self.tops = xp.zeros(2, xp.int32)
        self.blocks = _ceil_div(m + n, choice_threads)
        self.partial = xp.zeros((self.blocks, 2 * (MAX_COUNTS + 1)), f)
        self.worst = xp.zeros((self.blocks, MAX_COUNTS), f)
        self.out = xp.zeros(1 + MAX_COUNTS, f)
        # compute's passes over B on a second stream, beside those over A: only where every launch goes to CuPy's
        # current stream (the course's fast launch path; numba's dispatcher launches on its own default stream)
        self.concurrent = False
        if xp is np:
            self.host_out = np.zeros(1 + MAX_COUNTS)
        else:  # the choice's one copy to the host lands in pinned memory
            from .machinery import streams, versions

            self._pinned = xp.cuda.alloc_pinned_memory(8 * (1 + MAX_COUNTS))
            self.host_out = np.frombuffer(self._pinned, np.float64, 1 + MAX_COUNTS)
            self.concurrent = versions.verified(versions.FAST_LAUNCH)
            self.beside = streams.Beside(xp)

    def _col_chunks(
        self,
        x: Any,
        w: Any,
        chunks: tuple[Any, Any],
        out_f: Any,
        out_i: Any,
        top: Any,
        weighted: bool,
        terms: bool = True,
    ) -> None:
        from .machinery import launch

        rows, cols = x.shape
        grid = (_ceil_div(cols, COL_TILE), _ceil_div(rows, CHUNK))
        launch.launch(make_col_chunk_kernel(weighted, terms), grid, (COL_TILE, COL_ROWS), 0, x, w, *chunks)
        self._combine(chunks, out_f, out_i, top)

    def _combine(self, chunks: tuple[Any, Any], out_f: Any, out_i: Any, top: Any) -> None:
        from .machinery import launch

        cols = chunks[0].shape[2]
        launch.launch(
            col_combine_kernel, _ceil_div(cols, COL_TILE), (COL_TILE, COL_ROWS), 0, *chunks, out_f, out_i, top
        )

    def _rows(self, x: Any, w: Any, out_f: Any, out_i: Any, top: Any, weighted: bool, terms: bool = True) -> None:
        from .machinery import launch

        rows, length = x.shape
        kp = -(-length // 4) * 4
        threads = self.threads or rows_threads(kp)
        shared = staged_weight_bytes(kp, threads) if weighted else 0
        kernel = make_row_stats_kernel(length, kp, threads, weighted, terms, staged=shared > 0)
        # staged weights: as many blocks as fit at once, each staging them once; else a block a row (blocks that
        # end early leave room for the other stream's pass)
        blocks = row_blocks(rows, threads, self.sms) if shared else rows
        launch.launch(kernel, blocks, threads, shared, x, w, out_f, out_i, top)

    def _normalize(self, fstats: Any, istats: Any, top: Any, out: Any) -> None:
        from .machinery import launch

        launch.launch(normalize_kernel, _ceil_div(out.shape[0], 256), 256, 0, fstats, istats, top, out)

    def columns(self, b: Any) -> None:
        """B's column statistics, without the weights (a fixed count needs each column's exponent and S only)."""
        self.tops[1:2].fill(NO_EXPONENT)
        self._col_chunks(b, self.q, self.b_chunks, self.cols_f, self.cols_i, self.tops[1:2], weighted=False)

    def compute(self, a: Any, b: Any) -> None:
        """Every statistic a choice reads, in four passes: A by column chunks, B by rows (their norms only: the
        weights of the other operand's lines), A by rows, B by column chunks.

        With ``concurrent`` the passes over B run on a second stream: B's rows beside A's columns, then B's columns
        (weighted by A's column norms, ``q``) beside A's rows (weighted by B's row norms, ``r``), each weighted
        pass after the other stream's norms, and the caller's stream waits for both. Each stream keeps to its own
        operand's buffers and largest exponent (``tops[0]`` A's, ``tops[1]`` B's), so the statistics are the same
        bit for bit in either order."""
        self.tops.fill(NO_EXPONENT)
        ta, tb = self.tops[0:1], self.tops[1:2]

        def a_columns() -> None:  # A's column norms, then q (B's columns' weights)
            self._col_chunks(a, self.r, self.a_chunks, self.a_cols_f, self.a_cols_i, ta, weighted=False, terms=False)
            self._normalize(self.a_cols_f, self.a_cols_i, ta, self.q)

        def b_rows() -> None:  # B's row norms, then r (A's rows' weights)
            self._rows(b, self.q, self.b_rows_f, self.b_rows_i, tb, weighted=False, terms=False)
            self._normalize(self.b_rows_f, self.b_rows_i, tb, self.r)

        def a_rows() -> None:
            self._rows(a, self.r, self.rows_f, self.rows_i, ta, weighted=True)

        def b_columns() -> None:
            self._col_chunks(b, self.q, self.b_chunks, self.cols_f, self.cols_i, tb, weighted=True)

        if not self.concurrent:
            a_columns()
            b_rows()
            a_rows()
            b_columns()
            return
        with self.beside.follow():  # after the tops are filled, and whatever the caller queued before
            b_rows()
        a_columns()
        self.beside.join()  # A's rows need r, from B's rows
        with self.beside.follow():  # B's columns need q, from A's columns
            b_columns()
        a_rows()
        self.beside.join()

    def choose(self, tables: SchemeTables) -> Choice:
        """The count for the statistics of the last ``compute``: three small kernels, then one copy to the host."""

        from .machinery import launch

        sums, ratios, pick = make_choice_kernels(tables.line_offset, self.choice_threads)
        nc = len(tables.counts)
        div = np.int64(tables.divisor)
        stats = (self.rows_f, self.rows_i, self.cols_f, self.cols_i, self.tops)
        launch.launch(sums, self.blocks, self.choice_threads, 0, *stats, tables.offsets, div, self.partial)
        launch.launch(
            ratios,
            self.blocks,
            self.choice_threads,
            0,
            *stats,
            tables.offsets,
            tables.weights,
            div,
            self.partial,
            self.worst,
        )
        out = self.out[: 1 + nc]
        launch.launch(pick, 1, self.choice_threads, 0, self.worst, np.float64(tables.goal), out)
        host = self.host_out[: 1 + nc]
        self.to_host(out, host)
        return tables_choice(tables, host)

    def to_host(self, out: Any, host: np.ndarray) -> None:
        """The one copy to the host of a choice: the count and the estimates (into pinned memory; waits for it)."""
        if isinstance(out, np.ndarray):
            host[...] = out
        else:
            out.get(out=host)


def tables_choice(tables: SchemeTables, out: np.ndarray) -> Choice:
    """The :class:`utilities.precision.Choice` that ``pick_kernel``'s output says (tried: the counts up to the first
    that met the goal, as ``precision.fewest`` reports them, or all of them)."""
    estimates = {c: float(v) for c, v in zip(tables.counts, out[1 : 1 + len(tables.counts)], strict=True)}
    count = tables.counts[int(out[0])]
    met = [c for c in tables.counts if estimates[c] <= tables.goal]
    tried = {c: v for c, v in estimates.items() if not met or c <= met[0]}
    return Choice(tables.name, count, tables.products(count), estimates[count], tables.goal, tried)

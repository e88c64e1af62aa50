"""The plain numba (SIMT) kernels of Ozaki-II: scaling and residues, and the reconstruction, with their launches.

Both reproduce ``utilities.ozaki2.reference`` operation for operation: the exponents, residues and CRT digits bit
for bit (integer arithmetic, and FP64 operations whose results are exact integers), the reconstruction to its
last rounding (a GPU may fuse ``u_t c3_t`` into the running sum). They run under numba's CUDA simulator in the
tests and on the device in the plans.

- ``residue_rows_kernel``: one block per row of A (B goes through it transposed): the row's exact statistics
  (largest exponent, integer sum of squares bound), its exponent mu, then the residues of ``trunc(x 2^mu)`` modulo
  each modulus, four int8 residues a 32-bit store;
- ``reconstruct_kernel``: one thread per entry of C: the N products reduced to CRT digits, the fraction
  ``sum u_t / p_t`` in three parts, ``C = alpha 2^(-mu - nu) P frac(...) + beta C``.

Memory traffic at 8192^3 with 15 moduli: the residues read A and B once (0.5 GB each, plus B's transpose) and
write 15 bytes an entry (1 GB each); the reconstruction reads 15 int32 products an entry (4 GB) and writes C.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from numba import config, cuda, float64, int32, int64

from ..operands import NONFINITE_SHIFT
from ..simt import pack_digits
from . import reference as ref

ROWS_THREADS = 512  # threads per row in residue_rows_kernel
RECONSTRUCT_BLOCK = (32, 8)  # 32 columns (coalesced) by 8 rows
_MAX_FINITE = np.finfo(np.float64).max


def tables(count: int) -> dict[str, np.ndarray]:
    """The per-modulus constants the kernels read: p, 1/p, 2^26 mod p, the residue ranges, y_t, and 1/p as
    c1 + c2 + c3."""
    c = ref.crt(count)
    ps = c.moduli
    return {
        "p": np.array(ps, np.float64),
        "inv": np.array([1.0 / p for p in ps]),
        "k26": np.array([pow(2, 26, p) for p in ps], np.float64),
        "lo": np.array([ref.residue_range(p)[0] for p in ps], np.float64),
        "hi": np.array([ref.residue_range(p)[1] for p in ps], np.float64),
        "y": np.array(c.inverses, np.float64),
        "c1": np.array(c.c1),
        "c2": np.array(c.c2),
        "c3": np.array(c.c3),
    }


@cuda.jit(device=True, inline=True)
def near_mod(v, p, inv):
    """v minus the multiple of p nearest to it: exact for integers |v| < 2^52 (as ``reference._near_mod``)."""
    return v - math.floor(v * inv + 0.5) * p


@functools.cache
def make_residue(count: int):
    """A device function ``residue(x, t)``: the symmetric residue of the integer-valued double x (|x| < 2^78, which
    the scaling guarantees) modulo the t-th modulus, exactly, as ``reference.residue`` computes it."""
    T = tables(count)
    P, INV, K26, LO, HI = T["p"], T["inv"], T["k26"], T["lo"], T["hi"]

    @cuda.jit(device=True)
    def residue(x, t):
        # TODO (about 8 lines): split x into its bits above 2^26 and below; reduce each (near_mod), recombine them
        # with 2^26 mod p (K26[t]), reduce again, and bring the result into [LO[t], HI[t]]
        # SKELETON: return 0.0
        # BEGIN SOLUTION
        p, inv = P[t], INV[t]
        high = float64(math.trunc(x * 2.0**-26))  # below 2^52: near_mod is exact on it
        low = x - high * 2.0**26
        r = near_mod(near_mod(high, p, inv) * K26[t] + near_mod(low, p, inv), p, inv)
        if r > HI[t]:
            r -= p
        if r < LO[t]:
            r += p
        return r
        # END SOLUTION

    return residue


@cuda.jit(device=True)
def ceil_log2(v):
    """Bits of v - 1 (0 for v <= 1): ``int(v - 1).bit_length()`` for an int64 v >= 1 (once a row: a loop will do)."""
    bits = 0
    rest = v - 1
    while rest > 0:
        rest >>= 1
        bits += 1
    return bits


def _check_width(k: int, kp: int, threads: int) -> None:
    if kp % 4 or kp < k:
        raise ValueError(f"the padded width kp = {kp} must be a multiple of 4 and at least k = {k}")
    if threads % 32:
        raise ValueError(f"threads = {threads} must be a multiple of 32 (whole warps)")


@functools.cache
def make_row_statistics(k: int, kp: int, threads: int = ROWS_THREADS):
    """A device function ``row_statistics(x, row, vals, flags, sums, tid) -> (bad, e_max, total)`` for a block of
    ``threads`` threads on one row of x (m, k): it loads the row into ``vals`` (this thread's ITEMS entries, runs of
    4, NaN and Inf replaced by 0), and returns the row's non-finite flag, largest exponent and integer sum of squares
    bound (``reference.line_terms``), the same in every thread. ``flags`` and ``sums`` are shared arrays of
    ``threads`` int32 and int64. ITEMS is ``4 * ceil(kp / 4 / threads)``."""
    _check_width(k, kp, threads)
    K, THREADS, WORDS = k, threads, kp // 4
    ITEMS = 4 * -(-WORDS // threads)
    SHUFFLES = not config.ENABLE_CUDASIM
    QUANT, SPAN = ref.QUANT, ref.SPAN

    @cuda.jit(device=True)
    def block_max(value, shared, tid):
        """The largest int32 value over the block (every thread gets it)."""
        if SHUFFLES:
            for lane_mask in (16, 8, 4, 2, 1):
                value = max(value, cuda.shfl_xor_sync(0xFFFFFFFF, value, lane_mask))
            if tid % 32 == 0:
                shared[tid // 32] = value
            cuda.syncthreads()
            value = shared[0]
            for warp in range(1, THREADS // 32):
                value = max(value, shared[warp])
        else:  # numba's simulator has no shuffles
            shared[tid] = value
            cuda.syncthreads()
            value = shared[0]
            for other in range(1, THREADS):
                value = max(value, shared[other])
        cuda.syncthreads()  # everyone has read shared before it is used again
        return value

    @cuda.jit(device=True)
    def block_sum(value, shared, tid):
        """The int64 sum over the block (exact: integers, in any order)."""
        if SHUFFLES:
            for lane_mask in (16, 8, 4, 2, 1):
                value += cuda.shfl_xor_sync(0xFFFFFFFF, value, lane_mask)
            if tid % 32 == 0:
                shared[tid // 32] = value
            cuda.syncthreads()
            value = shared[0]
            for warp in range(1, THREADS // 32):
                value += shared[warp]
        else:
            shared[tid] = value
            cuda.syncthreads()
            value = shared[0]
            for other in range(1, THREADS):
                value += shared[other]
        cuda.syncthreads()
        return value

    @cuda.jit(device=True)
    def row_statistics(x, row, vals, flags, sums, tid):
        e_max = -(2**31)
        bad = 0
        for j in range(ITEMS):
            col = 4 * (tid + (j // 4) * THREADS) + j % 4
            v = x[row, col] if col < K else 0.0
            if not abs(v) <= _MAX_FINITE:
                bad = 1
                v = 0.0
            vals[j] = v
            if v != 0.0:
                _, e = math.frexp(v)
                e_max = max(e_max, e)
        bad = block_max(bad, flags, tid)
        e_max = block_max(e_max, flags, tid)
        total = int64(0)
        for j in range(ITEMS):
            v = vals[j]
            if v != 0.0:
                f, e = math.frexp(abs(v))
                rel = e - e_max + SPAN
                if rel >= 0:
                    q = int64(math.floor(f * QUANT)) + 1
                    total += (q * q) << (2 * rel)
                else:
                    total += 256
        total = block_sum(total, sums, tid)
        return bad, e_max, total

    return row_statistics


@functools.cache
def make_stats_kernel(k: int, kp: int, threads: int = ROWS_THREADS):
    """``stats_kernel[m, threads](x, e_max, s)``: each row's largest exponent and integer sum of squares bound
    (``reference.line_terms``; 0 and 0 for a row of zeros), for choosing the number of moduli."""
    THREADS, ITEMS = threads, 4 * -(-(kp // 4) // threads)
    row_statistics = make_row_statistics(k, kp, threads)

    @cuda.jit
    def stats_kernel(x, e_max, s):
        row, tid = cuda.blockIdx.x, cuda.threadIdx.x
        vals = cuda.local.array(ITEMS, float64)
        flags = cuda.shared.array(THREADS, int32)
        sums = cuda.shared.array(THREADS, int64)
        _, top, total = row_statistics(x, row, vals, flags, sums, tid)
        if tid == 0:
            e_max[row] = top if total > 0 else 0
            s[row] = total

    return stats_kernel


@functools.cache
def make_residue_rows_kernel(k: int, kp: int, count: int, threads: int = ROWS_THREADS,
                             residue_factory: Callable[[int], Any] = make_residue):  # fmt: skip
    """``residue_rows_kernel[m, threads](x, words, mu)``: one block per row of x (m, k), in one pass over x.

    The row's entries stay in registers while the block finds its statistics (``make_row_statistics``); then
    ``mu[row]`` (``NONFINITE_SHIFT`` if the row holds a NaN or an Inf), and the residues of ``trunc(x 2^mu)``
    modulo each of the ``count`` moduli, four to an int32 word of ``words``, the int32 view (count, m, kp/4) of
    the int8 residues (count, m, kp); columns k..kp-1 get zeros.
    """
    N, THREADS, WORDS = count, threads, kp // 4
    ITEMS = 4 * -(-WORDS // threads)
    TT, SPAN = ref.crt(count).t, ref.SPAN
    row_statistics = make_row_statistics(k, kp, threads)
    residue = residue_factory(count)

    @cuda.jit
    def residue_rows_kernel(x, words, mu):
        row, tid = cuda.blockIdx.x, cuda.threadIdx.x
        vals = cuda.local.array(ITEMS, float64)
        res = cuda.local.array((4, N), int32)
        flags = cuda.shared.array(THREADS, int32)
        sums = cuda.shared.array(THREADS, int64)
        bad, e_max, total = row_statistics(x, row, vals, flags, sums, tid)
        shift = int32(0)
        if total > 0:
            shift = int32((TT + 10 - 2 * (e_max - SPAN) - ceil_log2(total)) // 2)
        if bad != 0:
            shift = NONFINITE_SHIFT
        if tid == 0:
            mu[row] = shift
        for j in range(0, ITEMS, 4):
            word = tid + (j // 4) * THREADS
            if word < WORDS:
                for q in range(4):
                    xi = 0.0 if bad != 0 else math.ldexp(vals[j + q], int(shift))
                    xi -= math.fmod(xi, 1.0)  # trunc, kept in FP64: |xi| may pass 2^63 (numba's trunc is an int64)
                    for t in range(N):
                        res[q, t] = int32(residue(xi, t))
                for t in range(N):
                    words[t, row, word] = pack_digits(res[0, t], res[1, t], res[2, t], res[3, t])

    return residue_rows_kernel


@functools.cache
def make_reconstruct_kernel(count: int):
    """``reconstruct_kernel[grid, block](products, mu, nu, alpha, beta, c, out)``: C from the int32 products
    (count, m, n) of the residues, as ``reference.reduce_products`` then ``reference.reconstruct``."""
    T = tables(count)
    N = count
    P, INV, Y, C1, C2, C3 = T["p"], T["inv"], T["y"], T["c1"], T["c2"], T["c3"]
    PRODUCT = ref.crt(count).product_float

    @cuda.jit
    def reconstruct_kernel(products, mu, nu, alpha, beta, c, out):
        j, i = cuda.grid(2)
        if i >= out.shape[0] or j >= out.shape[1]:
            return
        if mu[i] == NONFINITE_SHIFT or nu[j] == NONFINITE_SHIFT:
            out[i, j] = math.nan
            return
        s1 = 0.0
        s2 = 0.0
        s3 = 0.0
        for t in range(N):
            # TODO (about 5 lines): the CRT digit u of product t, in [0, p), added to s1, s2 and s3 with weights c1,
            # c2 and c3
            # BEGIN SOLUTION
            p, inv = P[t], INV[t]
            r = near_mod(float64(products[t, i, j]), p, inv)
            u = near_mod(r * Y[t], p, inv)
            if u < 0:
                u += p
            s1 += u * C1[t]
            s2 += u * C2[t]
            s3 += u * C3[t]
            # END SOLUTION
        q = math.floor(s1 + 0.5)
        value = alpha * math.ldexp((((s1 - q) + s2) + s3) * PRODUCT, -int(mu[i] + nu[j]))
        if beta != 0.0:
            value += beta * c[i, j]
        out[i, j] = value

    return reconstruct_kernel


class Launch(NamedTuple):
    """One kernel launch: what to run, on which grid and block (its arguments are the caller's)."""

    name: str
    kernel: Any
    grid: Any
    block: Any


def stats_launch(m: int, k: int, kp: int) -> Launch:
    """The line statistics of an m x k matrix's rows: ``kernel[grid, block](x, e_max, s)``."""
    return Launch("statistics", make_stats_kernel(k, kp, ROWS_THREADS), m, ROWS_THREADS)


def residue_launch(m: int, k: int, kp: int, count: int, residue_factory: Callable[[int], Any] | None = None) -> Launch:
    """The residues of an m x k matrix: ``kernel[grid, block](x, words, mu)``."""
    kernel = make_residue_rows_kernel(k, kp, count, ROWS_THREADS, residue_factory or make_residue)
    return Launch("residues", kernel, m, ROWS_THREADS)


def reconstruct_launch(m: int, n: int, count: int, reconstruct_factory: Callable[[int], Any] | None = None) -> Launch:
    """The reconstruction of an m x n C: ``kernel[grid, block](products, mu, nu, alpha, beta, c, out)``."""
    tx, ty = RECONSTRUCT_BLOCK
    kernel = (reconstruct_factory or make_reconstruct_kernel)(count)
    return Launch("reconstruct", kernel, (-(-n // tx), -(-m // ty)), RECONSTRUCT_BLOCK)

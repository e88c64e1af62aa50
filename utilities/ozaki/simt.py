"""The plain numba (SIMT) kernels of Ozaki-I: exponent shifts, slicing and the FP64 epilogue, with their launches,
and the plan's host side, :class:`SimtPlan`: every buffer ``OzakiGemm`` allocates and its plain numba stages.

Their outputs are bit-identical to the NumPy reference's (``utilities.ozaki``): the epilogue follows it
operation for operation, and the slicing computes the same integers by an exact integer route. The tests
run them under numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) on small sizes, and on the device on a GPU
machine; the GPU notebooks use them as they are. ``SimtPlan`` runs on NumPy in the simulator too, so that its
launches meet the plan's own buffers there, where an index past the end of one raises. Kernels are built by
factories because their sizes (slices, items per thread) are compile-time constants; factories cache what they
build.

Memory traffic, the number to beat: slicing an m x k FP64 matrix into S int8 slices reads 8mk bytes and
writes S*mk bytes; for 8192^2 and S = 7 that is 0.54 GB + 0.47 GB per operand.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from numba import config, cuda, float64, int8, int32, int64

from .. import plans
from ..machinery import launch
from ..operands import NONFINITE_SHIFT  # the sentinel for rows/columns holding NaN or Inf
from ..simt import pack_digits
from ..smem import ceil_to
from .products import check_int32_budget, product_terms
from .slicing import check_slices

_MAX_FINITE = np.finfo(np.float64).max
ROWS_THREADS = 512  # threads per row of A in slice_rows_kernel
COLS_BLOCK = (32, 16)  # slice_cols_kernel's block: 32 columns of B, 16 threads along k

# Integer digits, warp shuffles over 512 threads a row and a 32 x 16 block with all loads issued first: each was
# measured against what it replaced (tools/slicing_breakdown.py; instructor-notes/ozaki.md, "Slicing").


@cuda.jit(device=True)
def shift_from_max(mu):
    """The exponent e with mu <= (127/128) 2^e (0 for mu == 0): digit 0 then stays within [-127, 127]."""
    if mu == 0.0:
        return 0
    mant, e = math.frexp(mu)
    if mant > 127.0 / 128.0:
        e += 1
    return e


@cuda.jit(device=True)
def choice_offset(amax, e, s):
    """Ozaki-I's g for the device-side choice (``utilities.precision_gpu``): a line's error exponent with S slices
    is ``shift - 8 S = -(8 S + g)``, so g is minus the shift from the line's largest magnitude."""
    return int64(-shift_from_max(amax))


@functools.cache
def make_split_digits(slices: int):
    """A device function ``split_digits(x, e, digits)`` writing the ``slices`` balanced base-256 digits of x.

    Digit s weighs 2^(e - 7 - 8s): the digits are those of the integer N = rint(x 2^(8 slices - 1 - e)), as in
    the reference. Integer arithmetic, not FP64 digit by digit: ldexp and rint are exact here, and adding
    128 to every digit below the top one (the bias 0x80...80) turns the balanced digits into the plain bytes
    of N + bias, so each digit is a shift, a mask and a subtraction; the top digit is what is left, a signed
    shift. Up to 8 slices N fits an int64; beyond, the given ``high_part`` splits it into its lowest 4 digits
    (which it writes) and the int64 part above them, whose HIGH = slices - 4 digits remain to be written.
    """
    SLICES, HIGH = slices, slices - 4 if slices > 8 else slices  # HIGH: digits in the (high) int64 word
    BIAS_HIGH = sum(128 << (8 * j) for j in range(HIGH - 1))  # 128 in each byte below the top digit
    BIAS_LOW = 0x80808080

    @cuda.jit(device=True)
    def high_part(v, digits):
        """N = rint(v) as an int64 (up to 8 slices). Beyond 8 slices N needs more than 63 bits: this writes its
        lowest 4 digits from the remainder below 2^32 (exact: |v - high 2^32| < 2^32) and returns the part above."""
        if SLICES <= 8:
            return int64(round(v))  # rint, half to even
        high = int64(math.trunc(v * 2.0**-32))
        word = round(v - float64(high) * 2.0**32) + BIAS_LOW
        for j in range(4):
            digits[SLICES - 1 - j] = int32((word >> (8 * j)) & 255) - 128
        return high + (word >> 32)  # the carry, -1, 0 or 1

    @cuda.jit(device=True)
    def split_digits(x, e, digits):
        # TODO (about 5 lines): v = x 2^(8 SLICES - 1 - e); high_part(v, digits) (given) returns N = rint(v), or
        # beyond 8 slices the part of N above its 4 lowest digits (which it writes). Its HIGH digits go to
        # digits[0..HIGH-1], most significant first. Add BIAS_HIGH to it; then for j = 0 .. HIGH - 2, byte j
        # (counted from the least significant) minus 128 is digits[HIGH - 1 - j]; the top digit, digits[0], is
        # what is left above those bytes (a signed shift right by 8 (HIGH - 1) bits, no 128 to subtract)
        # SKELETON: for s in range(SLICES):
        # SKELETON:     digits[s] = 0
        # BEGIN SOLUTION
        v = math.ldexp(x, int(8 * SLICES - 1 - e))  # |v| <= 127/128 2^(8 SLICES - 1): exact
        word = high_part(v, digits) + BIAS_HIGH
        for j in range(HIGH - 1):
            digits[HIGH - 1 - j] = int32((word >> (8 * j)) & 255) - 128
        digits[0] = int32(word >> (8 * (HIGH - 1)))
        # END SOLUTION

    return split_digits


@functools.cache
def make_slice_rows_kernel(
    k: int,
    kp: int,
    slices: int,
    threads: int = ROWS_THREADS,
    split_digits_factory: Callable[[int], Any] = make_split_digits,
):
    """``slice_rows_kernel[m, threads](a, a_words, shifts)``: one block per row of A, one pass over A.

    Each thread holds runs of 4 consecutive elements of the row in registers while the block finds the row
    maximum, then writes their digits 4 at a time: ``a_words`` is the int32 view (slices, m, kp/4) of the int8
    slices (slices, m, kp), kp >= k a multiple of 4 (padding gets zero digits). A is read once; ``shifts`` (m,).
    """
    if kp % 4 or kp < k:
        raise ValueError(f"the padded width kp = {kp} must be a multiple of 4 and at least k = {k}")
    if threads % 32:
        raise ValueError(f"threads = {threads} must be a multiple of 32 (whole warps: the maximum uses warp shuffles)")
    K, SLICES, THREADS, WORDS = k, slices, threads, kp // 4
    SHUFFLES = not config.ENABLE_CUDASIM
    RUNS = -(-WORDS // threads)  # runs of 4 elements per thread
    ITEMS = 4 * RUNS
    split_digits = split_digits_factory(slices)

    @cuda.jit
    def slice_rows_kernel(a, a_words, shifts):
        row = cuda.blockIdx.x
        tid = cuda.threadIdx.x
        vals = cuda.local.array(ITEMS, float64)
        digits = cuda.local.array((4, SLICES), int32)
        mu = 0.0
        bad = 0
        for j in range(ITEMS):
            col = 4 * (tid + (j // 4) * THREADS) + j % 4
            x = a[row, col] if col < K else 0.0
            vals[j] = x
            if not abs(x) <= _MAX_FINITE:
                bad = 1
            elif abs(x) > mu:
                mu = abs(x)
        # block reduction of the maximum and of the non-finite flag
        red = cuda.shared.array(THREADS, float64)
        flag = cuda.shared.array(THREADS, int32)
        if SHUFFLES:  # within each warp by shuffles, then one value per warp through shared memory, one barrier
            for lane_mask in (16, 8, 4, 2, 1):
                mu = max(mu, cuda.shfl_xor_sync(0xFFFFFFFF, mu, lane_mask))
                bad = max(bad, cuda.shfl_xor_sync(0xFFFFFFFF, bad, lane_mask))
            if tid % 32 == 0:
                red[tid // 32] = mu
                flag[tid // 32] = bad
            cuda.syncthreads()
            mu, bad = red[0], flag[0]
            for warp in range(1, THREADS // 32):
                mu = max(mu, red[warp])
                bad = max(bad, flag[warp])
        else:  # numba's simulator has no shuffles: the same maximum through shared memory
            red[tid] = mu
            flag[tid] = bad
            cuda.syncthreads()
            mu, bad = red[0], flag[0]
            for other in range(1, THREADS):
                mu = max(mu, red[other])
                bad = max(bad, flag[other])
        e = shift_from_max(mu)
        if bad != 0:
            e = NONFINITE_SHIFT
        if tid == 0:
            shifts[row] = e
        for j in range(0, ITEMS, 4):
            word = tid + (j // 4) * THREADS
            if word < WORDS:
                for q in range(4):
                    if e == NONFINITE_SHIFT:
                        for s in range(SLICES):
                            digits[q, s] = 0
                    else:
                        split_digits(vals[j + q], e, digits[q])
                for s in range(SLICES):
                    a_words[s, row, word] = pack_digits(digits[0, s], digits[1, s], digits[2, s], digits[3, s])

    return slice_rows_kernel


@functools.cache
def make_col_max_kernel(rows_per_block: int = 256, threads: int = 256):
    """``col_max_kernel[(ceil(n/threads), ceil(k/rows_per_block)), threads](b, mu, bad)``: column maxima of B.

    B is row-major, so a thread owns a column and walks down ``rows_per_block`` rows (coalesced across the
    warp); blocks along k combine with atomic max into ``mu`` (float64, zeroed) and ``bad`` (int32, zeroed).
    """
    ROWS, THREADS = rows_per_block, threads

    @cuda.jit
    def col_max_kernel(b, mu, bad):
        col = cuda.blockIdx.x * THREADS + cuda.threadIdx.x
        if col >= b.shape[1]:
            return
        start = cuda.blockIdx.y * ROWS
        stop = min(start + ROWS, b.shape[0])
        m = 0.0
        flag = 0
        for row in range(start, stop):
            x = abs(b[row, col])
            if not x <= _MAX_FINITE:
                flag = 1
            elif x > m:
                m = x
        cuda.atomic.max(mu, col, m)
        if flag:
            cuda.atomic.max(bad, col, 1)

    return col_max_kernel


@cuda.jit
def shifts_from_max_kernel(mu, bad, shifts):
    """``shifts[j] = shift_from_max(mu[j])``, or the non-finite sentinel where ``bad[j]``; 0 past the end of ``mu``.

    ``mu`` and ``bad`` hold one entry per column of B; ``shifts`` may be longer (a plan's f has its padded width):
    its entries past B's columns get 0, the shift of a zero column, which a padded column of B is. The launch
    covers ``shifts``, and each array is indexed only below its own length. Then zeroes ``mu[j]`` and ``bad[j]``:
    the next ``col_max_kernel`` needs them zeroed, and this saves two fills.
    """
    j = cuda.grid(1)
    if j >= shifts.shape[0]:
        return
    if j < mu.shape[0] and j < bad.shape[0]:
        shifts[j] = NONFINITE_SHIFT if bad[j] != 0 else shift_from_max(mu[j])
        mu[j] = 0.0
        bad[j] = 0
    else:
        shifts[j] = 0  # a padded column: zero, and shift_from_max(0.0) is 0


@functools.cache
def make_slice_cols_kernel(
    slices: int,
    tile: int = COLS_BLOCK[0],
    rows: int = COLS_BLOCK[1],
    split_digits_factory: Callable[[int], Any] = make_split_digits,
):
    """``slice_cols_kernel[(ceil(n/tile), kp/(4 tile)), (tile, rows)](b, shifts, b_words)``.

    Slices the columns of a row-major B into ``b_words``, the int32 view (slices, n, kp/4) of the int8 slices
    (slices, n, kp): each slice stored transposed (K-contiguous) for the int8 GEMM. A block takes tile
    columns by 4 tile rows; the digits go through shared memory so that the FP64 reads (along n) and the
    packed int8 writes (4 rows of k per word, along k) are both coalesced. Rows k..kp-1 get zero digits.
    """
    if (4 * tile) % rows:
        raise ValueError(f"rows = {rows} must divide the 4 x {tile} rows of k a block slices")
    SLICES, TILE, ROWS, DEPTH = slices, tile, rows, 4 * tile
    RUNS = DEPTH // ROWS  # rows of k per thread
    PADDED = DEPTH + 4  # a padded row of digits: fewer shared-memory bank conflicts
    split_digits = split_digits_factory(slices)

    @cuda.jit
    def slice_cols_kernel(b, shifts, b_words):
        k, n = b.shape
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        col0, row0 = cuda.blockIdx.x * TILE, cuda.blockIdx.y * DEPTH
        tile = cuda.shared.array((SLICES, TILE, PADDED), int8)
        digits = cuda.local.array(SLICES, int32)
        vals = cuda.local.array(RUNS, float64)
        col = col0 + tx
        e = shifts[col] if col < n else 0
        for i in range(RUNS):  # all loads first: RUNS of them in flight per thread
            row = row0 + ty + i * ROWS
            vals[i] = b[row, col] if row < k and col < n else 0.0
        for i in range(RUNS):
            if e != NONFINITE_SHIFT:
                split_digits(vals[i], e, digits)
            else:
                for s in range(SLICES):
                    digits[s] = 0
            for s in range(SLICES):
                tile[s, tx, ty + i * ROWS] = digits[s]
        cuda.syncthreads()
        word0 = cuda.blockIdx.y * TILE
        for c in range(ty, TILE, ROWS):
            col = col0 + c
            if col < n and word0 + tx < b_words.shape[2]:
                for s in range(SLICES):
                    r = 4 * tx
                    w = pack_digits(tile[s, c, r], tile[s, c, r + 1], tile[s, c, r + 2], tile[s, c, r + 3])
                    b_words[s, col, word0 + tx] = w

    return slice_cols_kernel


class Launch(NamedTuple):
    """One kernel launch: what to run, on which grid and block (its arguments are the caller's)."""

    name: str
    kernel: Any
    grid: Any
    block: Any


def slicing_launches(
    m: int,
    n: int,
    k: int,
    kp: int,
    slices: int,
    split_digits_factory: Callable[[int], Any] = make_split_digits,
    *,
    np_: int | None = None,
) -> list[Launch]:
    """The slicing stage of an m x k by k x n product, in order, with the arguments each launch takes:

    ``slice_rows (a, a_words, e)``, ``col_max (b, mu, bad)``, ``shifts_from_max (mu, bad, f)`` and
    ``slice_cols (b, f, b_words)``. ``mu`` and ``bad`` (n entries) must start at zero; ``shifts_from_max`` zeroes
    them again for the next call. ``np_``: the length of f (default n), which ``shifts_from_max`` covers. Used by
    :class:`SimtPlan`, the plans' host side.
    """
    tile, rows = COLS_BLOCK
    return [
        Launch(
            "slice_rows", make_slice_rows_kernel(k, kp, slices, ROWS_THREADS, split_digits_factory), m, ROWS_THREADS
        ),
        Launch("col_max", make_col_max_kernel(), (-(-n // 256), -(-k // 256)), 256),
        Launch("shifts_from_max", shifts_from_max_kernel, -(-(np_ or n) // 256), 256),
        Launch(
            "slice_cols",
            make_slice_cols_kernel(slices, tile, rows, split_digits_factory),
            (-(-n // tile), -(-kp // (4 * tile))),
            (tile, rows),
        ),
    ]


GROUP_M = 8  # row tiles per group in the blocks' launch order (grouped_tile)


@cuda.jit(device=True)
def grouped_tile():
    """This block's (row tile, column tile) of C, for a 2-D grid (row tiles, column tiles).

    Blocks start in launch order. The grid's own order (blockIdx.x fastest: down one column of C's tiles) would run
    all row tiles of one or two column tiles at once, needing every tile of A from L2 or HBM; in groups of GROUP_M
    row tiles the blocks running together share a few tiles of A and of B (``instructor-notes/ozaki.md``, "Grouped
    tile order", has the measurement).
    """
    tiles_m, tiles_n = cuda.gridDim.x, cuda.gridDim.y
    block = cuda.blockIdx.x + cuda.blockIdx.y * tiles_m
    first_m = (block // (GROUP_M * tiles_n)) * GROUP_M
    group_m = min(tiles_m - first_m, GROUP_M)
    return int32(first_m + block % group_m), int32((block % (GROUP_M * tiles_n)) // group_m)


EPILOGUE_BLOCK = (32, 8)  # the epilogue kernel's block: 32 columns (coalesced) by 8 rows


def epilogue_launch(m: int, n: int, epilogue_factory: Callable[[], Any] | None = None) -> Launch:
    """The epilogue of an m x n product: ``kernel[grid, block](terms, offsets, e, f, alpha, beta, c, out)``."""
    tx, ty = EPILOGUE_BLOCK
    return Launch("epilogue", (epilogue_factory or make_epilogue_kernel)(), (-(-n // tx), -(-m // ty)), EPILOGUE_BLOCK)


@functools.cache
def make_epilogue_kernel():
    """``ozaki_epilogue_kernel[grid, block](terms, offsets, e, f, alpha, beta, c, out)``: the FP64 epilogue.

    ``terms`` is int32 (T, m, n): the S anti-diagonal sums (partially fused variant, offsets 0..S) or the
    S(S+1)/2 slice products ordered by diagonal (unfused variant); terms offsets[d]..offsets[d+1]-1 belong to
    diagonal d. Each diagonal is summed exactly first, then the diagonals are accumulated from the smallest
    weight 2^(-8d) to the largest, as in the reference. S = len(offsets) - 1 is a run-time value. 2-D grid: x along
    columns (coalesced), y along rows.
    """

    @cuda.jit
    def ozaki_epilogue_kernel(terms, offsets, e, f, alpha, beta, c, out):
        j, i = cuda.grid(2)
        if i >= out.shape[0] or j >= out.shape[1]:
            return
        if e[i] == NONFINITE_SHIFT or f[j] == NONFINITE_SHIFT:
            out[i, j] = math.nan
            return
        acc = 0.0
        # TODO (about 5 lines): add the diagonals, smallest weight first; each diagonal's terms summed exactly
        # BEGIN SOLUTION
        for d in range(offsets.shape[0] - 2, -1, -1):
            diagonal = 0.0
            for t in range(offsets[d], offsets[d + 1]):
                diagonal += float64(terms[t, i, j])
            acc += diagonal * math.ldexp(1.0, -8 * d)
        # END SOLUTION
        result = alpha * math.ldexp(acc, int(e[i] + f[j] - 14))
        if beta != 0.0:
            result += beta * c[i, j]
        out[i, j] = result

    return ozaki_epilogue_kernel


# ------------------------------------------------------------------------------------------------------------
# The plan's host side: its buffers and its plain numba stages, one code path on CuPy and in numba's simulator
# ------------------------------------------------------------------------------------------------------------

VARIANTS = ("unfused", "partial", "fused")
SLICE_CAPACITY = 10  # slice buffers hold this many slices (more if asked): one kernel build for S = 1..10


@dataclass(frozen=True, kw_only=True)
class OzakiConfig(plans.TileConfig):
    """Block tile of the int8 GEMM and the ``depth`` of its pipeline (K stages in flight). Chosen per GPU by
    :func:`tile_config`."""

    tile_k: int = 128
    depth: int = 3


def compute_capability() -> tuple[int, int]:
    return tuple(cuda.get_current_device().compute_capability)


def tile_config(variant: str, cc: tuple[int, int] | None = None) -> OzakiConfig:
    """A tile that suits the GPU: 128x128x128 where shared memory allows (sm_80, sm_90), 64-deep K on sm_86/89.

    256 threads (two warpgroups on Hopper): the fused kernel holds an FP64 accumulator beside the int32 one,
    and 64 + 2 x 64 registers of accumulators per thread still fit; on an H100 this configuration also ran the
    int8 products faster than 128 threads (``instructor-notes/ozaki.md``, "256 threads"). All variants use it, so
    that they differ only in what they fuse.
    """
    cc = cc or compute_capability()
    if cc[0] < 8:
        raise RuntimeError(f"compute capability {cc[0]}.{cc[1]}: int8 tensor-core pipelines need sm_80 or newer")
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    threads = 256
    if cc in {(8, 6), (8, 7), (8, 9), (12, 0), (12, 1)}:  # about 100 KiB of shared memory per block
        return OzakiConfig(tile_m=128, tile_n=128, tile_k=64, threads=threads, depth=3)
    return OzakiConfig(tile_m=128, tile_n=128, tile_k=128, threads=threads, depth=3)


def index_tables(slices: int, variant: str) -> dict[str, np.ndarray]:
    """The plan's int32 tables for ``slices`` slices: but for the fused variant, ``offsets``, where each diagonal's
    terms start (the unfused products, diagonal by diagonal, or the partially fused diagonals). The products kernel
    derives each product's slices from its index (``utilities.ozaki.products.product_terms``' order): no table."""
    tables = {}
    if variant == "unfused":
        tables["offsets"] = np.array([d * (d + 1) // 2 for d in range(slices + 1)], np.int32)
    elif variant == "partial":
        tables["offsets"] = np.arange(slices + 1, dtype=np.int32)
    return tables


class SimtPlan:
    """An Ozaki-I plan without its tensor cores: every buffer the plan allocates, and its plain numba stages (the
    slicing, the epilogue, the automatic count's statistics), on the array module ``xp``.

    ``OzakiGemm`` (``utilities.ozaki.tensorcore``) is this plan on CuPy with the tensor-core stages added. The tests
    run it on NumPy in numba's simulator, where an index past the end of a buffer raises: the buffers are the
    plan's own, allocated here and nowhere else, and so are the launches' grids (``tests/test_ozaki_plans.py``).

    Shapes that do not divide the tile are padded inside: slices of A (capacity, mp, kp) and of B (capacity, np_, kp),
    shifts e (mp,) and f (np_,), int32 terms (T, mp, np_); the padding holds zero digits and zero shifts. B's column
    maxima and non-finite flags (``col_max``, ``col_bad``) hold one entry per column of B.
    """

    def __init__(
        self,
        m: int,
        n: int,
        k: int,
        slices: int | str = 7,
        variant: str = "fused",
        cfg: OzakiConfig | None = None,
        *,
        split_digits: Callable[[int], Any] | None = None,
        epilogue: Callable[[], Any] | None = None,
        xp: Any = None,
    ):
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
        if xp is None:
            import cupy as xp
        self.xp = xp
        self.auto = slices == "auto"
        self.stats = self.tables = self.choice = None
        if self.auto:  # the count is chosen on every call, from the statistics Ozaki-II's choice reads too
            from ..precision_gpu import GemmStatistics, scheme_tables
            from .precision import scheme, slice_counts

            counts = slice_counts(k)
            if not counts:
                raise ValueError(f"k = {k}: no slice count keeps the anti-diagonal sums within int32")
            self.tables = scheme_tables(scheme(k), k, choice_offset, counts, xp=xp)
            self.stats = GemmStatistics(m, n, k, xp=xp)
            slices = max(counts)  # buffers for the largest count the choice may take
        slices = check_slices(slices)
        self.m, self.n, self.k, self.slices, self.variant = m, n, k, slices, variant
        self.max_slices = slices
        self.split_digits = split_digits or make_split_digits
        self.epilogue_factory = epilogue or make_epilogue_kernel
        self.cfg = cfg or tile_config(variant)
        check_int32_budget(k, slices, terms_per_accumulator=1 if variant == "unfused" else None)
        c = self.cfg
        self.mp, self.np_, self.kp = ceil_to(m, c.tile_m), ceil_to(n, c.tile_n), ceil_to(k, c.tile_k)
        if self.kp // c.tile_k < c.depth:
            raise ValueError(
                f"K = {k} is too small for a {c.depth}-stage pipeline of {c.tile_k}-deep tiles: "
                f"use K >= {c.depth * c.tile_k}, or an OzakiConfig with a smaller depth or tile_k"
            )
        S = slices
        # Room for SLICE_CAPACITY slices whatever S is: the slice buffers keep one shape for every slice count
        # (which matters where pipelines are per shape: with another stack than the verified one).
        capacity = max(S, SLICE_CAPACITY)
        self.a_slices = xp.zeros((capacity, self.mp, self.kp), dtype=xp.int8)
        self.b_slices = xp.zeros((capacity, self.np_, self.kp), dtype=xp.int8)
        self.e = xp.zeros(self.mp, dtype=xp.int32)
        self.f = xp.zeros(self.np_, dtype=xp.int32)
        self.col_max = xp.zeros(n, dtype=xp.float64)  # zero before the first call: shifts_from_max re-zeroes them
        self.col_bad = xp.zeros(n, dtype=xp.int32)
        self._set_tables(S)
        if variant == "unfused":
            self._all_terms = xp.zeros((len(product_terms(S)), self.mp, self.np_), dtype=xp.int32)
        elif variant == "partial":
            self._all_terms = xp.zeros((S, self.mp, self.np_), dtype=xp.int32)
        else:
            self._all_terms = None
        self.terms = self._all_terms
        self.grid = (self.mp // c.tile_m, self.np_ // c.tile_n)

    def _set_tables(self, slices: int) -> None:
        for name, table in index_tables(slices, self.variant).items():
            setattr(self, name, self.xp.asarray(table))

    def use_slices(self, slices: int) -> None:
        """Run the next calls with ``slices`` slices, at most the count the buffers were built for (the automatic
        choice calls this; the fused kernel reads the count at run time, the slicing kernels are built per count)."""
        S = check_slices(slices)
        if S > self.max_slices:
            raise ValueError(f"{S} slices: this plan's buffers hold at most {self.max_slices} slices")
        self.slices = S
        self._set_tables(S)
        if self.variant == "unfused":
            self.terms = self._all_terms[: len(product_terms(S))]
        elif self.variant == "partial":
            self.terms = self._all_terms[:S]

    def choose(self, a: Any, b: Any) -> Any:
        """The slice count for these operands (``slices="auto"``): statistics and choice on the GPU, one small copy to
        the host (``utilities.precision_gpu``); the plan then runs with it."""
        if self.stats is None:
            raise RuntimeError(f"this plan has a fixed count ({self.slices} slices): it chooses nothing")
        self.stats.compute(a, b)
        self.choice = self.stats.choose(self.tables)
        self.use_slices(self.choice.count)
        return self.choice

    def slicing_steps(self, a: Any, b: Any) -> list[tuple[Launch, tuple[Any, ...]]]:
        """Stage 1's launches, in order, each with its arguments (``slice`` runs them; ``tools/slicing_breakdown.py``
        times each): the slices are written through int32 views of the int8 buffers, 4 digits a word."""
        words_a, words_b = self.a_slices.view(self.xp.int32), self.b_slices.view(self.xp.int32)
        args = {
            "slice_rows": (a, words_a, self.e),
            "col_max": (b, self.col_max, self.col_bad),
            "shifts_from_max": (self.col_max, self.col_bad, self.f),
            "slice_cols": (b, self.f, words_b),
        }
        steps = slicing_launches(self.m, self.n, self.k, self.kp, self.slices, self.split_digits, np_=self.np_)
        return [(step, args[step.name]) for step in steps]

    def slice(self, a: Any, b: Any) -> None:
        """Stage 1: shifts and slices of A (rows) and B (columns)."""
        for step, args in self.slicing_steps(a, b):
            launch.launch(step.kernel, step.grid, step.block, 0, *args)

    def epilogue(self, out: Any, c: Any, alpha: float, beta: float) -> None:
        """Stage 3 of the unfused and partially fused variants: C from the int32 terms."""
        if self.terms is None:
            raise RuntimeError("the fused variant has no separate epilogue")
        step = epilogue_launch(self.m, self.n, self.epilogue_factory)
        args = (self.terms, self.offsets, self.e, self.f, np.float64(alpha), np.float64(beta), c, out)
        launch.launch(step.kernel, step.grid, step.block, 0, *args)

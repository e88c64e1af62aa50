"""The line statistics and the device-side choice (``utilities.precision_gpu``) against ``utilities.precision``:
exact integers bit for bit, norms to their rounding, the count chosen as the CPU chooses it. Without a GPU they
run in numba's CUDA simulator on small sizes (the kernels' own launch sizes, smaller blocks)."""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda, float64, int32, int64

from utilities import inputs, precision
from utilities import precision_gpu as pg

THREADS = 32  # the simulator runs one Python thread per CUDA thread: keep blocks small

pytestmark = pytest.mark.device


def _dev(x):
    return cuda.to_device(np.ascontiguousarray(x))


def row_stats(
    x: np.ndarray, w: np.ndarray | None = None, terms: bool = True, staged: bool = False, blocks: int | None = None
):
    """The row kernel on x's rows: one block a row, or ``blocks`` blocks each over every ``blocks``-th row."""
    m, k = x.shape
    kp = -(-k // 4) * 4
    f, i, top = _dev(np.zeros((3, m))), _dev(np.zeros((3, m), np.int64)), _dev(np.array([pg.NO_EXPONENT], np.int32))
    kernel = pg.make_row_stats_kernel(k, kp, THREADS, w is not None, terms, staged)
    shared = pg.staged_weight_bytes(kp, THREADS) if staged else 0
    kernel[blocks or m, THREADS, 0, shared](_dev(x), _dev(np.zeros(k) if w is None else w), f, i, top)
    return f.copy_to_host(), i.copy_to_host(), int(top.copy_to_host()[0])


def col_stats(x: np.ndarray, w: np.ndarray | None = None, terms: bool = True):
    rows, cols = x.shape
    chunks = -(-rows // precision.CHUNK)
    cf, ci = _dev(np.zeros((3, chunks, cols))), _dev(np.zeros((3, chunks, cols), np.int64))
    kernel = pg.make_col_chunk_kernel(w is not None, terms)
    kernel[(-(-cols // pg.COL_TILE), chunks), (pg.COL_TILE, pg.COL_ROWS)](
        _dev(x), _dev(np.zeros(rows) if w is None else w), cf, ci
    )
    f, i, top = (
        _dev(np.zeros((3, cols))),
        _dev(np.zeros((3, cols), np.int64)),
        _dev(np.array([pg.NO_EXPONENT], np.int32)),
    )
    pg.col_combine_kernel[-(-cols // pg.COL_TILE), (pg.COL_TILE, pg.COL_ROWS)](cf, ci, f, i, top)
    return f.copy_to_host(), i.copy_to_host(), int(top.copy_to_host()[0])


def _lines():
    x = inputs.exponent_spread(7, 300, 3.0, 1)
    x[2] = 0.0
    x[3, 5] = np.nan
    x[4, :150] *= 2.0**-40  # chunks far below the line's largest
    x[5] = inputs.with_subnormals(1, 300, 2)[0] * 2.0**-20
    x[6, 7] = 1.7e308
    return x


def _check(f, i, want: precision.LineStats, rtol=1e-13):
    np.testing.assert_array_equal(i[pg.EXP], want.e)
    np.testing.assert_array_equal(i[pg.TERMS], want.s)
    np.testing.assert_array_equal(i[pg.BAD].astype(bool), want.bad)
    np.testing.assert_array_equal(f[pg.AMAX], want.amax)
    np.testing.assert_allclose(f[pg.NORM2], want.norm2, rtol=rtol)
    np.testing.assert_allclose(f[pg.CROSS2], want.cross2, rtol=rtol)


def test_row_and_column_statistics_match_the_reference():
    """Rows of A by the row kernel, columns of B by column chunks: E and S bit for bit, norms to rounding, on rows
    of zeros, with a NaN, with chunks far below the largest, subnormal and near DBL_MAX."""
    a = _lines()
    b = np.ascontiguousarray(_lines()[:, :260].T)  # 260 x 7: three chunks per column, the last one short
    a[:, 260:] = 0.0
    a = a[:, :260].copy()
    want = precision.gemm_stats(a, b)
    w_rows = np.abs(inputs.normal(1, 260, 3)[0])
    w_cols = np.abs(inputs.normal(1, 260, 4)[0])
    f, i, top = row_stats(a, w_rows)
    rows = precision._line_stats(np.where(np.isfinite(a), a, 0), 1, w_rows, ~np.isfinite(a).all(1))
    _check(f, i, rows)
    assert top == want.ea
    f, i, top = col_stats(b, w_cols)
    cols = precision._line_stats(np.where(np.isfinite(b), b, 0), 0, w_cols, ~np.isfinite(b).all(0))
    _check(f, i, cols)
    assert top == want.eb


@pytest.mark.parametrize("k", [300, 384], ids=["k short of the block's width", "k fills the block"])
def test_blocks_over_several_rows_with_staged_weights_find_the_one_row_statistics(k):
    """Two blocks over seven rows, the weights staged in shared memory once a block (zeros past k), against one
    block a row reading them from global memory: every statistic bit for bit (the same sums in the same order), on
    rows of zeros, with a NaN, chunks far below the largest, subnormals and near DBL_MAX. At k = 384 the block's
    entries fill the row (no column is tested against k); at 300 the last 84 columns of the block are past k."""
    x = np.zeros((7, k))
    x[:, : min(k, 300)] = _lines()[:, : min(k, 300)]
    x[1, k - 1] = -3.5  # the last column, which only the block's last run holds
    w = np.abs(inputs.normal(1, k, 5)[0])
    want_f, want_i, want_top = row_stats(x, w)
    for blocks in (2, 7):
        f, i, top = row_stats(x, w, staged=True, blocks=blocks)
        np.testing.assert_array_equal(f, want_f)
        np.testing.assert_array_equal(i, want_i)
        assert top == want_top
    f, i, top = row_stats(x, terms=False, blocks=3)  # unweighted, over several rows: nothing staged
    np.testing.assert_array_equal(f[pg.NORM2], want_f[pg.NORM2])
    np.testing.assert_array_equal(i[pg.EXP], want_i[pg.EXP])


def test_staged_weights_fit_the_shared_memory_or_stay_in_global_memory():
    """The staged weights of a block of 512 at k = 8192 take 64 KiB (two blocks an SM still fit beside their
    reductions' scratch); past STAGED_WEIGHTS_MAX (k = 32768 with 1024 threads: 256 KiB) they are not staged."""
    assert pg.staged_weight_bytes(8192, pg.rows_threads(8192)) == 64 * 1024
    assert pg.staged_weight_bytes(16384, pg.rows_threads(16384)) == 128 * 1024
    assert pg.staged_weight_bytes(32768, pg.rows_threads(32768)) == 0
    assert pg.row_blocks(8192, 512, 132) == 264 and pg.row_blocks(8192, 1024, 132) == 132
    assert pg.row_blocks(5, 512, 132) == 5


@pytest.mark.parametrize("stats", [row_stats, col_stats], ids=["rows", "column chunks"])
def test_the_weight_passes_without_s_find_the_same_norms_exponents_and_flags(stats):
    """The choice's two passes that only weigh the other operand skip S: the same largest magnitudes, exponents,
    non-finite flags, top exponent and norms bit for bit (same order of sums), S left 0; on lines of zeros, with a
    NaN, chunks far below the largest, subnormals and near DBL_MAX, and a short last chunk."""
    x = _lines() if stats is row_stats else np.ascontiguousarray(_lines()[:, :260].T)
    full_f, full_i, full_top = stats(x)
    f, i, top = stats(x, terms=False)
    assert top == full_top
    np.testing.assert_array_equal(f[pg.AMAX], full_f[pg.AMAX])
    np.testing.assert_array_equal(f[pg.NORM2], full_f[pg.NORM2])
    np.testing.assert_array_equal(i[pg.EXP], full_i[pg.EXP])
    np.testing.assert_array_equal(i[pg.BAD], full_i[pg.BAD])
    assert not i[pg.TERMS].any() and full_i[pg.TERMS].any()


def _stats_on_device(a: np.ndarray, b: np.ndarray):
    """``GemmStatistics.compute``'s passes with numba's arrays (the plan launches the same kernels with CuPy's)."""
    a_cols_f, a_cols_i, ea = col_stats(a, terms=False)
    q = np.where(a_cols_f[pg.NORM2] > 0, np.ldexp(a_cols_f[pg.NORM2], 2 * (a_cols_i[pg.EXP] - ea)), 0.0)
    b_rows_f, b_rows_i, eb = row_stats(b, terms=False)
    r = np.where(b_rows_f[pg.NORM2] > 0, np.ldexp(b_rows_f[pg.NORM2], 2 * (b_rows_i[pg.EXP] - eb)), 0.0)
    rows_f, rows_i, _ = row_stats(a, r)
    cols_f, cols_i, _ = col_stats(b, q)
    return rows_f, rows_i, cols_f, cols_i, np.array([ea, eb], np.int32)


def _walk_the_chunks(cf: np.ndarray, ci: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """What one thread walking a column's chunks in order makes of them (the combine's definition), in Python."""
    chunks, cols = cf.shape[1:]
    f, i = np.zeros((3, cols)), np.zeros((3, cols), np.int64)
    for col in range(cols):
        amax, bad = cf[pg.AMAX, :, col].max(), ci[pg.BAD, :, col].max()
        e = int(np.frexp(amax)[1]) if amax > 0 else 0
        total, norm2, cross2 = 0, 0.0, 0.0
        for c in range(chunks):
            if cf[pg.NORM2, c, col] > 0:
                down = e - int(ci[pg.EXP, c, col])
                s = int(ci[pg.TERMS, c, col])
                total += 1 if 2 * down >= 62 else -(-s // 2 ** (2 * down)) if s > 0 else 0
                norm2 += float(np.ldexp(cf[pg.NORM2, c, col], -2 * down))
                cross2 += float(np.ldexp(cf[pg.CROSS2, c, col], -2 * down))
        f[:, col] = [amax, norm2, cross2]
        i[:, col] = [e, total, bad]
    return f, i


def test_the_combine_adds_the_chunks_in_their_order_across_its_tiles():
    """70 chunks (three of the combine's tiles, the last one short) of 40 columns (a partial block): the staged,
    eight-threads-a-column combine gives what one thread walking the chunks gives, bit for bit: norms of values
    whose sum rounds at every step, chunks with a zero norm (skipped), a far-down chunk, a non-finite flag."""
    rng = np.random.default_rng(7)
    chunks, cols = 70, 40
    amax = rng.uniform(0.5, 1.0, (chunks, cols)) * 2.0 ** rng.integers(-30, 30, (chunks, cols))
    exp = np.frexp(amax)[1].astype(np.int64)
    norm2 = rng.uniform(0.25, 128.0, (chunks, cols))
    norm2[rng.random((chunks, cols)) < 0.1] = 0.0
    amax[norm2 == 0.0] = 0.0
    terms = rng.integers(1, 2**40, (chunks, cols)) * (norm2 > 0)
    exp[5, 3] -= 40  # a chunk whose S is shifted out: it counts 1
    bad = np.zeros((chunks, cols), np.int64)
    bad[66, 39] = 1
    cf = np.stack([amax, norm2, norm2 * rng.uniform(0.0, 3.0, (chunks, cols))])
    ci = np.stack([exp, terms, bad])
    f, i, top = (
        _dev(np.zeros((3, cols))),
        _dev(np.zeros((3, cols), np.int64)),
        _dev(np.array([pg.NO_EXPONENT], np.int32)),
    )
    grid = -(-cols // pg.COL_TILE)
    pg.col_combine_kernel[grid, (pg.COL_TILE, pg.COL_ROWS)](_dev(cf), _dev(ci), f, i, top)
    want_f, want_i = _walk_the_chunks(cf, ci)
    np.testing.assert_array_equal(f.copy_to_host(), want_f)
    np.testing.assert_array_equal(i.copy_to_host(), want_i)
    assert int(top.copy_to_host()[0]) == want_i[pg.EXP].max()


def test_normalize_kernel_brings_norms_to_the_largest_exponent():
    f = np.array([[1.0, 0.0, 0.5], [0.75, 0.0, 0.25], [0.0, 0.0, 0.0]])
    i = np.array([[3, 0, -1000], [0, 0, 0], [0, 0, 0]], np.int64)
    out = _dev(np.full(3, -1.0))
    pg.normalize_kernel[1, 32](_dev(f), _dev(i), _dev(np.array([3], np.int32)), out)
    np.testing.assert_array_equal(out.copy_to_host(), [0.75, 0.0, np.ldexp(0.25, -2006)])


@pytest.mark.parametrize("case", ["normal", "spread phi=3", "badly scaled row", "subnormal A, huge B", "nonfinite"])
def test_the_device_choice_matches_the_cpu_choice(case):
    """Both schemes' counts from the statistics the kernels took, on inputs where the choice differs: well scaled,
    spread out, one row that meets B's small rows, A of subnormals times B of 1e10, a NaN and an Inf."""
    from utilities.ozaki import precision as p1
    from utilities.ozaki import simt as s1
    from utilities.ozaki2 import precision as p2
    from utilities.ozaki2 import simt as s2

    m, k, n = 6, 12, 4  # the simulator takes half a second a block: B's row statistics are k blocks
    a, b = inputs.normal(m, k, 1), inputs.normal(k, n, 2)
    if case == "spread phi=3":
        a, b = inputs.exponent_spread(m, k, 3.0, 3), inputs.exponent_spread(k, n, 3.0, 4)
    elif case == "badly scaled row":
        b[: k // 2] *= 2.0**-20
        a[5, k // 2 :] *= 2.0**-30
    elif case == "subnormal A, huge B":
        a, b = np.ldexp(a, -1060), b * 1e10
    elif case == "nonfinite":
        a, b = inputs.nonfinite_lines(m, k, n, 5)
    stats = precision.gemm_stats(a, b)
    rows_f, rows_i, cols_f, cols_i, tops = _stats_on_device(a, b)
    assert tops.tolist() == [stats.ea, stats.eb]
    for scheme, offset in ((p2.SCHEME, s2.line_offset), (p1.scheme(k), s1.choice_offset)):
        _device_choice_agrees(stats, scheme, offset, (rows_f, rows_i, cols_f, cols_i, tops))


def _choice_out(stats, scheme, offset, device_stats, stage: int, pick_threads: int) -> np.ndarray:
    """The choice kernels' output (the count's index, then every count's estimate) with ``stage`` blocks' rows in
    shared memory at once."""
    m, n, k = device_stats[0].shape[1], device_stats[2].shape[1], stats.k
    counts = list(scheme.counts(k))
    offsets, weights = np.array([scheme.offset(c) for c in counts]), np.array([scheme.weight(c) for c in counts])
    sums, ratios, pick = pg.make_choice_kernels(offset, THREADS, stage)
    blocks = -(-(m + n) // THREADS)
    partial, worst = _dev(np.zeros((blocks, 2 * (pg.MAX_COUNTS + 1)))), _dev(np.zeros((blocks, pg.MAX_COUNTS)))
    args = [_dev(v) for v in device_stats]
    sums[blocks, THREADS](*args, _dev(offsets), np.int64(scheme.divisor), partial)
    ratios[blocks, THREADS](*args, _dev(offsets), _dev(weights), np.int64(scheme.divisor), partial, worst)
    out = _dev(np.zeros(1 + len(counts)))
    pick[1, pick_threads](worst, precision.target(k), out)
    return out.copy_to_host()


def _device_choice_agrees(stats, scheme, offset, device_stats):
    k = stats.k
    want = precision.choose(stats, scheme)
    counts = list(scheme.counts(k))
    host = _choice_out(stats, scheme, offset, device_stats, pg.CHOICE_STAGE, 32)
    tables = pg.SchemeTables(
        scheme.name, tuple(counts), None, None, scheme.divisor, precision.target(k), scheme.products, offset
    )
    got = pg.tables_choice(tables, host)
    assert got.count == want.count, (got.describe(), want.describe())
    for c, v in want.tried.items():
        assert got.tried[c] == pytest.approx(v, rel=1e-9), c


def test_the_choice_adds_the_blocks_in_their_order_whatever_it_stages():
    """Three blocks of lines staged one, two or all at a time (a short last stage among them), the pick with one
    warp or two: the same estimates bit for bit, and the CPU's count. The statistics are the CPU's, so that the
    simulator runs the choice alone."""
    from utilities.ozaki2 import precision as p2
    from utilities.ozaki2 import simt as s2

    m, k, n = 40, 8, 30  # 70 lines: three blocks of 32
    a, b = inputs.exponent_spread(m, k, 2.0, 5), inputs.exponent_spread(k, n, 2.0, 6)
    stats = precision.gemm_stats(a, b)
    lines = (stats.rows, stats.cols)
    f = [np.stack([ls.amax, ls.norm2, ls.cross2]).astype(np.float64) for ls in lines]
    i = [np.stack([ls.e, ls.s, ls.bad]).astype(np.int64) for ls in lines]
    device_stats = (f[0], i[0], f[1], i[1], np.array([stats.ea, stats.eb], np.int32))
    want = precision.choose(stats, p2.SCHEME)
    whole = _choice_out(stats, p2.SCHEME, s2.line_offset, device_stats, pg.CHOICE_STAGE, THREADS)
    assert p2.SCHEME.counts(k)[int(whole[0])] == want.count
    for stage, pick_threads in ((1, THREADS), (2, 2 * THREADS)):
        got = _choice_out(stats, p2.SCHEME, s2.line_offset, device_stats, stage, pick_threads)
        np.testing.assert_array_equal(got, whole)


def _edge_values() -> np.ndarray:
    """Doubles where reading the exponent and the significand's top bits from the high word could go wrong: both
    ends of the exponent range, subnormals, powers of two and the doubles just below them, both signs, and random
    values over every exponent."""
    tiny, big = np.finfo(np.float64).smallest_subnormal, np.finfo(np.float64).max
    special = [tiny, 3 * tiny, 2.0**-1022 - tiny, 2.0**-1022, 2.0**-1021, big, 2.0**1023, 1.0, 0.5, 0.75]
    powers = np.ldexp(1.0, np.arange(-1074, 1024, 37))
    below = np.nextafter(powers, 0.0)
    rng = np.random.default_rng(7)
    spread = rng.uniform(0.5, 1.0, 400) * np.ldexp(1.0, rng.integers(-1073, 1024, 400))
    v = np.concatenate([special, powers, below[below > 0], spread])
    return np.concatenate([v, -v])


def test_the_high_word_gives_frexp_and_the_s_terms_bit_for_bit():
    """``exponent_of`` and ``s_term`` read the exponent and ``floor(f QUANT)`` from the high word; ``scaled``
    multiplies by a power of two where ``ldexp`` did: each equals its ``frexp``/``floor``/``ldexp`` form on
    subnormals, both ends of the range and random doubles (on a GPU too: this file runs on the device)."""
    v = _edge_values()
    tops = np.array([-1074, -1025, -1023, -1022, -200, 0, 3, 200, 1022, 1023, 1024], np.int32)

    @cuda.jit
    def probe(v, tops, e_out, terms, products):
        i = cuda.grid(1)
        if i < v.shape[0]:
            e = pg.exponent_of(v[i])
            e_out[i] = e
            for j in range(tops.shape[0]):
                if e <= tops[j]:  # as in the kernels: top is the largest exponent of v's line or chunk
                    terms[i, j] = pg.s_term(v[i], tops[j])
                    products[i, j] = pg.scaled(v[i], tops[j], pg.unit_scale(tops[j]))

    e_out = _dev(np.zeros(v.size, np.int32))
    terms, products = _dev(np.zeros((v.size, tops.size), np.int64)), _dev(np.zeros((v.size, tops.size)))
    probe[-(-v.size // 64), 64](_dev(v), _dev(tops), e_out, terms, products)
    f, e = np.frexp(np.abs(v))
    np.testing.assert_array_equal(e_out.copy_to_host(), e)
    inside = e[:, None] <= tops[None, :]
    rel = np.where(inside, e[:, None] - tops[None, :] + precision.SPAN, -1)
    q = np.floor(f * precision.QUANT).astype(np.int64)[:, None] + 1
    want = np.where(inside, np.where(rel >= 0, (q * q) << np.maximum(2 * rel, 0), 256), 0)
    np.testing.assert_array_equal(terms.copy_to_host(), want)
    scaled = np.where(inside, np.ldexp(v[:, None], np.where(inside, -tops[None, :], 0).astype(int)), 0.0)
    np.testing.assert_array_equal(products.copy_to_host(), scaled)
    assert inside.sum() > v.size and (rel >= 0).any() and ((rel < 0) & inside).any()


def test_the_double_terms_equal_the_integer_terms():
    """``s_root`` builds ``q 2^rel`` from the high word, whose square in FP64 is the term: for every chunk exponent
    from ``FAST_TOP`` up, each entry's equals ``s_term``'s integer (0 for a zero), on subnormals, both ends of the
    range, powers of two and the doubles just below them (``q = 32``), both signs."""
    v = np.concatenate([_edge_values(), [0.0, -0.0]])
    tops = np.array([pg.FAST_TOP, pg.FAST_TOP + 1, -1000, -200, -1, 0, 3, 200, 1022, 1023, 1024], np.int32)

    @cuda.jit
    def probe(v, tops, fast, exact):
        i = cuda.grid(1)
        if i < v.shape[0]:
            e = pg.exponent_of(v[i]) if v[i] != 0.0 else -(2**30)
            for j in range(tops.shape[0]):
                if e <= tops[j]:
                    add, floor = pg.root_constants(tops[j])
                    root = pg.s_root(v[i], add, floor)
                    fast[i, j] = root * root
                    exact[i, j] = pg.s_term(v[i], tops[j]) if v[i] != 0.0 else 0

    fast, exact = _dev(np.full((v.size, tops.size), -1.0)), _dev(np.full((v.size, tops.size), -1, np.int64))
    probe[-(-v.size // 64), 64](_dev(v), _dev(tops), fast, exact)
    fast, exact = fast.copy_to_host(), exact.copy_to_host()
    np.testing.assert_array_equal(fast, exact.astype(np.float64))
    assert (exact == 256).any() and (exact > 2**40).any() and (exact == 0).sum() > tops.size


@pytest.mark.parametrize("stats", [row_stats, col_stats], ids=["rows", "column chunks"])
def test_s_takes_the_exact_path_below_fast_top_and_the_double_path_from_it(stats):
    """Chunks whose largest exponent is ``FAST_TOP - 1`` (the int64 terms) or ``FAST_TOP`` (the double terms), with
    subnormals, entries at the span's lowest exponent and just below it, and a zero chunk: S and E bit for bit."""
    rng = np.random.default_rng(11)
    lines = []
    for top in (pg.FAST_TOP - 1, pg.FAST_TOP, pg.FAST_TOP + 1):
        x = rng.uniform(0.5, 1.0, 256) * np.ldexp(1.0, rng.integers(top - 20, top + 1, 256))
        x[0] = np.ldexp(0.75, top)  # the chunk's largest exponent is top
        x[1], x[2] = np.ldexp(0.5, top - precision.SPAN), np.ldexp(0.99, top - precision.SPAN - 1)
        x[3:9] = np.finfo(np.float64).smallest_subnormal * np.array([1, 3, 1000, 2**40, 2**51, -7])
        x[9:20] = 0.0
        x[128:] *= rng.choice([-1.0, 1.0], 128)
        lines.append(x)
    x = np.array(lines + [np.zeros(256)])
    x = x if stats is row_stats else np.ascontiguousarray(x.T)
    e, s = precision.line_terms(x, 1 if stats is row_stats else 0)
    _, i, _ = stats(x)
    np.testing.assert_array_equal(i[pg.EXP], e)
    np.testing.assert_array_equal(i[pg.TERMS], s)
    assert (s > 0).sum() == 3


@pytest.mark.parametrize("k", [32 * 128, 33 * 128 + 5], ids=["32 runs: each lane keeps one", "34 runs: lane 0 adds"])
def test_s_is_the_same_whichever_lane_shifts_the_chunks(k):
    """A row's chunks reach S shifted by the lane that kept them (lane r, run r, at most ``SPREAD_RUNS`` runs a
    thread) or by lane 0 run after run (more runs): at 32 threads a row of 4096 entries has 32 runs a thread, one of
    4229 has 34 (the last partial). Two rows whose chunks' scales spread over 120 binades (every chunk's sum shifted
    by its own amount, some to 1), and one row of zeros: E and S bit for bit, in both kernels that take S."""
    rng = np.random.default_rng(11)
    chunk_scales = np.ldexp(1.0, 2 * rng.integers(-30, 30, (3, k // 128 + 1)))
    a = rng.standard_normal((3, k)) * np.repeat(chunk_scales, 128, axis=1)[:, :k]
    a[2] = 0.0
    want = precision._line_stats(a, 1, np.ones(k), np.zeros(3, bool))
    f, i, _ = row_stats(a, np.ones(k))
    np.testing.assert_array_equal(i[pg.EXP], want.e)
    np.testing.assert_array_equal(i[pg.TERMS], want.s)
    statistics = pg.make_row_statistics(k, -(-k // 4) * 4, THREADS)
    items = pg.items_per_thread(-(-k // 4) * 4, THREADS)  # a constant of the kernel, not a call inside it
    assert (items // 4 <= pg.SPREAD_RUNS) == (k == 32 * 128)

    @cuda.jit
    def rows_kernel(x, out):
        vals = cuda.local.array(items, float64)
        si = cuda.shared.array(THREADS, int32)
        sl = cuda.shared.array(THREADS, int64)
        sd = cuda.shared.array(THREADS, float64)
        _, _, e, s = statistics(x, cuda.blockIdx.x, vals, si, sl, sd, cuda.threadIdx.x)
        if cuda.threadIdx.x == 0:
            out[0, cuda.blockIdx.x], out[1, cuda.blockIdx.x] = e, s

    out = _dev(np.zeros((2, 3), np.int64))
    rows_kernel[3, THREADS](_dev(a), out)
    np.testing.assert_array_equal(out.copy_to_host(), np.stack([want.e, want.s]))

"""Checkers of notebook 2c (3x3 convolution + bias + ReLU as an implicit GEMM), built on ``utilities.checker``.

- :func:`check_neighbor` runs the attendee's index map (a numba device function, through its Python source
  ``py_func``) on a CPU, on small odd-sized images where every border pixel is visited, before any kernel is
  built; it names the first wrong pixel (b, h, w), tap (r, s), and the usual mistake.
- :func:`check_conv` runs a convolution (a plan or any callable) on fresh random and adversarial inputs
  (``reference.CONV_CASES``) and compares every output with the FP64 reference within the derived bound,
  naming the first wrong outputs as (b, h, w, c), with a hint found by testing the usual mistakes (bias or ReLU
  missing, taps read outside the image, r and s swapped, a border handled wrong, the FP32 sum rounded to FP16
  before the bias).
- :func:`check_conv_b2b` (notebook 2d) runs the back-to-back convolutions and compares D0 (when the plan keeps
  it) with the FP64 reference, then D1 with the 1x1 convolution of the kernel's own D0: a sharper bound than
  from the inputs, so that rounding order in the second epilogue shows.

What the checks feed, on every run (the domain): images whose rows and sizes do not line up with the row tiles
(a tile starts mid-row and straddles two images), several row tiles and several column tiles, odd image sizes, a
single row and a single column for the index map, and fixed corner inputs beside the random ones (``ones``,
ReLU zeroing everything, large magnitudes, a dominant bias, a bias that nearly cancels the sum).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import sanitizer
from ..checker import CheckFailure, CheckResult, checker, compare, fresh_seed, not_yet, output, passed, untouched
from ..rounding import gemm_bias_relu_ref, relu
from . import reference as ref

CONTRACT_NEIGHBOR = (
    "m: a flat output pixel (b H + h) W + w of any batch, 0 <= m < B H W; r, s in 0..2; height, width >= 1; "
    "returns the flat input pixel tap (r, s) reads, (b, h + r - 1, w + s - 1), or -1 where that lies in the padding"
)
CONTRACT_CONV = (
    "x (B, H, W, C_in), w (3, 3, C_in, C_out) as (r, s, c_in, c_out), bias (C_out,): FP16, C-contiguous; C_in and "
    "C_out multiples of 32, B H W a multiple of the row tile; returns relu(conv3x3(x, w) + bias), (B, H, W, C_out) "
    "FP16, the FP32 accumulator rounded once; the plan's block may be 64 or 32 output channels wide"
)
# (batch, height, width): odd sizes, a single row and a single column, and images smaller than a row tile
NEIGHBOR_GEOMETRIES = ((2, 5, 7), (1, 1, 1), (3, 4, 1), (2, 1, 6), (1, 3, 3))
CONV_SHAPE = ref.ConvShape(2, 24, 24, 64, 128)  # 9 row tiles of 128 pixels, starting mid-row; 2 column tiles of 64
# the speed run's check for blocks of 256 pixels (CONV_SHAPE's 1,152 pixels are not a multiple): 6 row tiles of 256
# over 2 images of 32 x 24, starting mid-row; 2 column tiles of 64
CONV_SHAPE_256 = ref.ConvShape(2, 32, 24, 64, 128)
# The tensor-copy kernel's checks (utilities.conv.tensorcore_tma): its row tiles must each be one box, so not
# CONV_SHAPE's. Tiles inside an image row (two a row, three rows: every edge of the image), and tiles of four whole
# rows over two images; two column tiles of 64 in the first
TMA_SHAPES = (ref.ConvShape(2, 3, 256, 64, 128), ref.ConvShape(2, 8, 32, 64, 64))
# The contract's parameters: the blocks (ConvConfig's fields) 2c's kernel is checked at, two values of every field its
# factory's Matmul takes: the plan's choice for CONV_SHAPE (ConvConfig.for_shape), and one whose every size differs
# (18 row tiles of 64 pixels, 4 column tiles of 32, K stages of 32 channels, 64 threads). No index may hold one.
CONV_CONFIGS = (
    {"tile_m": 64, "tile_n": 32, "tile_k": 32, "threads": 64},
    {"tile_m": 128, "tile_n": 64, "tile_k": 64, "threads": 128},
)
# 2d's: the plan's default pipeline block (PipeConfig(tile_n=C_mid)) and one whose tile, K stage, threads and depth
# differ (the stages a phase and the filters' residence are the course's pipeline, which the attendee does not write)
CONV_B2B_CONFIGS = ({"tile_m": 64, "tile_k": 32, "threads": 256, "depth": 3}, {})
NAMES = ("b", "h", "w", "c")


def _python(fn: Any) -> Callable[..., int]:
    """The Python function under a numba device function (``py_func``), or ``fn`` itself."""
    return getattr(fn, "py_func", fn)


def _map(
    shape: ref.ConvShape,
    row: Callable[[np.ndarray, np.ndarray], np.ndarray],
    col: Callable[[np.ndarray, np.ndarray], np.ndarray],
    inside: Callable[..., np.ndarray] | None = None,
    flat: Callable[..., np.ndarray] | None = None,
    outside: int = -1,
    h_of: Callable[[np.ndarray], np.ndarray] | None = None,
) -> np.ndarray:
    """An index map (every pixel, every tap) built the way a mistake builds it: pixel m's row is ``h_of(m)`` (default
    (m // W) % H); tap (r, s) reads row ``row(h, r)`` and column ``col(w, s)``, is inside where ``inside(hh, ww, h,
    w, r, s)`` says (default: within the image), and reads the flat pixel ``flat(m, hh, ww, r, s)`` (default: m moved
    by the offsets), else ``outside``."""
    m = np.arange(shape.m, dtype=np.int64)[:, None]
    h = (m // shape.width) % shape.height if h_of is None else h_of(m)
    w = m % shape.width
    r, s = np.divmod(np.arange(ref.TAPS, dtype=np.int64)[None, :], 3)
    hh, ww = row(h, r), col(w, s)
    if inside is None:
        ok = (hh >= 0) & (hh < shape.height) & (ww >= 0) & (ww < shape.width)
    else:
        ok = inside(hh, ww, h, w, r, s)
    target = m + (hh - h) * shape.width + (ww - w) if flat is None else flat(m, hh, ww, r, s)
    return np.where(ok, target, outside)


def _neighbor_mistakes(shape: ref.ConvShape) -> dict[str, list[np.ndarray]]:
    """The index maps of each usual mistake on ``shape`` (a mistake may be written two ways), by the hint that names
    it; each is tested against the attendee's whole map on every geometry (:func:`_table_hint`)."""
    H, W = shape.height, shape.width

    def down(h: np.ndarray, r: np.ndarray) -> np.ndarray:
        return h + r - 1

    def up(h: np.ndarray, r: np.ndarray) -> np.ndarray:
        return h - r + 1

    def right(w: np.ndarray, s: np.ndarray) -> np.ndarray:
        return w + s - 1

    def left(w: np.ndarray, s: np.ndarray) -> np.ndarray:
        return w - s + 1

    def within(rows: bool = True, cols: bool = True, last_row: int = H - 1, last_col: int = W - 1) -> Callable:
        def test(hh, ww, h, w, r, s):  # the bounds of the right taps (h + r - 1, w + s - 1)
            ok = np.ones(np.broadcast(h, r).shape, bool)
            if rows:
                ok &= (down(h, r) >= 0) & (down(h, r) <= last_row)
            if cols:
                ok &= (right(w, s) >= 0) & (right(w, s) <= last_col)
            return ok

        return test

    direction = (
        "the wrong direction{axis}: tap (r, s) must read pixel (h + r - 1, w + s - 1), so tap (0, 0) is above and to "
        "the left; your map reads {read}, the filter flipped{how} (a correlation turned into a convolution)"
    )
    out = {}
    for axis, read, how, row, col in (
        ("", "(h - r + 1, w - s + 1)", "", up, left),
        (" along the rows", "(h - r + 1, w + s - 1)", " along r only", up, right),
        (" along the columns", "(h + r - 1, w - s + 1)", " along s only", down, left),
    ):  # mirrored with its own padding, or only the offset mirrored (the bounds of the right taps)
        out[direction.format(axis=axis, read=read, how=how)] = [
            _map(shape, row, col),
            _map(shape, row, col, inside=within()),
        ]
    swapped = [3 * (t % 3) + t // 3 for t in range(ref.TAPS)]
    out["r and s are swapped: r moves along the height (a whole image row, width pixels), s along the width"] = [
        ref.neighbor_table(shape)[:, swapped],
        _map(shape, down, right, inside=within(), flat=lambda m, hh, ww, r, s: m + (s - 1) * W + (r - 1)),
    ]
    out[
        "only the row is checked against the image: a tap left or right of it reads the neighbouring image row (or "
        "image); check w + s - 1 too"
    ] = [_map(shape, down, right, inside=within(cols=False))]
    out[
        "only the column is checked against the image: a tap above or below it reads the neighbouring image (or past "
        "the input); check h + r - 1 too"
    ] = [_map(shape, down, right, inside=within(rows=False))]
    out["the last row is taken for inside the image: the test must be h + r - 1 >= height (rows 0 .. height - 1)"] = [
        _map(shape, down, right, inside=within(last_row=H))
    ]
    out[
        "the last column is taken for inside the image: the test must be w + s - 1 >= width (columns 0 .. width - 1)"
    ] = [_map(shape, down, right, inside=within(last_col=W))]
    out[
        "the batch is missing from the flat index: every image reads the first one; move m itself by "
        "(r - 1) * width + (s - 1), which keeps b"
    ] = [_map(shape, down, right, flat=lambda m, hh, ww, r, s: hh * W + ww)]
    out[
        "the row is taken over the whole batch (h = m // width, without % height): every image after the first "
        "reads padding; h = (m // width) % height"
    ] = [_map(shape, down, right, h_of=lambda m: m // W)]
    out["the padding reads pixel 0: a tap outside the image must return -1 (nothing to read)"] = [
        _map(shape, down, right, outside=0)
    ]
    return out


def _table_hint(results: Sequence[tuple[ref.ConvShape, np.ndarray, np.ndarray]]) -> str:
    """The hint of the usual mistake whose whole index map equals the attendee's on every geometry
    (:func:`_neighbor_mistakes`); "" when none does."""
    tables = [_neighbor_mistakes(shape) for shape, _, _ in results]
    for hint in tables[0]:
        for variant in range(len(tables[0][hint])):
            if all(np.array_equal(got, t[hint][variant]) for (_, got, _), t in zip(results, tables, strict=True)):
                return hint
    return ""


@checker("index map")
def check_neighbor(fn: Callable[..., int], *, seed: int | None = None) -> CheckResult:
    """``fn(m, r, s, height, width)``: the input pixel tap (r, s) of output pixel m reads, or -1 in the padding.
    Contract: :data:`CONTRACT_NEIGHBOR`. A map wrong as a whole (a flipped filter, r and s swapped) is named by a
    test on every geometry before the first wrong entry is classified (a tap inside the image or in its padding)."""
    name, seed = "index map", fresh_seed(seed)
    rng = np.random.default_rng(seed)
    f = _python(fn)
    geometries = [*NEIGHBOR_GEOMETRIES, tuple(int(v) for v in rng.integers(1, 9, 3))]
    results = []
    for b, height, width in geometries:
        shape = ref.ConvShape(b, height, width, 1, 1)
        got = np.array(
            [[f(m, t // 3, t % 3, height, width) for t in range(ref.TAPS)] for m in range(shape.m)], dtype=np.int64
        )
        results.append((shape, got, ref.neighbor_table(shape)))
    if all(np.array_equal(got, np.arange(s.m)[:, None].repeat(ref.TAPS, 1)) for s, got, _ in results):
        return not_yet(name, "every tap reads the pixel itself, as the skeleton does")
    whole = _table_hint(results)
    for shape, got, want in results:
        bad = np.argwhere(got != want)
        if len(bad):
            m, t = (int(v) for v in bad[0])
            r, s = divmod(t, 3)
            b, h, w = shape.pixel(m)
            where = "in the padding" if want[m, t] == -1 else f"pixel (b {b}, h {h + r - 1}, w {w + s - 1})"
            raise CheckFailure(
                "index map",
                f"stage 'index map' on {shape.batch} images of {shape.height} x {shape.width}: pixel m = {m} "
                f"(b {b}, h {h}, w {w}), tap (r {r}, s {s}): got {got[m, t]}, expected {want[m, t]} ({where}; "
                f"{len(bad)} of {got.size} entries wrong)" + (f"\nhint: {whole}" if whole else ""),
            )
    return passed(name, len(results), seed)


def _candidates(x: ref.ConvInputs, r: ref.ConvReference, tile_n: int | None = None) -> dict[str, np.ndarray]:
    """Results of the usual mistakes, on the reference's pixels (``tile_n``: the plan's block width)."""
    bias = x.bias.astype(np.float64)
    swapped = ref.conv_ref(x.x, x.w.transpose(1, 0, 2, 3), x.bias, r.rows).out
    flipped = ref.conv_ref(x.x, np.ascontiguousarray(x.w[::-1, ::-1]), x.bias, r.rows).out
    out = {
        "the wrong direction: the filter was applied flipped, tap (r, s) reading (h - r + 1, w - s + 1); tap (r, s) "
        "reads pixel (h + r - 1, w + s - 1), so tap (0, 0) is above and to the left": flipped,
        "ReLU missing: out = relu(acc + bias)": r.conv + bias,
        "bias and ReLU missing: the epilogue stores the accumulator as it is": r.conv,
        "bias missing: out = relu(acc + bias[c]), with c the output channel": relu(r.conv),
        "ReLU applied before the bias: relu(acc) + bias": relu(r.conv) + bias,
        "ReLU applied before the bias, then again after it: relu(relu(acc) + bias) is the bias where acc < 0 < bias; "
        "add the bias first, then ReLU once": relu(relu(r.conv) + bias),
        "r and s swapped: the filters are (r, s, c_in, c_out), r along the height": swapped,
        "the FP32 sum was rounded to FP16 before the bias: add the bias and apply ReLU to the FP32 accumulator, "
        "and round once, at the store": relu(r.conv.astype(np.float16).astype(np.float64) + bias),
    }
    n = len(bias)
    for tile in (32, 64):  # the bias indexed by the column within the block's tile
        if n > tile and n % tile == 0:
            local = np.tile(bias[:tile], n // tile)
            out[f"bias indexed by the column within a {tile}-wide block tile: add the block's column offset"] = relu(
                r.conv + local
            )
    if tile_n is not None and tile_n != 64:  # a column offset of 64 per block, hard-coded, where blocks are narrower
        cols = np.arange(n)
        wide = 64 * (cols // tile_n) + cols % tile_n  # past the bias from block 2 on: unknown there (NaN)
        read = np.where(wide < n, bias[np.minimum(wide, n - 1)], np.nan)
        out[
            f"a block width of 64 hard-coded in the column offset: this plan's blocks are {tile_n} wide, so block j "
            "starts at column j * TN (take TN from the block GEMM, MM.size)"
        ] = relu(r.conv + read)
    return out


def _border_hint(bad: np.ndarray) -> str:
    """Where the wrong outputs lie, when that is the images' borders alone (the pixels whose taps reach the
    padding): a fact of the entries, no guess at a cause."""
    border = np.zeros(bad.shape[:3], bool)
    border[:, [0, -1], :] = border[:, :, [0, -1]] = True
    wrong = bad.any(axis=3)
    if wrong.any() and not (wrong & ~border).any():
        return "only pixels on an image's border are wrong (those whose taps reach the padding), the others right"
    return ""


def _hint(
    got: np.ndarray, x: ref.ConvInputs, r: ref.ConvReference, bound: np.ndarray, tile_n: int | None = None
) -> str:
    """The usual mistake that ``got`` matches, else where the wrong outputs lie; "" when every output is right
    (the mistakes' results are computed only then)."""
    with np.errstate(invalid="ignore"):
        bad = ~(np.abs(got.astype(np.float64) - r.out.reshape(got.shape)) <= bound)
    if not bad.any():
        return ""
    flat, flat_bound = got.reshape(-1, got.shape[-1]).astype(np.float64), bound.reshape(-1, got.shape[-1])
    for text, value in _candidates(x, r, tile_n).items():
        known = ~np.isnan(value)  # NaN: entries where the mistake's result is not known (it read outside an array)
        with np.errstate(invalid="ignore"):
            near = (np.abs(flat - value) <= flat_bound + 4 * ref.U16 * np.abs(value)) | ~known
            differs = ~(np.abs(value - r.out) <= flat_bound) & known
        if near.mean() > 0.99 and differs.mean() > 0.01:
            return text
    return _border_hint(bad)


def _shape_text(shape: Any) -> str:
    """A shape dataclass as the code that builds it (for a sanitizer script)."""
    fields = ", ".join(f"{k}={v}" for k, v in vars(shape).items())
    return f"ref.{type(shape).__name__}({fields})"


def small_conv_shape(shape: Any, c_out: int) -> Any:
    """A check's smallest case: one image of 8 x 16 pixels (one row tile of 128, its border in the padding), the
    check's input channels (every K stage), ``c_out`` output channels."""
    fields = {**vars(shape), "batch": 1, "height": 8, "width": 16}
    fields["c_out"] = c_out
    return type(shape)(**fields)


def _conv_driver(
    functions: Sequence[Any], *args: Any, shape: ref.ConvShape = CONV_SHAPE, small: bool = False, **kwargs: Any
) -> str:
    block = dict(kwargs.get("block") or {})
    tile_n = block.get("tile_n") or kwargs.get("tile_n")
    if small:  # one block: one row tile of pixels, one block width of output channels
        shape = small_conv_shape(shape, tile_n or (64 if shape.c_out % 64 == 0 else 32))
    if tile_n and not block:
        block = {"tile_n": tile_n, "tile_k": 64}
    cfg = f"ConvConfig(**{block!r})" if block else "None"
    return f"""
        import cupy as cp
        from utilities.conv import reference as ref
        from utilities.conv.tensorcore import Conv3x3, ConvConfig, Kernels
        shape = {_shape_text(shape)}
        plan = Conv3x3(shape, cfg={cfg}, kernels=Kernels({sanitizer.kernels_arguments(functions)}))
        plan(*(cp.asarray(v) for v in ref.conv_inputs(shape, "random", 0).args()))
        cp.cuda.runtime.deviceSynchronize()
        """


def _conv_contract(args: tuple, kwargs: dict) -> list[tuple[tuple, dict]]:
    """The driver's arguments at each block of :data:`CONV_CONFIGS`, at the check's shape."""
    return [(args, {**kwargs, "block": dict(c)}) for c in CONV_CONFIGS]


@checker("3x3 convolution + bias + ReLU", driver=_conv_driver, shared=True, contract=_conv_contract)
def check_conv(
    run: Callable[..., Any],
    *,
    shape: ref.ConvShape = CONV_SHAPE,
    fused: bool = True,
    tile_n: int | None = None,
    block: dict[str, int] | None = None,
    seed: int | None = None,
    cases: Sequence[str] = ref.CONV_CASES,
) -> CheckResult:
    """``run(x, w, bias)`` returns ``relu(conv3x3(x, w) + bias)`` (NHWC, FP16, as NumPy); ``fused=False`` allows the
    unfused path's one rounding more. Contract: :data:`CONTRACT_CONV`; ``block`` the plan's ConvConfig fields (or
    ``tile_n`` alone, its width) labels the messages and names a width held in an index (a notebook checks the two
    blocks of :data:`CONV_CONFIGS`, so that no index depends on one)."""
    name, seed = "3x3 convolution + bias + ReLU", fresh_seed(seed)
    tile_n = (block or {}).get("tile_n", tile_n)
    count = 0
    dims = (shape.batch, shape.height, shape.width, shape.c_out)
    for x in ref.conv_cases(shape, seed, tuple(cases)):
        label = f"{x.name}, {shape.label}" + (f", blocks {tile_n} channels wide" if tile_n else "")
        label += "".join(f", {key} {value}" for key, value in (block or {}).items() if key != "tile_n")
        got = output(run(*(v.copy() for v in x.args())), "out", label)
        r = ref.conv_ref(*x.args())
        if count == 0 and (untouched(got) or untouched(got, float("nan"))):
            return not_yet(name, "the output is all zero or was not written")
        if got.shape == dims and got.dtype != np.float16:
            raise CheckFailure("out", f"stage 'out' on input '{label}': dtype {got.dtype}, expected float16")
        want, bound = r.out.reshape(dims), (r.bound if fused else r.bound_unfused).reshape(dims)
        hint = _hint(got, x, r, bound, tile_n) if got.shape == dims else ""
        compare("out", got, want, bound=bound, names=NAMES, hint=hint, case=label)
        count += 1
    return passed(name, count, seed)


# ------------------------------------------------------------------------------------------------------------
# Back-to-back convolutions (notebook 2d)
# ------------------------------------------------------------------------------------------------------------

# 2 images of 24 x 24 (a row tile of 128 pixels straddles two images), 64 -> 64 -> 128: two column tiles of 64 for
# the unfused second kernel; the fused kernel holds all 64 middle channels and all 128 outputs in one block
B2B_SHAPE = ref.B2BShape(2, 24, 24, 64, 64, 128)
# the back-to-back kernel with its 3x3's A tiles by tensor copies: TMA_SHAPES[0]'s images (row tiles that are boxes),
# at the target's widths and at the wide chain's
TMA_B2B_SHAPE = ref.B2BShape(2, 3, 256, 64, 64, 128)
TMA_B2B_WIDE_SHAPE = ref.B2BShape(2, 3, 256, 64, 256, 64)
# the wide chain of the speed run (D0 four times the input, 64 -> 256 -> 64) at the same images: checked before it
# is timed, on a CPU by the tests with the NumPy semantics, on a GPU by utilities.conv.benchmarks.b2b_correctness
B2B_WIDE_SHAPE = ref.B2BShape(2, 24, 24, 64, 256, 64)
B2B_NAMES = ("b", "h", "w", "c")


def _d0_candidates(conv0: np.ndarray) -> dict[str, np.ndarray]:
    return {"ReLU missing in the first epilogue: D0 = relu(acc0)": conv0}


def _d1_candidates(d0: np.ndarray, w1: np.ndarray, bias1: np.ndarray, conv0: np.ndarray | None) -> dict[str, Any]:
    p = d0 @ w1
    out = {
        "ReLU missing in the second epilogue: D1 = relu(acc1 + bias1)": p + bias1,
        "bias1 missing: D1 = relu(acc1 + bias1[c])": relu(p),
        "ReLU applied before the bias: relu(acc1) + bias1": relu(p) + bias1,
        "ReLU applied before the bias, then again after it: relu(relu(acc1) + bias1) is bias1 where acc1 < 0 < bias1; "
        "add bias1 first, then ReLU once": relu(relu(p) + bias1),
        "the second FP32 sum was rounded to FP16 before the bias: add bias1 and apply ReLU to the FP32 "
        "accumulator, and round once, at the store": relu(p.astype(np.float16).astype(np.float64) + bias1),
    }
    if conv0 is not None:
        out["D0 without its ReLU fed the second GEMM (ReLU missing in the first epilogue)"] = relu(conv0 @ w1 + bias1)
    return out


def _b2b_hint(got: np.ndarray, want: np.ndarray, bound: np.ndarray, candidates: dict[str, np.ndarray]) -> str:
    flat = got.reshape(want.shape).astype(np.float64)
    with np.errstate(invalid="ignore"):
        if not (~(np.abs(flat - want) <= bound)).any():
            return ""
        for text, value in candidates.items():
            near = np.abs(flat - value) <= bound + 4 * ref.U16 * np.abs(value)
            if near.mean() > 0.99 and (~(np.abs(value - want) <= bound)).mean() > 0.001:
                return text
    return ""


B2B_NEEDS = {"d0": 1}  # D0 is written by the first TODO region; D1 needs them all


def _b2b_driver(
    functions: Sequence[Any],
    *args: Any,
    shape: ref.B2BShape = B2B_SHAPE,
    small: bool = False,
    block: dict[str, int] | None = None,
    **kwargs: Any,
) -> str:
    if small:  # one row tile of 128 pixels, every channel (the fused kernel holds them all in one block)
        shape = small_conv_shape(shape, shape.c_out)
    cfg = f"PipeConfig(tile_n={shape.c_mid}, **{dict(block)!r})" if block else "None"
    return f"""
        import cupy as cp
        from utilities.conv import reference as ref
        from utilities.conv.layout import PipeConfig
        from utilities.conv.tensorcore import Kernels
        from utilities.conv.tensorcore_persistent import ConvB2B
        shape = {_shape_text(shape)}
        plan = ConvB2B(shape, cfg={cfg}, keep_d0=True, kernels=Kernels({sanitizer.kernels_arguments(functions)}))
        plan(*(cp.asarray(v) for v in ref.b2b_inputs(shape, "random", 0).args()))
        cp.cuda.runtime.deviceSynchronize()
        """


def _b2b_contract(args: tuple, kwargs: dict) -> list[tuple[tuple, dict]]:
    """The driver's arguments at each block of :data:`CONV_B2B_CONFIGS` (an empty one: the plan's default)."""
    return [(args, {**kwargs, "block": dict(c) or None}) for c in CONV_B2B_CONFIGS]


@checker("back-to-back convolutions", needs=B2B_NEEDS, driver=_b2b_driver, shared=True, contract=_b2b_contract)
def check_conv_b2b(
    run: Callable[..., Any],
    *,
    stages: Callable[[], dict[str, Any]] | None = None,
    shape: ref.B2BShape = B2B_SHAPE,
    block: dict[str, int] | None = None,
    seed: int | None = None,
    cases: Sequence[str] = ref.B2B_CASES,
) -> CheckResult:
    """``run(x, w0, w1, bias1)`` returns D1 = relu(conv1x1(relu(conv3x3(x, w0)), w1) + bias1) (NHWC FP16, NumPy);
    ``stages()`` returns ``{"d0": D0}`` (NHWC) when the plan keeps it.

    D0 first, against the FP64 reference. Then D1: with D0 kept, against the 1x1 convolution of the kernel's own
    D0 (``utilities.rounding.gemm_bias_relu_ref``: the second stage's rounding alone); without it, against the
    FP64 chain (whose bound carries D0's rounding too). ``block``: the plan's PipeConfig fields beside tile_n (None:
    its default; the contract's two are :data:`CONV_B2B_CONFIGS`), for the messages.
    """
    name, seed = "back-to-back convolutions", fresh_seed(seed)
    if block:
        name += " (" + ", ".join(f"{key} {value}" for key, value in block.items()) + ")"
    count = 0
    dims = (shape.batch, shape.height, shape.width)
    for x in ref.b2b_cases(shape, seed, tuple(cases)):
        got = output(run(*(v.copy() for v in x.args())), "d1", f"{x.name}, {shape.label}")
        kept = {k: np.asarray(v) for k, v in (stages() if stages is not None else {}).items()}
        if count == 0:
            if "d0" in kept and (untouched(kept["d0"]) or untouched(kept["d0"], float("nan"))):
                return not_yet(name, "stage 'd0' was not written")
            if untouched(got) or untouched(got, float("nan")):
                return not_yet(name, "D1 is all zero or was not written")
        label = f"{x.name}, {shape.label}"
        r = ref.conv_b2b_ref(*x.args())
        w1, bias1 = x.w1.astype(np.float64), x.bias1.astype(np.float64)
        if "d0" in kept:
            d0 = kept["d0"]
            if d0.shape == (*dims, shape.c_mid) and d0.dtype != np.float16:
                raise CheckFailure("d0", f"stage 'd0' on input '{label}': dtype {d0.dtype}, expected float16")
            want0, bound0 = r.d0.reshape(*dims, -1), r.bound_d0.reshape(*dims, -1)
            hint = _b2b_hint(d0, r.d0, r.bound_d0, _d0_candidates(r.conv0)) if d0.shape == want0.shape else ""
            compare("d0", d0, want0, bound=bound0, names=B2B_NAMES, hint=hint, case=label)
            d0_64 = d0.reshape(shape.m, shape.c_mid).astype(np.float64)
            want1, bound1 = gemm_bias_relu_ref(d0_64, w1, bias1)
            candidates = _d1_candidates(d0_64, w1, bias1, None)
        else:
            want1, bound1 = r.d1, r.bound_d1
            candidates = _d1_candidates(r.d0, w1, bias1, r.conv0)
        if got.shape == (*dims, shape.c_out) and got.dtype != np.float16:
            raise CheckFailure("d1", f"stage 'd1' on input '{label}': dtype {got.dtype}, expected float16")
        hint = _b2b_hint(got, want1, bound1, candidates) if got.shape == (*dims, shape.c_out) else ""
        compare(
            "d1", got, want1.reshape(*dims, -1), bound=bound1.reshape(*dims, -1), names=B2B_NAMES, hint=hint, case=label
        )
        count += 1
    return passed(name, count, seed)

"""The 3x3 convolution as an implicit GEMM: the index map, the FP64 reference, its error bounds and the inputs.

NumPy only. Layouts: the input ``x`` is NHWC, (B, H, W, C_in); the filters ``w`` are (3, 3, C_in, C_out) (tap row
r, tap column s, input channel, output channel); the bias is (C_out,); the output is NHWC, (B, H, W, C_out).
Stride 1, padding 1, so the output has the input's height and width.

As a GEMM: output pixel m = (b H + h) W + w is row m of an (M = B H W) x (K = 9 C_in) matrix A, whose column
k = (3 r + s) C_in + c holds channel c of the input pixel that tap (r, s) reads: (b, h + r - 1, w + s - 1), or 0
where that pixel lies outside the image (the padding). The filters reshaped to (9 C_in) x C_out are B. The
index map :func:`neighbor` says which input pixel each (m, tap) reads; the kernel never builds A.

Bounds: the fused kernel computes ``fp16(relu(fp32(A B) + bias))``, exactly the GEMM + bias + ReLU of notebook 2a
on the rows of A, so its bound is ``utilities.rounding.gemm_bias_relu_ref``'s. The unfused path stores
the convolution in FP16 first, one rounding more: ``U16 |A B| + ETA16`` (bounded with ``|A||B|``).

Back-to-back (notebook 2d): ``D0 = fp16(relu(conv3x3(x, w0)))``, then the 1x1 convolution, a GEMM over the
channels, ``D1 = fp16(relu(D0 W1 + bias1))``. :func:`conv_b2b_ref` gives both stages in FP64 and their bounds;
the fused kernel and the unfused path round D0 to FP16 alike, so one bound serves both.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ..rounding import ETA16, SAFETY, U16, U32, U64, gamma, gemm_bias_relu_ref

TAPS = 9  # a 3x3 filter
F16 = np.float16


@dataclass(frozen=True)
class ConvShape:
    """A 3x3, stride-1, padding-1 convolution: ``batch`` NHWC images of ``height`` x ``width`` x ``c_in``, ``c_out``
    filters."""

    batch: int
    height: int
    width: int
    c_in: int
    c_out: int

    def __post_init__(self) -> None:
        for name in ("batch", "height", "width", "c_in", "c_out"):
            v = getattr(self, name)
            if not isinstance(v, int | np.integer) or v <= 0:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")

    @property
    def m(self) -> int:
        """GEMM rows: output pixels."""
        return self.batch * self.height * self.width

    @property
    def n(self) -> int:
        return self.c_out

    @property
    def k(self) -> int:
        """GEMM depth: 9 taps of c_in channels."""
        return TAPS * self.c_in

    @property
    def label(self) -> str:
        return f"B={self.batch} {self.height}x{self.width} C {self.c_in}->{self.c_out}"

    def pixel(self, m: int) -> tuple[int, int, int]:
        """(b, h, w) of pixel m."""
        return m // (self.height * self.width), (m // self.width) % self.height, m % self.width


def neighbor(m: int, r: int, s: int, height: int, width: int) -> int:
    """The input pixel that tap (r, s) of output pixel m reads, or -1 where it falls in the zero padding."""
    h, w = (m // width) % height, m % width
    if not (0 <= h + r - 1 < height and 0 <= w + s - 1 < width):
        return -1
    return m + (r - 1) * width + (s - 1)


def neighbor_table(shape: ConvShape, rows: np.ndarray | None = None) -> np.ndarray:
    """``neighbor`` for the output pixels ``rows`` (every pixel if None) and every tap: an (len(rows), 9) int64
    array, tap t = 3 r + s."""
    m = np.arange(shape.m, dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)
    h, w = (m // shape.width) % shape.height, m % shape.width
    table = np.empty((len(m), TAPS), np.int64)
    for t in range(TAPS):
        r, s = divmod(t, 3)
        inside = (h + r - 1 >= 0) & (h + r - 1 < shape.height) & (w + s - 1 >= 0) & (w + s - 1 < shape.width)
        table[:, t] = np.where(inside, m + (r - 1) * shape.width + (s - 1), -1)
    return table


def shape_of(x: np.ndarray, w: np.ndarray) -> ConvShape:
    """The ConvShape of an NHWC input and (3, 3, C_in, C_out) filters, with a clear error for anything else."""
    if x.ndim != 4:
        raise ValueError(f"x must be NHWC (batch, height, width, channels), got shape {x.shape}")
    if w.ndim != 4 or w.shape[:2] != (3, 3) or w.shape[2] != x.shape[3]:
        raise ValueError(f"w must be (3, 3, C_in={x.shape[3]}, C_out), got shape {w.shape}")
    return ConvShape(*(int(d) for d in x.shape), int(w.shape[3]))


def im2col_rows(x: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    """Rows of the implicit GEMM's A (FP64): for each output pixel in ``rows`` (all if None), its 9 taps' channels."""
    b, hgt, wid, c = x.shape
    shape = ConvShape(b, hgt, wid, c, 1)
    table = neighbor_table(shape, rows)
    flat = np.concatenate([np.asarray(x, np.float64).reshape(-1, c), np.zeros((1, c))])  # row -1: the padding
    return flat[table].reshape(len(table), TAPS * c)


def filters_matrix(w: np.ndarray) -> np.ndarray:
    """The filters as the GEMM's B: (9 C_in) x C_out, row k = (3 r + s) C_in + c."""
    return np.asarray(w).reshape(TAPS * w.shape[2], w.shape[3])


@dataclass
class ConvReference:
    """The FP64 convolution of some output pixels (rows of A), before and after the epilogue, and the bounds."""

    rows: np.ndarray  # output pixels (GEMM rows)
    conv: np.ndarray  # A @ B: the convolution without bias
    out: np.ndarray  # relu(A @ B + bias)
    bound: np.ndarray  # allowed |fused result - out|
    bound_unfused: np.ndarray  # allowed |unfused result - out| (the convolution stored in FP16 first)
    bound_conv: np.ndarray  # allowed |FP16 convolution - conv|


def conv_ref(x: np.ndarray, w: np.ndarray, bias: np.ndarray, rows: np.ndarray | None = None) -> ConvReference:
    """The FP64 reference of ``relu(conv3x3(x, w) + bias)`` on output pixels ``rows`` (every pixel if None)."""
    shape = shape_of(np.asarray(x), np.asarray(w))
    rows = np.arange(shape.m) if rows is None else np.asarray(rows)
    a, b = im2col_rows(x, rows), filters_matrix(np.asarray(w, np.float64))
    out, bound = gemm_bias_relu_ref(a, b, np.asarray(bias))
    conv = a @ b
    e_acc = (gamma(shape.k, U32) + gamma(shape.k, U64)) * (np.abs(a) @ np.abs(b))  # FP32 sum, FP64 reference
    store = SAFETY * (U16 * (np.abs(conv) + e_acc) + ETA16)  # the FP16 store of the convolution
    conv_bound = SAFETY * e_acc + store
    return ConvReference(rows, conv, out, bound, bound + store, conv_bound)


def conv_fp16(x: np.ndarray, w: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """The fused kernel's semantics emulated with NumPy (FP32 GEMM, FP32 bias, ReLU, FP16), NHWC."""
    shape = shape_of(x, w)
    a = im2col_rows(x).astype(np.float32)
    y = np.maximum(a @ filters_matrix(w).astype(np.float32) + bias.astype(np.float32), 0)
    return y.astype(F16).reshape(shape.batch, shape.height, shape.width, shape.c_out)


# ------------------------------------------------------------------------------------------------------------
# Inputs
# ------------------------------------------------------------------------------------------------------------


@dataclass
class ConvInputs:
    """One input of the convolution: FP16 x (B, H, W, C_in), w (3, 3, C_in, C_out), bias (C_out,)."""

    name: str
    x: np.ndarray
    w: np.ndarray
    bias: np.ndarray

    def args(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.x, self.w, self.bias


CONV_CASES = (
    "random",
    "ones: counts the taps inside the image",
    "relu zeroes everything",
    "large magnitudes",
    "bias dominates",
    "bias cancels the sum",
)


def conv_inputs(shape: ConvShape, case: str = "random", seed: int = 0) -> ConvInputs:
    """Inputs of ``case`` (one of ``CONV_CASES``). ``ones``: x = 1 and w = 1/8, so each output counts the taps that
    fall inside the image (4 at a corner, 6 on an edge, 9 inside) times C_in / 8: a halo mistake shows at once."""
    if case not in CONV_CASES:
        raise ValueError(f"case must be one of {CONV_CASES}, got {case!r}")
    rng = np.random.default_rng(seed)
    xs = (shape.batch, shape.height, shape.width, shape.c_in)
    ws = (3, 3, shape.c_in, shape.c_out)
    x, w = rng.standard_normal(xs), rng.standard_normal(ws) / np.sqrt(shape.k)
    bias = rng.standard_normal(shape.c_out) / 2
    if case.startswith("ones"):
        x, w, bias = np.ones(xs), np.full(ws, 0.125), np.zeros(shape.c_out)
    elif case == "relu zeroes everything":
        x, w, bias = np.abs(x), -np.abs(w), -np.abs(bias)
    elif case == "large magnitudes":
        x, w, bias = x * 64, w * 64, bias * 2.0**10  # |out| stays near 2^12, well below FP16's 65504
    elif case == "bias dominates":
        bias = np.where(rng.random(shape.c_out) < 0.5, -8.0, 8.0)
    elif case == "bias cancels the sum":
        x, w, bias = cancelling_inputs(shape, rng)
    return ConvInputs(case, x.astype(F16), w.astype(F16), bias.astype(F16))


def cancelling_inputs(shape: ConvShape, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x in [1, 1.25), w > 0 with inside sums near 48 whatever C_in, and a bias of minus a typical inside sum (FP16):
    about half the inside outputs are positive and much smaller than the sum."""
    x = (1 + rng.random((shape.batch, shape.height, shape.width, shape.c_in)) / 4).astype(F16)
    w = (rng.random((3, 3, shape.c_in, shape.c_out)) * (96 / (1.125 * shape.k))).astype(F16)
    inside = 1.125 * w.astype(np.float64).reshape(shape.k, shape.c_out).sum(axis=0)  # E[x] times the filter's sum
    return x, w, -inside.astype(F16)


def conv_cases(shape: ConvShape, seed: int, cases: tuple[str, ...] = CONV_CASES) -> Iterator[ConvInputs]:
    rng = np.random.default_rng(seed)
    for case in cases:
        yield conv_inputs(shape, case, int(rng.integers(2**31)))


# ------------------------------------------------------------------------------------------------------------
# Back-to-back: 3x3 convolution + ReLU, then 1x1 convolution + bias + ReLU (notebook 2d)
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class B2BShape:
    """Two convolutions in a row: a 3x3 one from ``c_in`` to ``c_mid`` channels, then a 1x1 one to ``c_out``."""

    batch: int
    height: int
    width: int
    c_in: int
    c_mid: int
    c_out: int

    def __post_init__(self) -> None:
        ConvShape(self.batch, self.height, self.width, self.c_in, self.c_mid)  # the same checks
        if not isinstance(self.c_out, int | np.integer) or self.c_out <= 0:
            raise ValueError(f"c_out must be a positive integer, got {self.c_out!r}")

    @property
    def first(self) -> ConvShape:
        """The 3x3 convolution."""
        return ConvShape(self.batch, self.height, self.width, self.c_in, self.c_mid)

    @property
    def m(self) -> int:
        return self.batch * self.height * self.width

    @property
    def label(self) -> str:
        return f"B={self.batch} {self.height}x{self.width} C {self.c_in}->{self.c_mid}->{self.c_out}"


@dataclass
class B2BInputs:
    """x (B, H, W, C_in), w0 (3, 3, C_in, C_mid), w1 (C_mid, C_out): the 1x1 filters as a matrix, bias1 (C_out,)."""

    name: str
    x: np.ndarray
    w0: np.ndarray
    w1: np.ndarray
    bias1: np.ndarray

    def args(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        return self.x, self.w0, self.w1, self.bias1


@dataclass
class B2BConvReference:
    """Both stages in FP64 on some output pixels, and the allowed differences of a GPU's D0 and D1."""

    rows: np.ndarray
    conv0: np.ndarray  # conv3x3(x, w0)
    d0: np.ndarray  # relu(conv0)
    d1: np.ndarray  # relu(d0 W1 + bias1)
    bound_d0: np.ndarray
    bound_d1: np.ndarray
    pre1: np.ndarray  # d0 W1 + bias1


def b2b_shape_of(x: np.ndarray, w0: np.ndarray, w1: np.ndarray) -> B2BShape:
    first = shape_of(np.asarray(x), np.asarray(w0))
    if np.ndim(w1) != 2 or np.shape(w1)[0] != first.c_out:
        raise ValueError(f"w1 must be (C_mid={first.c_out}, C_out), the 1x1 filters as a matrix, got {np.shape(w1)}")
    return B2BShape(first.batch, first.height, first.width, first.c_in, first.c_out, int(np.shape(w1)[1]))


def conv_b2b_ref(
    x: np.ndarray, w0: np.ndarray, w1: np.ndarray, bias1: np.ndarray, rows: np.ndarray | None = None
) -> B2BConvReference:
    """FP64 stages of ``relu(conv1x1(relu(conv3x3(x, w0)), w1) + bias1)`` on output pixels ``rows`` (all if None).

    Stage 0 is the 3x3 convolution's fused semantics with a zero bias (``fp16(relu(fp32 sum))``), so its bound is
    :func:`conv_ref`'s. Stage 1 multiplies the GPU's own D0, off by at most E0: ``D0 W1`` is off by ``E0 |W1|``,
    its FP32 sum of C_mid products by ``gamma_{C_mid} (d0 + E0) |W1|``; the bias adds one FP32 rounding, ReLU is
    1-Lipschitz, and the FP16 store rounds once more. Times ``SAFETY``, as every bound of the course.
    """
    shape = b2b_shape_of(x, w0, w1)
    first = conv_ref(x, w0, np.zeros(shape.c_mid), rows)
    w1_64, b1 = np.asarray(w1, np.float64), np.asarray(bias1, np.float64)
    e0 = first.bound
    x_abs = (first.out + e0) @ np.abs(w1_64)  # bounds |D0 W1| and |d0 W1|
    e_dot = e0 @ np.abs(w1_64) + (gamma(shape.c_mid, U32) + gamma(shape.c_mid, U64)) * x_abs
    pre = first.out @ w1_64 + b1
    d1 = np.maximum(pre, 0)
    e_pre = e_dot + U32 * (np.abs(pre) + e_dot)
    bound1 = SAFETY * (e_pre + U16 * (d1 + e_pre) + ETA16)
    return B2BConvReference(first.rows, first.conv, first.out, d1, e0, bound1, pre)


def conv_b2b_fp16(x: np.ndarray, w0: np.ndarray, w1: np.ndarray, bias1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The fused kernel's semantics emulated with NumPy: (D0, D1) in FP16, NHWC, FP32 sums."""
    shape = b2b_shape_of(x, w0, w1)
    d0 = conv_fp16(x, w0, np.zeros(shape.c_mid, F16))
    flat = d0.reshape(shape.m, shape.c_mid).astype(np.float32)
    d1 = np.maximum(flat @ np.asarray(w1, np.float32) + np.asarray(bias1, np.float32), 0).astype(F16)
    return d0, d1.reshape(shape.batch, shape.height, shape.width, shape.c_out)


B2B_CASES = ("random", "ones: counts the taps inside the image", "first ReLU zeroes half", "bias cancels the sum")


def b2b_inputs(shape: B2BShape, case: str = "random", seed: int = 0) -> B2BInputs:
    """Inputs of ``case`` (one of ``B2B_CASES``). ``first ReLU zeroes half``: half the middle channels have filters
    of one sign, so D0 is zero on them wherever the input is positive: a missing first ReLU shows in D1.
    ``bias cancels the sum``: positive D0 and W1 and a bias1 near minus the typical sum, so that rounding the second
    sum to FP16 before the bias shows."""
    if case not in B2B_CASES:
        raise ValueError(f"case must be one of {B2B_CASES}, got {case!r}")
    rng = np.random.default_rng(seed)
    first = conv_inputs(shape.first, "random", int(rng.integers(2**31)))
    x, w0 = first.x.astype(np.float64), first.w.astype(np.float64)
    w1 = rng.standard_normal((shape.c_mid, shape.c_out)) / np.sqrt(shape.c_mid)
    bias1 = rng.standard_normal(shape.c_out) / 2
    if case.startswith("ones"):
        x, w0 = np.ones_like(x), np.full_like(w0, 0.125)
        w1, bias1 = np.full_like(w1, 1 / shape.c_mid), np.zeros(shape.c_out)
    elif case == "first ReLU zeroes half":
        x = np.abs(x)
        half = np.arange(shape.c_mid) % 2 == 0
        w0[..., half] = -np.abs(w0[..., half])
        w1 = np.abs(w1)  # the zeroed channels would otherwise add a negative share
    elif case == "bias cancels the sum":
        x, w0, _ = cancelling_inputs(shape.first, rng)
        d0 = conv_fp16(x, w0, np.zeros(shape.c_mid, F16)).reshape(shape.m, shape.c_mid).astype(np.float64)
        w1 = rng.random((shape.c_mid, shape.c_out)) * (2 / shape.c_mid)
        typical = np.median(d0[d0.sum(axis=1) > 0], axis=0) @ w1 if (d0 > 0).any() else np.zeros(shape.c_out)
        bias1 = -typical
    return B2BInputs(case, x.astype(F16), w0.astype(F16), w1.astype(F16), bias1.astype(F16))


def b2b_cases(shape: B2BShape, seed: int, cases: tuple[str, ...] = B2B_CASES) -> Iterator[B2BInputs]:
    rng = np.random.default_rng(seed)
    for case in cases:
        yield b2b_inputs(shape, case, int(rng.integers(2**31)))

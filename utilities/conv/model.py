"""Bytes each convolution path must move through HBM, its FLOPs, and the gain fusion can give (plain Python).

Compulsory traffic, FP16 (2 bytes an element), as in ``utilities.roofline``: each kernel reads its operands
once and writes its result once. The 3x3 halo is not counted: a block's neighbouring rows come from L2, not HBM.
Paths (those of ``utilities.conv.tensorcore`` and ``utilities.conv.baselines``):

- ``fused``: one kernel reads x, the filters and the bias and writes the output (cuDNN's fused convolution too);
- ``unfused``: the convolution writes its FP16 result P (B H W C_out), and a bias + ReLU kernel reads P and
  writes the output: P-sized traffic twice more (PyTorch's convolution followed by ReLU moves the same);
- ``im2col``: nine copies build the (M x 9 C_in) matrix A in HBM (each reads x and writes its ninth of A), cuBLAS
  reads A, then the bias + ReLU kernel: A, nine times the input, is written and read once.

The ratio unfused / fused bytes bounds what fusion can save on a memory-bound convolution: with C_in = C_out
it is 2, since x, P and the output are the same size. FLOPs grow as 9 C_in C_out per pixel and bytes as
C_in + C_out, so wide channels make the convolution compute-bound and the epilogue's bytes a rounding error.
"""

from __future__ import annotations

from ..roofline import FP16_BYTES, Traffic, format_rows, path_rows
from .reference import TAPS, B2BShape, ConvShape

CONV_PATHS = ("fused", "unfused", "im2col")


def conv_flops(shape: ConvShape) -> int:
    """2 M N K: the implicit GEMM's multiply-adds (the padding's zeros included, as every library counts them)."""
    return 2 * shape.m * shape.n * shape.k


def conv_traffic(path: str, shape: ConvShape, *, e: int = FP16_BYTES) -> Traffic:
    """Bytes of ``path`` (one of ``CONV_PATHS``)."""
    if path not in CONV_PATHS:
        raise ValueError(f"path must be one of {CONV_PATHS}, got {path!r}")
    x, w, bias = shape.m * shape.c_in, TAPS * shape.c_in * shape.c_out, shape.c_out
    out = shape.m * shape.c_out
    read, written, kernels = x + w + bias, out, 1
    if path == "unfused":
        read, written, kernels = read + out, written + out, 2
    elif path == "im2col":
        a = TAPS * x
        read, written, kernels = read + TAPS * x - x + a + out, written + a + out, TAPS + 2
    return Traffic(path, e * read, e * written, conv_flops(shape), kernels)


def fusion_gain_bound(shape: ConvShape) -> float:
    """Unfused bytes / fused bytes: the most fusion can save where both paths run at HBM bandwidth."""
    return conv_traffic("unfused", shape).bytes / conv_traffic("fused", shape).bytes


def conv_prediction(shape: ConvShape, *, bandwidth_tbs: float, tflops: float) -> list[dict[str, float | str]]:
    """One row per path: MB moved, GFLOP, its roofline floor (us), what bounds it, and its floor / fused floor."""
    paths = [conv_traffic(path, shape) for path in CONV_PATHS]
    return path_rows(paths, bandwidth_tbs=bandwidth_tbs, tflops=tflops)


def format_prediction(rows: list[dict[str, float | str]]) -> str:
    """The rows of ``conv_prediction`` or ``b2b_prediction`` as a small text table."""
    return format_rows(rows)


# ------------------------------------------------------------------------------------------------------------
# Back-to-back convolutions (notebook 2d)
# ------------------------------------------------------------------------------------------------------------

B2B_PATHS = ("fused", "unfused")


def b2b_flops(shape: B2BShape) -> int:
    """Both convolutions' multiply-adds: 2 M C_mid 9 C_in, then 2 M C_out C_mid."""
    return 2 * shape.m * shape.c_mid * TAPS * shape.c_in + 2 * shape.m * shape.c_out * shape.c_mid


def b2b_traffic(path: str, shape: B2BShape, *, e: int = FP16_BYTES) -> Traffic:
    """Bytes of ``path`` (one of ``B2B_PATHS``): ``fused`` reads x and the filters once and writes D1; ``unfused``
    also writes D0 (B H W C_mid) and reads it back, in two kernels (cuDNN twice moves the same bytes)."""
    if path not in B2B_PATHS:
        raise ValueError(f"path must be one of {B2B_PATHS}, got {path!r}")
    x, d0, d1 = shape.m * shape.c_in, shape.m * shape.c_mid, shape.m * shape.c_out
    filters = TAPS * shape.c_in * shape.c_mid + shape.c_mid * shape.c_out + shape.c_out
    read, written, kernels = x + filters, d1, 1
    if path == "unfused":
        read, written, kernels = read + d0, written + d0, 2
    return Traffic(path, e * read, e * written, b2b_flops(shape), kernels)


def b2b_gain_bound(shape: B2BShape) -> float:
    """Unfused bytes / fused bytes: what keeping D0 in the block can save where both paths are memory-bound."""
    return b2b_traffic("unfused", shape).bytes / b2b_traffic("fused", shape).bytes


def b2b_prediction(shape: B2BShape, *, bandwidth_tbs: float, tflops: float) -> list[dict[str, float | str]]:
    """One row per path, as :func:`conv_prediction`'s."""
    paths = [b2b_traffic(path, shape) for path in B2B_PATHS]
    return path_rows(paths, bandwidth_tbs=bandwidth_tbs, tflops=tflops)


def time_split(times_ms: dict[str, float]) -> dict[str, float | str] | None:
    """Where a pipelined kernel's time goes, from the medians (ms, by record name) of one run: the whole kernel
    ``conv.fused@<tile>``, the same kernel doing only its gathers ``conv.gather_only@<tile>`` and only its MMAs
    ``conv.mma_only@<tile>`` (``utilities.conv.benchmarks``). ``overlap`` = gathers + MMAs - whole: 0 when the two
    parts run one after the other, the shorter part's whole time when it hides behind the longer; ``hidden`` is
    that overlap as a fraction of the shorter part. None without the three records."""
    tiles = [name.split("@", 1)[1] for name in times_ms if name.startswith("conv.gather_only@")]
    if not tiles:
        return None
    tile = tiles[0]
    names = (f"conv.fused@{tile}", f"conv.gather_only@{tile}", f"conv.mma_only@{tile}")
    if not all(n in times_ms for n in names):
        return None
    whole, gather, mma = (times_ms[n] for n in names)
    overlap = gather + mma - whole
    return {
        "tile": tile,
        "whole": whole,
        "gather": gather,
        "mma": mma,
        "overlap": overlap,
        "hidden": overlap / min(gather, mma),
    }


def format_time_split(split: dict[str, float | str]) -> str:
    """One line: the whole kernel, its parts alone, and how much of the shorter part the longer one hides."""
    return (
        f"where the time goes ({split['tile']}): the whole kernel {split['whole']:.4f} ms, its gathers alone "
        f"{split['gather']:.4f} ms, its MMAs alone {split['mma']:.4f} ms: the parts overlap by "
        f"{split['overlap']:.4f} ms, {split['hidden']:.0%} of the shorter part"
    )

"""Bytes each path must move through HBM, FLOPs, and the time floor they set (plain Python, no GPU).

Counts are compulsory traffic: every operand read once and every result written once per kernel (a block
re-reading B0 or B1 from L2 is not counted). FP16 everywhere: 2 bytes an element. Batched problems multiply
everything by ``batch``. The paths counted are exactly those of ``utilities.fusion.baselines`` and of the
fused kernels:

Back-to-back GEMM, ``D0 = relu(alpha0 A0 B0)``, ``D1 = relu(alpha1 D0 B1 + beta1 C1)``:

- ``fused``: one kernel reads A0, B0, B1, C1 and writes D1; D0 stays in the block.
- ``library``: GEMM0 writes P0 = A0 B0; an elementwise kernel reads P0 and writes D0; GEMM1 reads D0 and B1
  and writes P1; an elementwise kernel reads P1 and C1 and writes D1: D0-sized traffic four times.
- ``epilogue``: two library GEMMs with fused epilogues (alpha, ReLU, beta C1): D0 written once, read once.

GEMM + bias + ReLU: ``fused`` (and the library's RELU_BIAS epilogue) reads A, B, bias and writes the output;
``separate`` writes the GEMM's output and an elementwise kernel reads it with the bias and writes it again.
"""

from __future__ import annotations

from ..roofline import FP16_BYTES, Traffic, bound_by, format_rows, path_rows, ridge_point, time_floor

# 2a and 2b read the roofline (time_floor, bound_by, ridge_point) through the track's model
__all__ = [
    "B2B_PATHS",
    "GEMM_PATHS",
    "Traffic",
    "b2b_flops",
    "b2b_prediction",
    "b2b_traffic",
    "bound_by",
    "format_prediction",
    "gemm_bias_relu_traffic",
    "ridge_point",
    "time_floor",
]

B2B_PATHS = ("fused", "epilogue", "library")
GEMM_PATHS = ("fused", "epilogue", "separate")


def b2b_flops(m: int, k0: int, n0: int, n1: int, batch: int = 1) -> int:
    """The two GEMMs' multiply-adds counted as 2 FLOPs (the elementwise work is not counted)."""
    return 2 * batch * m * (k0 * n0 + n0 * n1)


def b2b_traffic(
    path: str, m: int, k0: int, n0: int, n1: int, batch: int = 1, *, reads_c1: bool = True, e: int = FP16_BYTES
) -> Traffic:
    """Bytes of ``path`` (one of ``B2B_PATHS``); ``reads_c1=False`` when beta1 = 0 lets a kernel skip C1."""
    if path not in B2B_PATHS:
        raise ValueError(f"path must be one of {B2B_PATHS}, got {path!r}")
    for label, v in (("m", m), ("k0", k0), ("n0", n0), ("n1", n1), ("batch", batch)):
        if int(v) != v or v <= 0:
            raise ValueError(f"{label} must be a positive integer, got {v!r}")
    a0, b0, b1, c1 = m * k0, k0 * n0, n0 * n1, m * n1 if reads_c1 else 0
    d0, d1 = m * n0, m * n1
    if path == "fused":
        read, written, kernels = a0 + b0 + b1 + c1, d1, 1
    elif path == "epilogue":
        read, written, kernels = (a0 + b0) + (d0 + b1 + c1), d0 + d1, 2
    else:
        # GEMM0 (A0, B0 -> P0), relu(alpha0 x) (P0 -> D0), GEMM1 (D0, B1 -> P1), relu(alpha1 x + beta1 c) (P1, C1 -> D1)
        read, written, kernels = (a0 + b0) + d0 + (d0 + b1) + (d1 + c1), d0 + d0 + d1 + d1, 4
    return Traffic(path, e * batch * read, e * batch * written, b2b_flops(m, k0, n0, n1, batch), kernels)


def gemm_bias_relu_traffic(path: str, m: int, n: int, k: int, *, e: int = FP16_BYTES) -> Traffic:
    """Bytes of ``path`` (one of ``GEMM_PATHS``) for an m x n x k GEMM with bias and ReLU; FLOPs 2 m n k."""
    if path not in GEMM_PATHS:
        raise ValueError(f"path must be one of {GEMM_PATHS}, got {path!r}")
    read, written, kernels = m * k + k * n + n, m * n, 1
    if path == "separate":
        read, written, kernels = read + m * n, written + m * n, 2
    return Traffic(path, e * read, e * written, 2 * m * n * k, kernels)


def b2b_prediction(
    m: int, k0: int, n0: int, n1: int, batch: int = 1, *, bandwidth_tbs: float, tflops: float
) -> list[dict[str, float | str]]:
    """One row per path: MB moved, GFLOP, the floor in microseconds, what bounds it, and its bytes over fused's."""
    paths = [b2b_traffic(path, m, k0, n0, n1, batch) for path in B2B_PATHS]
    return path_rows(paths, bandwidth_tbs=bandwidth_tbs, tflops=tflops, ratio="bytes")


def format_prediction(rows: list[dict[str, float | str]]) -> str:
    """The rows of ``b2b_prediction`` as a small text table."""
    return format_rows(rows)

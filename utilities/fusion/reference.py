"""FP64 references of the block-resident fusion track, the FP16/FP32 stage semantics, inputs and error bounds.

NumPy only (no GPU imports). Two computations, on FP16 inputs with FP32 accumulation:

- GEMM + bias + ReLU:  ``out = fp16(relu(fp32(A @ B) + bias))``, bias (n,) added to every row;
- back-to-back GEMM:   ``D0 = fp16(relu(alpha0 * fp32(A0 @ B0)))``,
  ``D1 = fp16(relu(alpha1 * fp32(D0 @ B1) + beta1 * fp32(C1)))``; a leading batch axis is allowed everywhere.

The references (``gemm_bias_relu_ref``, ``b2b_ref``) evaluate the same formulas in FP64 on the FP16 inputs with
no intermediate rounding, and return an elementwise bound on ``|GPU - reference|`` derived below
(``b2b_bound``). ``gemm_bias_relu_fp16`` / ``b2b_fp16`` emulate the stage semantics with NumPy's FP32 GEMM.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ..rounding import ETA16, FP16_MAX, SAFETY, U16, U32, U64, as_f64, fp32_dot_bound, gamma, gemm_bias_relu_ref, relu  # noqa: F401 - 2a's reference too (the core holds it for 2c)

F16 = np.float16


# ------------------------------------------------------------------------------------------------------------
# GEMM + bias + ReLU
# ------------------------------------------------------------------------------------------------------------


def gemm_bias_relu_fp16(a: np.ndarray, b: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """The stage semantics emulated with NumPy: FP32 GEMM, FP32 bias add, ReLU, FP16 output."""
    s = a.astype(np.float32) @ b.astype(np.float32)
    return relu(s + bias.astype(np.float32)).astype(F16)


# ------------------------------------------------------------------------------------------------------------
# Back-to-back GEMM
# ------------------------------------------------------------------------------------------------------------


@dataclass
class B2BReference:
    """FP64 stages of the back-to-back GEMM and the allowed differences of a GPU's D0 and D1 from them."""

    p0: np.ndarray  # A0 @ B0
    d0: np.ndarray  # relu(alpha0 * p0)
    p1: np.ndarray  # alpha1 * d0 @ B1 + beta1 * C1
    d1: np.ndarray  # relu(p1)
    bound_d0: np.ndarray
    bound_d1: np.ndarray


def b2b_bound(
    a0: np.ndarray,
    b0: np.ndarray,
    b1: np.ndarray,
    c1: np.ndarray,
    alpha0: float,
    alpha1: float,
    beta1: float,
    d0: np.ndarray,
    d1: np.ndarray,
    p0: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Elementwise bounds E0 >= |D0_gpu - d0| and E1 >= |D1_gpu - d1| (d0, d1, p0: the FP64 reference stages).

    Stage 0. The FP32 sum s0 of K0 exact FP16 products (FP16 x FP16 fits in FP32) is within
    ``g0 = gamma_K0 |A0||B0|`` of A0 @ B0 whatever the order of the additions. ``fp32(alpha0 s0)`` rounds once
    (``U32 |alpha0 s0|``). ReLU is 1-Lipschitz, so before the FP16 rounding the error is at most
    ``e0 = |alpha0| (g0 + U32 (|p0| + g0))``, and rounding D0 to FP16 adds ``U16 (d0 + e0) + ETA16``:
    ``E0 = e0 + U16 (d0 + e0) + ETA16``.

    Stage 1. The GPU multiplies its own D0, which is off by at most E0, so ``D0 @ B1`` is off by ``E0 @ |B1|``;
    the FP32 sum of N0 products adds ``gamma_N0 (d0 + E0) @ |B1|``; ``alpha1 x + beta1 c`` in FP32 rounds at
    most twice (``2 U32 (|alpha1| |x| + |beta1 c|)``): NumPy's order rounds both products and the sum, within
    ``U32 (|alpha1 x| + |beta1 c|) + U32 |p1|`` of the exact value; a kernel whose compiler fuses it (numba-cuda
    does, in FP32 too) rounds one product and the sum, whichever product it fuses, which is less. The bound is
    against the exact value, so no order of the roundings is assumed. Then ReLU and the FP16 rounding as before:
    ``E1 = e1 + U16 (d1 + e1) + ETA16``. The plan hands the scalars to the kernel in FP32: exact for the checkers'
    (0.75, 1.25, -0.5, 1/8, 3, ...); a scalar FP32 cannot hold would add ``U32 |alpha x|`` per stage.

    Both are multiplied by ``SAFETY = 2``: tensor cores may align the addends and truncate (round toward zero) in
    their FP32 adders, which doubles the error of an addition (Fasi, Higham, Mikaitis, Pranesh, "Numerical
    behavior of NVIDIA tensor cores", PeerJ CS 2021); second-order terms (``U16 U32`` and the like) are dropped.
    The FP64 reference's own error (``gamma_K U64``) is included. Values must stay below FP16's overflow.
    """
    a64, b064, b164, c64 = as_f64(a0), as_f64(b0), as_f64(b1), as_f64(c1)
    k0, n0 = a64.shape[-1], b164.shape[-2]
    al0, al1, be1 = abs(float(alpha0)), abs(float(alpha1)), abs(float(beta1))
    g0 = fp32_dot_bound(k0) * (np.abs(a64) @ np.abs(b064))
    e0 = al0 * (g0 + U32 * (np.abs(p0) + g0))
    bound0 = e0 + U16 * (d0 + e0) + ETA16
    b1_abs = np.abs(b164)
    d0_hi = d0 + bound0  # the largest |D0| the GPU may hold
    x_abs = d0_hi @ b1_abs  # bounds |D0 @ B1| and |d0 @ B1|
    e_x = bound0 @ b1_abs + fp32_dot_bound(n0) * x_abs
    e1 = al1 * e_x + 2 * U32 * (al1 * (x_abs + e_x) + be1 * np.abs(c64))
    bound1 = e1 + U16 * (d1 + e1) + ETA16
    return SAFETY * bound0, SAFETY * bound1


def b2b_ref(
    a0: np.ndarray,
    b0: np.ndarray,
    b1: np.ndarray,
    c1: np.ndarray,
    alpha0: float,
    alpha1: float,
    beta1: float,
) -> B2BReference:
    """The FP64 back-to-back GEMM on the FP16 inputs (batched when they carry a leading axis), with its bounds."""
    a64, b064, b164, c64 = as_f64(a0), as_f64(b0), as_f64(b1), as_f64(c1)
    p0 = a64 @ b064
    d0 = relu(float(alpha0) * p0)
    p1 = float(alpha1) * (d0 @ b164) + float(beta1) * c64
    d1 = relu(p1)
    bound0, bound1 = b2b_bound(a64, b064, b164, c64, alpha0, alpha1, beta1, d0, d1, p0)  # FP64 already: no copies
    return B2BReference(p0, d0, p1, d1, bound0, bound1)


def d1_from_d0(
    d0: np.ndarray, b1: np.ndarray, c1: np.ndarray, alpha1: float, beta1: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """D1's FP64 reference from a GPU's own D0 (FP16), and its bound: the second stage's rounding alone.

    ``b2b_bound``'s stage 1 with E0 = 0: the GPU's D1 comes from the D0 it holds, so D0's own error is no excuse
    for D1's. ``x = D0 @ B1`` (exact products of FP16 in FP32, summed in any order: ``gamma_N0 |D0| @ |B1|``),
    ``alpha1 x + beta1 c`` in FP32 (``2 U32 (|alpha1 x| + |beta1 c|)``), ReLU, and the FP16 rounding
    (``U16 |d1| + ETA16``), times ``SAFETY``. Returns (p1, d1, bound)."""
    d064, b164, c64 = as_f64(d0), as_f64(b1), as_f64(c1)
    al1, be1 = abs(float(alpha1)), abs(float(beta1))
    x = d064 @ b164
    x_abs = np.abs(d064) @ np.abs(b164)
    p1 = float(alpha1) * x + float(beta1) * c64
    d1 = relu(p1)
    e1 = al1 * fp32_dot_bound(b164.shape[-2]) * x_abs + 2 * U32 * (al1 * x_abs + be1 * np.abs(c64))
    return p1, d1, SAFETY * (e1 + U16 * (d1 + e1) + ETA16)


def b2b_fp16(
    a0: np.ndarray,
    b0: np.ndarray,
    b1: np.ndarray,
    c1: np.ndarray,
    alpha0: float,
    alpha1: float,
    beta1: float,
    *,
    accumulate: str = "fp32",
) -> tuple[np.ndarray, np.ndarray]:
    """D0 and D1 (FP16) as the GPU computes them; ``accumulate`` picks how the two GEMMs add (``matmul_acc``)."""
    s0 = matmul_acc(a0, b0, accumulate)
    d0 = relu(np.float32(alpha0) * s0).astype(F16)
    s1 = matmul_acc(d0, b1, accumulate)
    d1 = relu(np.float32(alpha1) * s1 + np.float32(beta1) * c1.astype(np.float32)).astype(F16)
    return d0, d1


ACCUMULATIONS = ("fp32", "fp32-truncate", "fp16")


def matmul_acc(a: np.ndarray, b: np.ndarray, accumulate: str = "fp32") -> np.ndarray:
    """``a @ b`` of FP16 matrices as FP32, summed the way ``accumulate`` says (2-D or batched 3-D).

    ``fp32``: NumPy's FP32 GEMM (BLAS order, FMAs). ``fp32-truncate``: one product after another, every partial
    sum rounded toward zero in FP32 (a pessimistic tensor core). ``fp16``: every partial sum rounded to FP16 (a
    wrong kernel: FP16 accumulation).
    """
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    if accumulate == "fp32":
        return a32 @ b32
    if accumulate not in ACCUMULATIONS:
        raise ValueError(f"accumulate must be one of {ACCUMULATIONS}, got {accumulate!r}")
    acc = np.zeros((*np.broadcast_shapes(a.shape[:-2], b.shape[:-2]), a.shape[-2], b.shape[-1]), np.float64)
    for k in range(a.shape[-1]):
        exact = acc + as_f64(a32[..., :, k : k + 1]) * as_f64(b32[..., k : k + 1, :])  # exact: 24 + 22 bits
        if accumulate == "fp16":
            acc = as_f64(exact.astype(F16))
            continue
        nearest = exact.astype(np.float32)
        away = np.abs(nearest.astype(np.float64)) > np.abs(exact)
        acc = as_f64(np.where(away, np.nextafter(nearest, np.float32(0)), nearest))
    return acc.astype(np.float32)


# ------------------------------------------------------------------------------------------------------------
# Inputs
# ------------------------------------------------------------------------------------------------------------


@dataclass
class B2BInputs:
    """One input of the back-to-back GEMM: FP16 C-contiguous operands and the scalars."""

    name: str
    a0: np.ndarray
    b0: np.ndarray
    b1: np.ndarray
    c1: np.ndarray
    alpha0: float
    alpha1: float
    beta1: float

    def args(self) -> tuple:
        return self.a0, self.b0, self.b1, self.c1, self.alpha0, self.alpha1, self.beta1


def _h(x: np.ndarray) -> np.ndarray:
    out = np.ascontiguousarray(np.asarray(x, dtype=np.float64).astype(F16))
    if not np.isfinite(out).all():
        raise OverflowError("an input overflows FP16")
    return out


def _pow2_to(top: float, target: float) -> float:
    """The power of two that brings ``top`` into [target / 2, target)."""
    return 2.0 ** (np.floor(np.log2(target / top)) if top > 0 else 0.0)


B2B_CASES = ("random", "relu zeroes everything", "mixed signs near zero", "large magnitudes", "beta1 = 0", "alphas")


def b2b_inputs(
    m: int, k0: int, n0: int, n1: int, case: str = "random", seed: int = 0, batch: int | None = None
) -> B2BInputs:
    """Inputs of ``case`` (one of ``B2B_CASES``), scaled so that D0 and D1 are O(1) unless the case says otherwise.

    - ``random``: normal entries, B0 scaled by 1/sqrt(K0) and B1 by sqrt(2/N0); alpha0 0.75, alpha1 1.25, beta1 -0.5.
    - ``relu zeroes everything``: A0 >= 0, B0 <= 0, C1 < 0: every pre-activation is negative, D0 = D1 = 0.
    - ``mixed signs near zero``: everything scaled down so that D0 and D1 reach FP16's subnormal range.
    - ``large magnitudes``: max D0 and max D1 between 2^12 and 2^15 (powers of two scale B0 and B1), so that
      FP16 carries them with no overflow (65504) but with absolute errors of several units.
    - ``beta1 = 0``: C1 is large (1000s) and must not count.
    - ``alphas``: alpha0 = 1/8, alpha1 = 3, beta1 = 1 (swapped or doubled alphas show).
    """
    if case not in B2B_CASES:
        raise ValueError(f"case must be one of {B2B_CASES}, got {case!r}")
    rng = np.random.default_rng(seed)
    lead = () if batch is None else (batch,)

    def normal(*shape: int) -> np.ndarray:
        return rng.standard_normal((*lead, *shape))

    a0, b0 = normal(m, k0), normal(k0, n0) / np.sqrt(k0)
    b1, c1 = normal(n0, n1) * np.sqrt(2.0 / n0), normal(m, n1)
    alpha0, alpha1, beta1 = 0.75, 1.25, -0.5
    if case == "relu zeroes everything":
        a0, b0, c1, beta1 = np.abs(a0), -np.abs(b0), -np.abs(c1) - 0.5, 0.5
    elif case == "mixed signs near zero":
        a0, b0, b1, c1, beta1 = a0 / 16, b0 / 16, b1 / 16, c1 / 2**12, 1.0
    elif case == "beta1 = 0":
        c1, beta1 = 1000.0 * c1, 0.0
    elif case == "alphas":
        alpha0, alpha1, beta1 = 0.125, 3.0, 1.0
    elif case == "large magnitudes":
        alpha0, alpha1, beta1 = 1.0, 1.0, 1.0
        b0 = b0 * _pow2_to(float(np.abs(as_f64(_h(a0)) @ as_f64(_h(b0))).max()), 2.0**14 * 0.9)
        d0 = relu(as_f64(_h(a0)) @ as_f64(_h(b0)))
        c1 = c1 * 2.0**10
        b1 = b1 * _pow2_to(float(np.abs(d0 @ as_f64(_h(b1))).max()), 2.0**14 * 0.9)
    return B2BInputs(case, _h(a0), _h(b0), _h(b1), _h(c1), alpha0, alpha1, beta1)


def b2b_cases(
    m: int, k0: int, n0: int, n1: int, seed: int, batch: int | None = None, cases: tuple[str, ...] = B2B_CASES
) -> Iterator[B2BInputs]:
    """Every case of ``B2B_CASES`` (or ``cases``), each from its own seed drawn from ``seed``."""
    rng = np.random.default_rng(seed)
    for case in cases:
        yield b2b_inputs(m, k0, n0, n1, case, int(rng.integers(2**31)), batch)


@dataclass
class GemmInputs:
    """One input of GEMM + bias + ReLU: FP16 a (m, k), b (k, n), bias (n,)."""

    name: str
    a: np.ndarray
    b: np.ndarray
    bias: np.ndarray

    def args(self) -> tuple:
        return self.a, self.b, self.bias


GEMM_CASES = ("random", "relu zeroes everything", "mixed signs near zero", "large magnitudes", "bias dominates")


def gemm_inputs(m: int, n: int, k: int, case: str = "random", seed: int = 0) -> GemmInputs:
    """Inputs of ``case`` (one of ``GEMM_CASES``); ``bias dominates``: bias +-8 by column, half the columns zero."""
    if case not in GEMM_CASES:
        raise ValueError(f"case must be one of {GEMM_CASES}, got {case!r}")
    rng = np.random.default_rng(seed)
    a, b, bias = rng.standard_normal((m, k)), rng.standard_normal((k, n)) / np.sqrt(k), rng.standard_normal(n) / 2
    if case == "relu zeroes everything":
        a, b, bias = np.abs(a), -np.abs(b), -np.abs(bias)
    elif case == "mixed signs near zero":
        a, b, bias = a / 32, b / 32, bias / 2**10
    elif case == "large magnitudes":
        b = b * _pow2_to(float(np.abs(as_f64(_h(a)) @ as_f64(_h(b))).max()), 2.0**15 * 0.9)
        bias = bias * 2.0**10
    elif case == "bias dominates":
        bias = np.where(rng.random(n) < 0.5, -8.0, 8.0)
    return GemmInputs(case, _h(a), _h(b), _h(bias))


def gemm_cases(m: int, n: int, k: int, seed: int, cases: tuple[str, ...] = GEMM_CASES) -> Iterator[GemmInputs]:
    rng = np.random.default_rng(seed)
    for case in cases:
        yield gemm_inputs(m, n, k, case, int(rng.integers(2**31)))

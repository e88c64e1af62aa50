"""Ozaki-I DGEMM emulation end to end (NumPy reference), its stages for the GPU checkers, and its error bound."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..operands import NONFINITE_SHIFT, InputShapeError, NonFiniteError, check_matrix
from .epilogue import check_nonfinite_policy, reconstruct
from .products import diagonal_sums
from .slicing import check_slices, slice_cols, slice_rows

_U = 2.0**-53  # unit roundoff of FP64


@dataclass(frozen=True)
class OzakiStages:
    """Every intermediate of the emulation, in the layouts the GPU kernels use.

    e: row shifts of A (m,) int32; f: column shifts of B (n,) int32; a_slices: (S, m, k) int8;
    b_slices: (S, n, k) int8, each slice of B transposed (K-contiguous); diagonals: (S, m, n) int32.
    """

    e: np.ndarray
    f: np.ndarray
    a_slices: np.ndarray
    b_slices: np.ndarray
    diagonals: np.ndarray

    @property
    def slices(self) -> int:
        return self.a_slices.shape[0]


def _check_operands(a: object, b: object, slices: object) -> tuple[np.ndarray, np.ndarray, int]:
    """Validate A (m x k) and B (k x n), both float64, and the number of slices."""
    a = check_matrix(a, "A")
    b = check_matrix(b, "B")
    if a.shape[1] != b.shape[0]:
        raise InputShapeError(
            f"inner dimensions differ: A is {a.shape[0]} x {a.shape[1]}, B is {b.shape[0]} x {b.shape[1]}"
        )
    return a, b, check_slices(slices)


def _raise_if_nonfinite(x: np.ndarray, name: str) -> None:
    """NonFiniteError naming the matrix, the count, and the first position and value of its NaN/Inf entries."""
    bad = ~np.isfinite(x)
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise NonFiniteError(
            f"{name} has {int(bad.sum())} non-finite entries (NaN or Inf); the first is {name}[{i}, {j}] = {x[i, j]}. "
            "Clean the input, or pass nonfinite='propagate' to get NaN in the affected rows/columns of C."
        )


def ozaki_stages(a: np.ndarray, b: np.ndarray, slices: int) -> OzakiStages:
    """Run stages 1-3 (shifts, slices, diagonal sums) of C = A @ B; non-finite lines get the sentinel shift."""
    a, b, slices = _check_operands(a, b, slices)
    a_slices, e = slice_rows(a, slices)
    b_slices, f = slice_cols(b, slices)
    return OzakiStages(e, f, a_slices, b_slices, diagonal_sums(a_slices, b_slices))


def ozaki_gemm_ref(
    a: np.ndarray,
    b: np.ndarray,
    slices: int = 7,
    alpha: float = 1.0,
    beta: float = 0.0,
    c: np.ndarray | None = None,
    nonfinite: str = "raise",
) -> np.ndarray:
    """``alpha * A @ B + beta * C`` by Ozaki-I emulation with ``slices`` int8 slices per row of A and column of B.

    A (m x k) and B (k x n) must be float64 (else InputDtypeError) and 2-D with matching inner dimensions (else
    InputShapeError); 1 <= slices <= 12 (else SlicesError); k within ``max_k_int32(slices)`` (else Int32OverflowError).
    With beta == 0, c is not read.

    Non-finite policy: ``nonfinite="raise"`` (default) raises NonFiniteError naming the matrix, the number of
    NaN/Inf entries and the first one. ``nonfinite="propagate"`` returns NaN in every row of C whose row of A holds a
    NaN/Inf and every column whose column of B holds one; the other entries are as if those lines were absent
    (never finite garbage). Note that native GEMM would also spread an Inf times a zero into NaN elsewhere.
    """
    a, b, slices = _check_operands(a, b, slices)
    nonfinite = check_nonfinite_policy(nonfinite)
    if nonfinite == "raise":
        _raise_if_nonfinite(a, "A")
        _raise_if_nonfinite(b, "B")
    st = ozaki_stages(a, b, slices)
    return reconstruct(st.diagonals, st.e, st.f, alpha, beta, c, nonfinite="propagate")


def _dropped_weight(slices: int) -> float:
    """``sum_{d=S}^{2S-2} (2S-1-d) * 2**(-8d)``: the dropped pairs (s, t), s + t = d, per unit of k * 2**(e+f)."""
    return sum((2 * slices - 1 - d) * 2.0 ** (-8 * d) for d in range(slices, 2 * slices - 1))


def error_bound(a: np.ndarray, b: np.ndarray, slices: int = 7) -> np.ndarray:
    """Rigorous elementwise bound (m x n) on ``|ozaki_gemm_ref(a, b, slices) - A @ B|`` (exact A @ B, alpha=1, beta=0).

    With ``e_i``, ``f_j`` the shifts, ``x_hat`` the sliced values, ``A_s``/``B_t`` the digit matrices and
    ``u = 2**-53``, the emulated value is ``fl(sum_{s+t<S} A_s B_t 2**(e_i+f_j-14-8(s+t)))``, and

    1. slicing: ``|a - a_hat| <= 2**(e_i-8S)``, ``|b - b_hat| <= 2**(f_j-8S)`` and ``|a_hat| <= |a| + 2**(e_i-8S)``, so
       ``|A B - A_hat B_hat|_ij <= 2**(e_i-8S) sum_l |b_lj| + 2**(f_j-8S) (sum_l |a_il| + k 2**(e_i-8S))``;
    2. dropped terms: for s + t = d >= S both s, t >= 1, so |digits| <= 128 and ``|(A_s B_t)_ij| <= k 2**14``;
       diagonal d holds 2S-1-d pairs, so they sum to at most ``k 2**(e_i+f_j) sum_{d=S}^{2S-2} (2S-1-d) 2**(-8d)``;
    3. reconstruction: the S-term recursive FP64 sum is off by at most ``gamma_S sum_d |D_d| 2**(-8d)``
       (``gamma_S = S u / (1 - S u)``, times ``2**(e_i+f_j-14)``), and the final ldexp is exact unless the result is
       subnormal, where it adds at most ``2**-1075``.

    The bound is ``1.01 * (1 + 2 + 3) + 4 * 2**-1074``: the factor 1.01 covers the relative rounding of evaluating
    these terms (below k u), the additive term their underflow. Lines of zeros give an exact zero (bound 0).
    Non-finite inputs raise NonFiniteError; k beyond the int32 budget raises Int32OverflowError.
    """
    a, b, slices = _check_operands(a, b, slices)
    _raise_if_nonfinite(a, "A")
    _raise_if_nonfinite(b, "B")
    st = ozaki_stages(a, b, slices)
    k = a.shape[1]
    assert not (st.e == NONFINITE_SHIFT).any() and not (st.f == NONFINITE_SHIFT).any()
    e = st.e.astype(np.int64)[:, None]
    f = st.f.astype(np.int64)[None, :]
    row_sum = np.abs(a).sum(axis=1)[:, None]
    col_sum = np.abs(b).sum(axis=0)[None, :]

    slicing = (
        np.ldexp(col_sum, e - 8 * slices) + np.ldexp(row_sum, f - 8 * slices) + np.ldexp(float(k), e + f - 16 * slices)
    )
    dropped = np.ldexp(k * _dropped_weight(slices), e + f)
    weighted = sum(np.abs(st.diagonals[d].astype(np.float64)) * 2.0 ** (-8 * d) for d in range(slices))
    gamma = slices * _U / (1.0 - slices * _U)
    rounding = np.ldexp(gamma * weighted, e + f - 14) + 2.0**-1075

    bound = 1.01 * (slicing + dropped + rounding) + 4 * 2.0**-1074
    bound[~np.any(a != 0.0, axis=1), :] = 0.0
    bound[:, ~np.any(b != 0.0, axis=0)] = 0.0
    return bound

"""What each Ozaki-II design must do, kernel by kernel, and the time that sets (plain Python, no GPU).

The same accounting as Ozaki-I's (``utilities.roofline``: operations and compulsory bytes per kernel, each
kernel's floor the longer of the two at the measured ceilings, kernels one after another add up). A m x k and
B k x n in FP64, N moduli:

- ``choice`` (automatic count only): A and B each read twice, by rows and by column chunks (the statistics of the
  estimate: each line's norm, its largest magnitude, the exact integers of the scaling, and C's line norms);
- ``scaling``: with a fixed count, B read by column chunks first (each column's exponent; the automatic plan's
  choice found them), then A and B read once more and N int8 residues written per entry;
- ``products``: N int8 GEMMs, int32 out;
- ``digits`` (design "early"): each int32 product read once more and written as a one-byte digit;
- ``reconstruct``: the N digits (design "early") or the N int32 products (design "late") of each entry read, C
  written; design "fused" would reduce and reconstruct inside the GEMM: no int32 product ever written.
"""

from __future__ import annotations

from ..roofline import KernelWork, predicted_ms

VARIANTS = ("early", "late", "fused")

__all__ = ["VARIANTS", "KernelWork", "design", "predicted_ms"]


def design(variant: str, m: int, n: int, k: int, moduli: int, *, auto: bool = False) -> list[KernelWork]:
    """The kernels of one design for C = A @ B, m x n x k with ``moduli`` moduli, in order (``auto``: the choice
    of the count first)."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    for label, v in (("m", m), ("n", n), ("k", k), ("moduli", moduli)):
        if isinstance(v, bool) or int(v) != v or v <= 0:
            raise ValueError(f"{label} must be a positive integer, got {v!r}")
    a, b, c, N = float(m * k), float(k * n), float(m * n), float(moduli)
    kernels = [KernelWork("choice", 0.0, 8.0 * (2 * a + 2 * b))] if auto else []
    kernels.append(KernelWork("scaling", 0.0, 8.0 * (a + b + (0.0 if auto else b)) + N * (a + b)))
    ops = 2.0 * N * m * n * k
    if variant == "fused":
        return [*kernels, KernelWork("fused kernel", ops, N * (a + b) + 8.0 * c)]
    kernels.append(KernelWork("products", ops, N * (a + b) + 4.0 * N * c))
    if variant == "early":
        return [*kernels, KernelWork("digits", 0.0, 5.0 * N * c), KernelWork("reconstruct", 0.0, N * c + 8.0 * c)]
    return [*kernels, KernelWork("reconstruct", 0.0, 4.0 * N * c + 8.0 * c)]

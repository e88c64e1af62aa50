"""What each Ozaki-II design must do, kernel by kernel, and the time that sets (plain Python, no GPU).

The same accounting as Ozaki-I's (``utilities.roofline``: operations and compulsory bytes per kernel, each
kernel's floor the longer of the two at the measured ceilings, kernels one after another add up):

- unfused: scaling and residues (A read once, B read, transposed and read again; N int8 residues written per
  entry), N int8 products with int32 results, and the reconstruction reading all N of them;
- fused: the products and the reconstruction in one kernel, the int32 products never written.
"""

from __future__ import annotations

from ..roofline import KernelWork, predicted_ms

VARIANTS = ("unfused", "fused")

__all__ = ["VARIANTS", "KernelWork", "design", "predicted_ms"]


def design(variant: str, m: int, n: int, k: int, moduli: int) -> list[KernelWork]:
    """The kernels of one design for C = A @ B, m x n x k with ``moduli`` moduli, in order."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    for label, v in (("m", m), ("n", n), ("k", k), ("moduli", moduli)):
        if isinstance(v, bool) or int(v) != v or v <= 0:
            raise ValueError(f"{label} must be a positive integer, got {v!r}")
    residues = float(moduli) * (m * k + k * n)
    scaling = KernelWork("scaling", 0.0, 8.0 * (m * k + 3 * k * n) + residues)
    ops = moduli * 2.0 * m * n * k
    if variant == "fused":
        return [scaling, KernelWork("fused kernel", ops, residues + 8.0 * m * n)]
    middle = 4.0 * moduli * m * n
    products = KernelWork("products", ops, residues + middle)
    return [scaling, products, KernelWork("reconstruct", 0.0, middle + 8.0 * m * n)]

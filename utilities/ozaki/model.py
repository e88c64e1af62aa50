"""What each Ozaki-I design must do, stage by stage, and the time that sets (plain Python, no GPU).

Each kernel of a design has int8 operations (the slice products) and compulsory bytes through device memory
(every input read once, every output written once; tiles re-read from L2 are not counted). A kernel can run no
faster than its work at the measured ceilings: ``max(ops / int8 rate, bytes / bandwidth)``. Kernels that run
one after another add their times, so a design's floor is the **sum** over its kernels, and fusion shows up as
the kernels and the intermediate bytes that disappear:

- unfused: slicing, then S(S+1)/2 products written as int32 matrices, then an epilogue that reads them all;
- partial: slicing, then S anti-diagonals written as int32, then the epilogue;
- fused: slicing, then one kernel that writes only C.
"""

from __future__ import annotations

from ..roofline import KernelWork, predicted_ms

VARIANTS = ("unfused", "partial", "fused")


def design(variant: str, m: int, n: int, k: int, slices: int = 7, *, reads_c: bool = False) -> list[KernelWork]:
    """The kernels of one design (``VARIANTS``) for C = A @ B, m x n x k with ``slices`` slices, in order.

    Slicing reads A and B in FP64 (B twice: its column maxima first) and writes S int8 digits per entry. The
    products read every digit once at least. ``reads_c``: beta != 0, C is read too.
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    for label, v in (("m", m), ("n", n), ("k", k), ("slices", slices)):
        if isinstance(v, bool) or int(v) != v or v <= 0:
            raise ValueError(f"{label} must be a positive integer, got {v!r}")
    terms = slices * (slices + 1) // 2
    ops = terms * 2.0 * m * n * k
    digits = float(slices) * (m * k + k * n)
    c_bytes = 8.0 * m * n * (2 if reads_c else 1)
    kernels = [KernelWork("slicing", 0.0, 8.0 * (m * k + 2 * k * n) + digits)]
    if variant == "fused":
        return [*kernels, KernelWork("fused kernel", ops, digits + c_bytes)]
    planes = terms if variant == "unfused" else slices  # int32 matrices between the products and the epilogue
    middle = 4.0 * m * n * planes
    return [*kernels, KernelWork("products", ops, digits + middle), KernelWork("epilogue", 0.0, middle + c_bytes)]


def design_table(m: int, n: int, k: int, slices: int, int8_tops: float, bandwidth_tbs: float) -> list[dict]:
    """One row per design: total bytes, the summed floor, and the bytes and time fusion saves against unfused."""
    rows = []
    for variant in VARIANTS:
        kernels = design(variant, m, n, k, slices)
        rows.append(
            {
                "design": variant,
                "kernels": len(kernels),
                "GB": sum(w.bytes for w in kernels) / 1e9,
                "floor_ms": predicted_ms(kernels, int8_tops, bandwidth_tbs)["total"],
            }
        )
    base = rows[0]
    for row in rows:
        row["saved_GB"] = base["GB"] - row["GB"]
        row["saved_ms"] = base["floor_ms"] - row["floor_ms"]
    return rows

"""Ozaki-I as the Ozaki-II benchmarks time it beside themselves (GPU; this module imports the Ozaki-I track, so
that the Ozaki-II track need not: its benchmarks take these factories as arguments)."""

from __future__ import annotations

from collections.abc import Callable

from .ozaki.tensorcore import OzakiGemm


def ozaki1_fused(slices: int = 7) -> Callable[[int, int, int], OzakiGemm]:
    """A factory ``(m, n, k) -> plan`` of the fused Ozaki-I with ``slices`` slices (``ozaki2_records(ozaki1=...)``)."""
    return lambda m, n, k: OzakiGemm(m, n, k, slices, "fused")


def ozaki1_auto() -> Callable[[int, int, int], OzakiGemm]:
    """A factory ``(m, n, k) -> plan`` of the fused Ozaki-I that chooses its slices from each call's inputs, from the
    statistics Ozaki-II's choice reads (``ozaki2_records(ozaki1_auto=...)``, ``accuracy_records``)."""
    return lambda m, n, k: OzakiGemm(m, n, k, "auto", "fused")

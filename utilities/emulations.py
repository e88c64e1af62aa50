"""Ozaki-I as the Ozaki-II benchmarks time it beside themselves (GPU; this module imports the Ozaki-I track, so
that the Ozaki-II track need not: its benchmarks take these as arguments)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .ozaki.precision import slices_needed
from .ozaki.tensorcore import OzakiGemm
from .precision import Choice


def ozaki1_fused(slices: int = 7) -> Callable[[int, int, int], OzakiGemm]:
    """A factory ``(m, n, k) -> plan`` of the fused Ozaki-I with ``slices`` slices (``ozaki2_records(ozaki1=...)``)."""
    return lambda m, n, k: OzakiGemm(m, n, k, slices, "fused")


def ozaki1_auto(a: np.ndarray, b: np.ndarray) -> tuple[Any, Choice]:
    """The fused Ozaki-I plan with the fewest slices for these inputs, and the choice (``accuracy_records``)."""
    choice = slices_needed(a, b)
    (m, k), n = a.shape, b.shape[1]
    return OzakiGemm(m, n, k, choice.count, "fused"), choice

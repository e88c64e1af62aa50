"""Automatic precision for Ozaki-II: the fewest moduli whose error estimate is FP64 class.

The estimate is the core's (``utilities.precision``): rows of A are represented with an absolute error below
``2^-mu_i``, columns of B below ``2^-nu_j``, and the exponents for N moduli follow from the lines' exact integer
statistics (``reference.line_terms``) without touching the matrices again: ``mu = floor((t_N + g) / 2)`` with a
``g`` of each line's own (``reference.line_offset``), so every count costs a few vector operations to try, on the
CPU here or on the GPU (``utilities.ozaki2.tensorcore``, ``utilities.precision_gpu``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..bench import BenchRecord
from ..precision import Choice, GemmStats, LineStats, Scheme, choose, estimate, gemm_stats
from . import reference as ref

LOW = 8  # fewer moduli never reach FP64 accuracy on a GEMM worth emulating


def _offsets(lines: LineStats) -> np.ndarray:
    return ref.line_offset(lines.e, lines.s)


SCHEME = Scheme(
    name="Ozaki-II",
    unit="moduli",
    divisor=2,
    offset=lambda count: ref.crt(count).t,
    weight=lambda count: 0.0,
    products=lambda count: count,
    line_offsets=_offsets,
    counts=lambda k: range(LOW, ref.MAX_MODULI + 1),
)


def moduli_estimate(stats: GemmStats, count: int) -> float:
    """The error estimate with ``count`` moduli, in units of u of the worst row's or column's norm."""
    return estimate(stats, SCHEME, count)


def moduli_needed_from(stats: GemmStats, *, low: int = LOW, high: int = ref.MAX_MODULI) -> Choice:
    """The fewest moduli whose estimate meets the target, from the statistics of A's rows and B's columns."""
    return choose(stats, SCHEME, low=low, high=high)


def moduli_needed(a: np.ndarray, b: np.ndarray, *, low: int = LOW, high: int = ref.MAX_MODULI) -> Choice:
    """The fewest moduli whose estimate meets the target, for A (m x k) and B (k x n) (NumPy)."""
    return moduli_needed_from(gemm_stats(a, b), low=low, high=high)


def accuracy_claims(records: Sequence[BenchRecord]) -> list[tuple[str, bool, str]]:
    """What the accuracy runs claim of the automatic counts (``utilities.ozaki2.benchmarks``' records, which 4b and
    ``tools/ozaki2_report.py`` print): for each phi (and k, where a run has several), whether Ozaki-II's (and
    Ozaki-I's) automatic count gave a normwise error no larger than DGEMM's on the same inputs, as (statement,
    held, what was measured). A square run's statements name phi only; a long-K run's (k above m) name k too."""
    out = []
    cases = {(r.k, r.m, r.params["phi"]) for r in records if "phi" in r.params and r.params.get("auto", True)}
    for k, m, phi in sorted(cases):
        at = {r.name: r for r in records if (r.k, r.m, r.params.get("phi")) == (k, m, phi) and r.name != "ozaki2.fixed"}
        dgemm = at["cublas.dgemm"].error["normwise"]
        where = f"phi = {phi}" if k == m else f"phi = {phi}, k = {k} (m = n = {m})"
        for name, unit in (("ozaki2.auto", "moduli"), ("ozaki.auto", "slices")):
            if name in at:
                err = at[name].error["normwise"]
                what = f"{name} at {where}: {at[name].params[unit]} {unit}, {err:.2e} against DGEMM's {dgemm:.2e}"
                out.append((f"{name} no less accurate than DGEMM at {where}", err <= dgemm, what))
    return out

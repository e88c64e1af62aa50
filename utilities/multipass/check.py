"""The checker of the multi-pass exercise: exact int32 for int8, FP32 within its bound for FP16.

A wrong phase loop is reported with the phase it got wrong when the result matches a known mistake (a phase
skipped, repeated, or never prefetched).

Domain (fed on every run, beside random operands): outputs of 3 x 2 and 2 x 3 block tiles (a grid with its axes
swapped fails), the fewest phases the double buffer allows (2), an odd count (3) and many (16); the int8 extremes
(all -128, all 127, mixed: the largest and the most negative sums); for FP16 a NaN in A within the last phase and an
Inf in B within the first, which a skipped or repeated phase shows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from .. import sanitizer
from ..checker import CheckResult, checker, compare, fresh_seed, not_yet, output, passed, plain, untouched
from .reference import CASES, fp32_bound, operands, phase_products, reference

NONFINITE = "a NaN in A's last phase, an Inf in B's first"
TILE = (128, 128)  # the block tile of the course's configurations (PassConfig)


def pass_gemm_shapes(phase_k: int, tile: tuple[int, int] = TILE) -> list[tuple[int, int, int]]:
    """3 x 2 tiles with 2 phases, 2 x 3 tiles with 3 phases, one tile with 16 phases."""
    tm, tn = tile
    return [(3 * tm, 2 * tn, 2 * phase_k), (2 * tm, 3 * tn, 3 * phase_k), (tm, tn, 16 * phase_k)]


def gemm_operands(case: str, m: int, n: int, k: int, dtype: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The operands of ``case``: one of ``reference.CASES``, or :data:`NONFINITE` (FP16)."""
    if case != NONFINITE:
        return operands(case, m, n, k, dtype, seed)
    a, bt = operands("random", m, n, k, dtype, seed)
    rng = np.random.default_rng(seed)
    a[int(rng.integers(m)), k - 1 - int(rng.integers(min(k, 16)))] = np.nan
    bt[int(rng.integers(n)), int(rng.integers(min(k, 16)))] = np.inf
    return a, bt


def _diagnose(got: np.ndarray, parts: np.ndarray, bound: np.ndarray | None = None) -> str:
    """A hint naming the phase error that explains ``got``: a phase skipped, repeated, or shifted, else generic.

    ``bound`` (FP16 track): a candidate explains ``got`` when it lies within the bound of it.
    """
    total = parts.sum(axis=0)

    def close(x: np.ndarray) -> bool:
        return bool(np.array_equal(got, x) if bound is None else (np.abs(got - x) <= bound).all())

    phases = parts.shape[0]
    for g in range(phases):
        if close(total - parts[g]):
            where = "the last phase" if g == phases - 1 else "the first phase" if g == 0 else f"phase {g} of {phases}"
            return f"{where} is missing: the loop must execute every phase g = 0 .. {phases - 1} once"
    for g in range(1, phases):
        if close(total - parts[g] + parts[g - 1]):
            return (
                f"phase {g - 1} is counted twice and phase {g} never: execute the buffer that was just waited for, "
                "then swap the two buffers"
            )
    if close(parts[0]) or close(parts[0] * phases):
        return "only phase 0 reached the accumulator: prefetch phase g + 1 into the other buffer every iteration"
    return (
        "phase g covers K from g * F * PK to (g + 1) * F * PK: check the offset of the prefetch (phase g + 1), "
        "the copy_wait before execute, and the buffer swap"
    )


def _driver(functions: Sequence[Any], dtype: str = "int8", *args: Any, small: bool = False, **kwargs: Any) -> str:
    rows = TILE[0] if small else 2 * TILE[0]  # the smallest case: one block tile, three phases
    return f"""
        import cupy as cp
        from utilities import multipass as mp
        from utilities.multipass.reference import operands
        from utilities.multipass.tensorcore import Kernels, PassGemm
        cfg = mp.PassConfig("{dtype}", fused=2)
        m, n, k = {rows}, {rows}, 3 * cfg.phase_k  # block rows and columns, three phases
        a, bt = operands("random", m, n, k, "{dtype}", 0)
        PassGemm(m, n, k, cfg, kernels=Kernels({sanitizer.kernels_arguments(functions)}))(cp.asarray(a), cp.asarray(bt))
        cp.cuda.runtime.deviceSynchronize()
        """


@checker("multi-pass tile GEMM", driver=_driver, shared=True)
def check_pass_gemm(
    run: Callable[[np.ndarray, np.ndarray], Any],
    dtype: str = "int8",
    *,
    phase_k: int | None = None,
    shapes: Sequence[tuple[int, int, int]] | None = None,
    cases: Iterable[str] | None = None,
    seed: int | None = None,
) -> CheckResult:
    """``run(a, bt)`` returns C = A @ B (B^T given as ``bt``, (n, k)): int32 exact for int8, FP32 within a bound.

    ``run`` takes every shape of ``shapes`` (default: :func:`pass_gemm_shapes` of ``phase_k``, else one 256 x 256 x
    1024 product); ``phase_k`` (F * PK), when given, lets a failure name the phase that went wrong. ``cases``
    default: ``reference.CASES``, and :data:`NONFINITE` for FP16.
    """
    name, seed = f"multi-pass tile GEMM ({dtype})", fresh_seed(seed)
    if shapes is None:
        shapes = pass_gemm_shapes(phase_k) if phase_k else [(256, 256, 1024)]
    if cases is None:
        cases = (*CASES, NONFINITE) if dtype == "float16" else CASES
    count = 0
    for m, n, k in shapes:
        for case in cases:
            a, bt = gemm_operands(case, m, n, k, dtype, seed + count)
            got = output(run(a, bt), "C", f"{case} {m}x{n}x{k}")
            want = reference(a, bt)
            if count == 0 and want.any() and (untouched(got) or untouched(got, float("nan"))):
                return not_yet(name, "C is all zero or was not written")
            exact = dtype == "int8"
            parts = phase_products(a, bt, phase_k) if phase_k and got.shape == want.shape else None
            label = f"{case} {m}x{n}x{k}" + (f", {k // phase_k} phases" if phase_k else "")
            if exact:
                hint = _diagnose(got, parts) if parts is not None and not np.array_equal(got, want) else ""
                compare("C", got, want, names=("row", "col"), case=label, hint=hint or _HINT)
            else:
                bound = fp32_bound(a, bt)
                with np.errstate(invalid="ignore"):
                    bad = not ((np.abs(got.astype(np.float64) - want) <= bound) | (got == want)).all()
                hint = _diagnose(got.astype(np.float64), parts, bound) if parts is not None and bad else ""
                if bad and not hint and case == NONFINITE:
                    hint = (
                        "a NaN or an Inf of one phase is missing from C, or shows where it should not: every "
                        "phase must reach the accumulator exactly once"
                    )
                compare(
                    "C", got, want.astype(np.float32), bound=bound, names=("row", "col"), case=label, hint=hint or _HINT
                )
            count += 1
    domain = f"shapes {plain(list(shapes))}; cases {', '.join(cases)}"
    return passed(name, count, seed, domain)


_HINT = "check which K range each phase loads, and that every phase is executed once from the buffer it was loaded into"

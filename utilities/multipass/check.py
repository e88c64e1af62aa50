"""The checker of the multi-pass exercise: exact int32 for int8, FP32 within its bound for FP16.

A wrong phase loop is reported with the phase it got wrong when the result matches a known mistake (a phase
skipped, repeated, or never prefetched).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from ..checker import CheckResult, checker, compare, fresh_seed, not_yet, passed, untouched
from .reference import CASES, fp32_bound, operands, phase_products, reference


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


@checker("multi-pass tile GEMM")
def check_pass_gemm(
    run: Callable[[np.ndarray, np.ndarray], Any],
    dtype: str = "int8",
    *,
    phase_k: int | None = None,
    shapes: Sequence[tuple[int, int, int]] = ((256, 256, 1024),),
    cases: Iterable[str] = CASES,
    seed: int | None = None,
) -> CheckResult:
    """``run(a, bt)`` returns C = A @ B (B^T given as ``bt``, (n, k)): int32 exact for int8, FP32 within a bound.

    ``phase_k`` (F * PK), when given, lets a failure name the phase that went wrong.
    """
    name, seed = f"multi-pass tile GEMM ({dtype})", fresh_seed(seed)
    count = 0
    for m, n, k in shapes:
        for case in cases:
            a, bt = operands(case, m, n, k, dtype, seed + count)
            got = np.asarray(run(a, bt))
            want = reference(a, bt)
            if count == 0 and want.any() and (untouched(got) or untouched(got, float("nan"))):
                return not_yet(name, "C is all zero or was not written")
            exact = dtype == "int8"
            parts = phase_products(a, bt, phase_k) if phase_k and got.shape == want.shape else None
            if exact:
                hint = _diagnose(got, parts) if parts is not None and not np.array_equal(got, want) else ""
                compare("C", got, want, names=("row", "col"), case=f"{case} {m}x{n}x{k}", hint=hint or _HINT)
            else:
                bound = fp32_bound(a, bt)
                bad = not (np.abs(got.astype(np.float64) - want) <= bound).all()
                hint = _diagnose(got.astype(np.float64), parts, bound) if parts is not None and bad else ""
                compare(
                    "C", got, want.astype(np.float32), bound=bound, names=("row", "col"), case=f"{case} {m}x{n}x{k}",
                    hint=hint or _HINT,
                )  # fmt: skip
            count += 1
    return passed(name, count, seed)


_HINT = "check which K range each phase loads, and that every phase is executed once from the buffer it was loaded into"

"""The checker of the multi-pass exercise: exact int32 for int8, FP32 within its bound for FP16.

A wrong phase loop is reported with the phase it got wrong when the result, recomputed with a known mistake (a phase
skipped, repeated, or never prefetched), matches; otherwise with its first wrong entries alone.

Domain (fed on every run, beside random operands): outputs of 3 x 2 and 2 x 3 block tiles (a grid with its axes
swapped fails), the fewest phases the double buffer allows (2), an odd count (3) and many (17: past a count of 16
written into the loop); the int8 extremes
(all -128, all 127, mixed: the largest and the most negative sums); for FP16 a NaN in A within the last phase and an
Inf in B within the first, which a skipped or repeated phase shows. The race run (racecheck and synccheck) has
memcheck beside it: a prefetch past the end of K reads past A and B into a buffer never executed, which no C shows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from .. import sanitizer
from ..checker import CheckResult, checker, compare, fresh_seed, not_yet, output, passed, plain, untouched
from .config import PASS_K
from .reference import CASES, fp32_bound, operands, phase_products, reference

NONFINITE = "a NaN in A's last phase, an Inf in B's first"
TILE = (128, 128)  # the block tile of the course's configurations (PassConfig)
# The contract's parameters: the PassConfig the notebook checks each dtype at (its fields beside the dtype). Across
# the two, every size the kernel's Matmul takes has two values: the block tile (128 and 64), the threads (256 and
# 128) and the phase depth F * PK (64 and 128 K), so that no index may hold one of them.
CONFIGS = {
    "int8": {"passes": 8, "fused": 2},
    "float16": {"passes": 16, "fused": 8, "tile_m": 64, "tile_n": 64, "threads": 128},
}


MANY_PHASES = 17  # more than 16: a loop that stops prefetching after a count of 16 written into it gives a wrong C


def pass_gemm_shapes(phase_k: int, tile: tuple[int, int] = TILE) -> list[tuple[int, int, int]]:
    """3 x 2 tiles with 2 phases, 2 x 3 tiles with 3 phases, one tile with :data:`MANY_PHASES` phases."""
    tm, tn = tile
    return [(3 * tm, 2 * tn, 2 * phase_k), (2 * tm, 3 * tn, 3 * phase_k), (tm, tn, MANY_PHASES * phase_k)]


def gemm_operands(case: str, m: int, n: int, k: int, dtype: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The operands of ``case``: one of ``reference.CASES``, or :data:`NONFINITE` (FP16)."""
    if case != NONFINITE:
        return operands(case, m, n, k, dtype, seed)
    a, bt = operands("random", m, n, k, dtype, seed)
    rng = np.random.default_rng(seed)
    a[int(rng.integers(m)), k - 1 - int(rng.integers(min(k, 16)))] = np.nan
    bt[int(rng.integers(n)), int(rng.integers(min(k, 16)))] = np.inf
    return a, bt


def _shifted_prefetch(
    a: np.ndarray, bt: np.ndarray, phase_k: int, shift: int, unguarded: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """C of a loop whose prefetch of phase g + 1 starts ``shift`` past (g + 1) phase_k, phase 0 loaded right (exact
    sums: int64, or float64 for FP16), and the entries it determines. K beyond the operands reads zeros (a kernel that
    guards its loads) or, ``unguarded``, what a kernel without a guard reads there: the next row's first entries
    (row-major, leading dimension k); past the array's end nothing is known, so its last row's entries are left out."""
    k = a.shape[1]
    starts = [g * phase_k + (shift if g else 0) for g in range(k // phase_k)]
    end = max(k, max(starts) + phase_k)
    wide = np.int64 if a.dtype == np.int8 else np.float64

    def widened(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """x with columns up to ``end``, and which of its rows read nothing past its end."""
        if not unguarded:
            return np.pad(x.astype(wide), ((0, 0), (0, end - k))), np.ones(x.shape[0], bool)
        flat = x.astype(wide).ravel()
        at = np.arange(x.shape[0])[:, None] * k + np.arange(end)[None, :]
        inside = at < flat.size
        return np.where(inside, flat[np.minimum(at, flat.size - 1)], 0), inside.all(axis=1)

    (wa, known_a), (wb, known_b) = widened(a), widened(bt)
    total = np.zeros((a.shape[0], bt.shape[0]), wide)
    for k0 in starts:
        lo, hi = max(0, k0), max(0, k0 + phase_k)
        if hi > lo:
            total += wa[:, lo:hi] @ wb[:, lo:hi].T
    return total, known_a[:, None] & known_b[None, :]


def _diagnose(
    got: np.ndarray,
    parts: np.ndarray,
    bound: np.ndarray | None = None,
    operands: tuple[np.ndarray, np.ndarray, int, int] | None = None,
) -> str:
    """The hints of the phase mistakes whose C, recomputed, explains ``got``: a phase skipped or repeated, the
    prefetched buffer executed, the prefetch's offset shifted (``operands``: A, B^T, phase_k and the pass depth);
    "" when none does. Where two mistakes give the same C (at two phases, phase 0 counted twice is also a prefetch
    of phase g in place of g + 1), each is named.

    ``bound`` (FP16 track): a candidate explains ``got`` when it lies within the bound of it."""

    def close(x: np.ndarray, known: np.ndarray | None = None) -> bool:
        ok = (got == x) if bound is None else (np.abs(got - x) <= bound)
        return bool(ok.all() if known is None else (ok | ~known).all() and known.any())

    hints = (_phase_hint(parts, close), _offset_hint(operands, close) if operands is not None else "")
    return "; or ".join(hint for hint in hints if hint)


def _phase_hint(parts: np.ndarray, close: Callable[[np.ndarray], bool]) -> str:
    """The first phase mistake (:func:`_diagnose`) whose C ``close`` accepts: a phase skipped or counted twice, only
    phase 0 accumulated, or the prefetched buffer executed; "" when none is."""
    total = parts.sum(axis=0)
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
    if phases > 2 and close(total - parts[0] + parts[phases - 2]):
        return (
            "phase 0 never reached the accumulator and phase P - 2 twice: each iteration executed the buffer being "
            "prefetched (phase g + 1), not the one just waited for (phase g)"
        )
    return ""


def _offset_hint(operands: tuple[np.ndarray, np.ndarray, int, int], close: Callable[..., bool]) -> str:
    """The prefetch offset, shifted by a half or whole phase or pass, whose C (:func:`_shifted_prefetch`, a kernel with
    or without a guard past K) ``close`` accepts; "" when none is."""
    a, bt, phase_k, pass_k = operands
    for shift in sorted({-phase_k, -phase_k // 2, phase_k // 2, pass_k, -pass_k}):
        if shift and any(close(*_shifted_prefetch(a, bt, phase_k, shift, unguarded)) for unguarded in (False, True)):
            return (
                f"the prefetch of phase g + 1 loads K from (g + 1) F PK {'+' if shift > 0 else '-'} {abs(shift)}: "
                "the offset of the prefetch is (g + 1) * F * PK, where phase g + 1 starts"
            )
    return ""


def _driver(functions: Sequence[Any], dtype: str = "int8", *args: Any, small: bool = False, **kwargs: Any) -> str:
    tile = kwargs.get("tile") or TILE
    rows = tile[0] if small else 2 * tile[0]  # the smallest case: one block tile, three phases
    fields = dict(kwargs.get("config") or CONFIGS.get(dtype, {"fused": 2}))
    return f"""
        import cupy as cp
        from utilities import multipass as mp
        from utilities.multipass.reference import operands
        from utilities.multipass.tensorcore import Kernels, PassGemm
        from utilities.sanitizer import announce
        cfg = mp.PassConfig("{dtype}", **{fields!r})
        m, n, k = {rows}, {rows}, 3 * cfg.phase_k  # block rows and columns, three phases
        a, bt = (cp.asarray(x) for x in operands("random", m, n, k, "{dtype}", 0))
        announce(A=a, B=bt)  # memcheck's report on a read past one of them names it
        PassGemm(m, n, k, cfg, kernels=Kernels({sanitizer.kernels_arguments(functions)}))(a, bt)
        cp.cuda.runtime.deviceSynchronize()
        """


def _contract(args: tuple, kwargs: dict) -> list[tuple[tuple, dict]]:
    """The driver's arguments for each dtype of :data:`CONFIGS` (the notebook checks both, each at its block)."""
    return [
        ((dtype, *args[1:]), {"tile": (fields.get("tile_m", TILE[0]), fields.get("tile_n", TILE[1]))})
        for dtype, fields in CONFIGS.items()
    ]


@checker("multi-pass tile GEMM", driver=_driver, shared=True, contract=_contract, bounds=True)
def check_pass_gemm(
    run: Callable[[np.ndarray, np.ndarray], Any],
    dtype: str = "int8",
    *,
    phase_k: int | None = None,
    tile: tuple[int, int] = TILE,
    config: dict[str, int] | None = None,
    shapes: Sequence[tuple[int, int, int]] | None = None,
    cases: Iterable[str] | None = None,
    seed: int | None = None,
) -> CheckResult:
    """``run(a, bt)`` returns C = A @ B (B^T given as ``bt``, (n, k)): int32 exact for int8, FP32 within a bound.

    ``run`` takes every shape of ``shapes`` (default: :func:`pass_gemm_shapes` of ``phase_k`` and the plan's block
    ``tile``, else one 256 x 256 x 1024 product); ``phase_k`` (F * PK), when given, lets a failure name the phase
    that went wrong; ``config``: the plan's PassConfig fields (default: :data:`CONFIGS`), which the race run builds.
    ``cases`` default: ``reference.CASES``, and :data:`NONFINITE` for FP16.
    """
    name, seed = f"multi-pass tile GEMM ({dtype})", fresh_seed(seed)
    if shapes is None:
        shapes = pass_gemm_shapes(phase_k, tile) if phase_k else [(256, 256, 1024)]
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
            operands = (a, bt, phase_k, PASS_K[dtype]) if phase_k else None
            if exact:
                wrong = parts is not None and got.shape == want.shape and not np.array_equal(got, want)
                hint = _diagnose(got, parts, None, operands) if wrong else ""
                compare("C", got, want, names=("row", "col"), case=label, hint=hint)
            else:
                bound = fp32_bound(a, bt)
                with np.errstate(invalid="ignore"):
                    bad = not ((np.abs(got.astype(np.float64) - want) <= bound) | (got == want)).all()
                hint = _diagnose(got.astype(np.float64), parts, bound, operands) if parts is not None and bad else ""
                compare("C", got, want.astype(np.float32), bound=bound, names=("row", "col"), case=label, hint=hint)
            count += 1
    domain = f"shapes {plain(list(shapes))}; cases {', '.join(cases)}"
    return passed(name, count, seed, domain)

"""The checker of the primer's exercise: one tile of C per block, loaded, multiplied and stored.

The inputs are integers in FP16 (``reference``), so the product is exact in FP32 and every entry of C must equal
the reference; one case takes them large enough that C passes 2048, beyond FP16's integers, so that a C rounded to
FP16 before the store fails. A wrong result is named where the checker tested the cause: tiles still holding the
poison (never stored), an accumulator that stayed zero or counted the product twice, C rounded to FP16 (each
recomputed); else the wrong tiles and entries alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from .. import sanitizer
from ..checker import CheckResult, checker, compare, fresh_seed, not_yet, output, passed, untouched
from .reference import CASES, operands, product

NAME = "tile GEMM"
# The contract's parameters: the blocks (TileConfig's fields) the exercise's kernel is checked at, two values of every
# field its Matmul takes, at 256 x 384 (2 x 3 tiles of the course's block, 4 x 6 of the other): no index may hold one
# tile's size. The course's block (TILE_CONFIG) last.
CONFIGS = (
    {"tile_m": 64, "tile_n": 64, "tile_k": 32, "threads": 64},
    {"tile_m": 128, "tile_n": 128, "tile_k": 64, "threads": 128},
)
ORDER = "copy(a_tile, sa), copy(b_tile, sb), copy_wait(), MM.execute(sa, sb, acc), then the store"
STORE = "acc.partition_and_copy(acc.get_results(), c_tile)"


def tiles_where(mask: np.ndarray, tile: tuple[int, int]) -> list[tuple[int, int]]:
    """The (block row, block column) of every tile of C in which ``mask`` holds somewhere."""
    tm, tn = tile
    rows, cols = mask.shape[0] // tm, mask.shape[1] // tn
    blocks = mask[: rows * tm, : cols * tn].reshape(rows, tm, cols, tn).any(axis=(1, 3))
    return [(int(i), int(j)) for i, j in np.argwhere(blocks)]


def diagnose(got: np.ndarray, want: np.ndarray, tile: tuple[int, int]) -> tuple[str, str]:
    """The stage that explains a wrong C, and a hint for it."""
    unwritten = np.isnan(got)
    if unwritten.any():
        where = tiles_where(unwritten, tile)
        return "store", (
            f"the tiles (block row, block column) {where} of C were not written: every block stores its "
            f"accumulator with {STORE}"
        )
    if want.any() and not got.any():
        return "execute", (
            "C is all zero: nothing reached the accumulator. MM.execute(sa, sb, acc) multiplies the tiles in "
            "shared memory into it, after copy_wait()"
        )
    with np.errstate(over="ignore"):
        fp16 = want.astype(np.float16).astype(np.float32)
    if np.array_equal(got, fp16):
        return "store", "C was rounded to FP16 before its store: C is FP32, and FP16 holds the integers up to 2048 only"
    nonzero = (want != 0) & np.isfinite(got)
    if nonzero.any():
        ratio = got[nonzero] / want[nonzero]
        times = float(ratio[0])
        if times == round(times) and times >= 2 and np.all(ratio == times) and not got[want == 0].any():
            return "execute", f"C is {int(times)} times A @ B: run MM.execute once per tile"
    wrong = tiles_where(got != want, tile)
    total = (got.shape[0] // tile[0]) * (got.shape[1] // tile[1])
    if 0 < len(wrong) < total:
        return "C", f"the tiles (block row, block column) {wrong} are wrong and the others right"
    return "C", ""


def _driver(
    functions: Sequence[Any],
    *args: Any,
    shape: tuple[int, int, int] = (256, 384, 64),
    small: bool = False,
    **kwargs: Any,
) -> str:
    m, n, _ = shape
    if small:  # one block: one tile of C
        m, n = kwargs.get("tile", (128, 128))
    block = kwargs.get("block")
    cfg = f"TileConfig(**{dict(block)!r})" if block else "None"
    return f"""
        import cupy as cp
        from utilities.primer.reference import operands
        from utilities.plans import TileConfig
        from utilities.primer.tensorcore import Kernels, TileGemm
        plan = TileGemm({m}, {n}, cfg={cfg}, kernels=Kernels({sanitizer.kernels_arguments(functions)}))
        a, b = operands("random", {m}, {n}, plan.k, 0)
        plan(cp.asarray(a), cp.asarray(b))
        cp.cuda.runtime.deviceSynchronize()
        """


def _contract(args: tuple, kwargs: dict) -> list[tuple[tuple, dict]]:
    """The driver's arguments at each block of :data:`CONFIGS` (the notebook checks every one at one M x N)."""
    return [(args, {**kwargs, "block": dict(c), "tile": (c["tile_m"], c["tile_n"])}) for c in CONFIGS]


@checker(NAME, driver=_driver, shared=True, contract=_contract)
def check_tile_gemm(
    run: Callable[[np.ndarray, np.ndarray], Any],
    *,
    shape: tuple[int, int, int] = (256, 384, 64),
    tile: tuple[int, int] = (128, 128),
    block: dict[str, int] | None = None,
    cases: Iterable[str] = CASES,
    seed: int | None = None,
) -> CheckResult:
    """``run(a, b)`` returns C = A @ B (FP32, (m, n)) from the attendee's kernel, into a C poisoned with NaN.

    ``shape`` (m, n, k) spans several tiles along both axes, more along n than along m, so that a kernel that
    mixes up its block indices shows; ``tile`` is the kernel's (TM, TN); ``block`` the plan's TileConfig fields (the
    contract's two: :data:`CONFIGS`), which the race run builds.
    """
    seed = fresh_seed(seed)
    m, n, k = shape
    count = 0
    for case in cases:
        a, b = operands(case, m, n, k, seed + count)
        got = output(run(a, b), "C", case)
        want = product(a, b)
        if count == 0 and untouched(got, float("nan")):
            return not_yet(NAME, f"C was not written: the store is {STORE}")
        if got.shape == want.shape and got.dtype == want.dtype and not np.array_equal(got, want):
            stage, hint = diagnose(got, want, tile)
            compare(stage, got, want, names=("row", "col"), hint=hint, case=case)
        compare("C", got, want, names=("row", "col"), case=case)
        count += 1
    return passed(NAME, count, seed)

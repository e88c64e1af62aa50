"""Checkers of the block-resident fusion track (notebooks 2a and 2b), built on ``utilities.checker``.

Each checker runs the attendee's code on fresh random inputs (the seed is printed; replay with ``seed=``) and
on adversarial ones (``reference.B2B_CASES`` / ``GEMM_CASES``), compares every stage it can see with the FP64
reference within the derived bound (``reference.b2b_bound``), and either prints a pass line, prints "not
implemented yet" for an untouched skeleton, or raises ``CheckFailure`` naming the stage (``d0``, ``d1``, which
batch), the first wrong indices with got/expected values, and a hint found by testing the usual mistakes
(ReLU missing, beta1*C1 missing, alpha applied twice, a block reading another block's rows, ...).

Domain, fed on every run beside the random inputs:
- GEMM + bias + ReLU: the plan's shape (the notebook's has 3 x 2 block tiles, so that a swapped grid or a bias
  read by row fails), every pre-activation negative, values near zero (FP16 subnormals), near FP16's overflow, a
  bias that dominates, a bias that nearly cancels the sum (the FP32 accumulator rounded to FP16 before the bias
  shows), and non-finite values: a NaN in A, an Inf in B, +-Inf and NaN in the bias (ReLU of NaN may be NaN or 0);
- back-to-back GEMM: the plan's shape, batched or not, the cases of ``reference.B2B_CASES`` with a C1 full of NaN
  when beta1 = 0 (it must not be read: the failure then says "C1 was read although beta1 = 0"), a negative alpha0
  (ReLU before alpha0 shows), a C1 that cancels alpha1 D0 B1 to 2^-11 of it (a rounding to FP16 before beta1 C1 is
  added shows), an Inf and a -Inf in C1 with beta1 != 0, and alpha0, alpha1 and beta1 each 0 and not in every
  combination (alpha0 = 0: D0 = 0; alpha1 = 0: D1 = relu(beta1 C1); an early exit must still write
  them). With D0 kept, D1 is held to the 1x1 GEMM of the
  GPU's own D0 within the second stage's rounding alone (``reference.d1_from_d0``), not D0's error besides.

Outputs handed back from a guard band (``utilities.guard``) fail the stage when the kernel wrote outside them. A
hint names a mistake only when its result, computed, matches the kernel's (``_diagnose``). A plan that does not keep
D0 (``B2B_CONFIGS[0]``, no ``stages``) still has its first epilogue checked: a wrong D1 that one of that epilogue's
mistakes gives (its D1 computed, within the bound ``reference.b2b_bound`` derives for it) fails stage
``d0 (inferred from D1: this plan does not keep D0)`` with the D0 stage's words (``_inferred_d0``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import numpy as np

from .. import sanitizer
from ..checker import (
    CheckFailure,
    CheckResult,
    c_read_when_beta_is_zero,
    checker,
    compare,
    fresh_seed,
    not_yet,
    output,
    passed,
    untouched,
)
from . import reference as ref

B2B_SHAPE = (256, 576, 64, 128)  # m, k0, n0, n1: example 13's K0, N0, N1 on a few row tiles
GEMM_SHAPE = (256, 256, 256)  # m, n, k: two block columns of a 128-wide tile
BATCH = 3

# The contract's parameters: the blocks (BlockConfig's fields) each kernel exercise is checked at, two values of every
# field its factory's Matmul takes (tile sizes, threads), so that no size held in an index passes. 2a: the course's
# block (EPILOGUE_BLOCK) and a smaller one, at 2a's 384 x 256 x 192 (3 x 2 and 6 x 4 block tiles, 3 and 6 K stages).
GEMM_CONFIGS = (
    {"tile_m": 64, "tile_n": 64, "tile_k": 32, "threads": 64},
    {"tile_m": 128, "tile_n": 128, "tile_k": 64, "threads": 128},
)
# 2b: the notebook's plan (the default block for its shape: 128 rows, K tile 64, 128 threads; N0 64, N1 128; D0 kept)
# and a second one whose every size differs: rows 64, K tile 32, 256 threads, N0 128, N1 64, D0 not kept.
B2B_CONFIGS = (
    {"shape": (256, 288, 128, 64), "block": {"tile_m": 64, "tile_k": 32, "threads": 256}, "keep_d0": False},
    {"shape": B2B_SHAPE, "block": {"tile_m": 128, "tile_k": 64, "threads": 128}, "keep_d0": True},
)


def _within(got: np.ndarray, want: np.ndarray, bound: np.ndarray, share: float = 0.99) -> bool:
    """True when at least ``share`` of the entries of ``got`` lie within ``bound`` of ``want``."""
    with np.errstate(invalid="ignore", over="ignore"):
        ok = (np.abs(got.astype(np.float64) - want) <= bound) | (got == want)
    return bool(ok.mean() >= share)


def _structure_hint(got: np.ndarray, want: np.ndarray, bound: np.ndarray, what: str) -> str:
    """What the wrong entries are, where it is a fact: NaN (the poison) where the result is finite, negative values
    (no ReLU gives one), whole rows or whole columns wrong and the others right; no guess at a cause."""
    g = got.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        bad = ~(np.abs(g - want) <= bound)
    if (np.isnan(g) & ~np.isnan(want)).any():
        return f"{what} holds NaN where the result is finite: the poison it was handed in, never overwritten there"
    if (g < 0).any():
        return f"ReLU missing: {what} has negative values, which no ReLU gives"
    flat = bad.reshape(-1, bad.shape[-2], bad.shape[-1])
    for axis, what_lines in ((2, "rows"), (1, "columns")):
        hit = flat.any(axis=(0, axis))  # lines (rows or columns) with a wrong entry
        share = flat.mean(axis=(0, axis))
        if 0 < hit.sum() < hit.size and share[hit].mean() > 0.25:
            lines = np.flatnonzero(hit)
            return f"{what_lines} {lines[0]}..{lines[-1]} ({len(lines)} of {hit.size}) are wrong, the others right"
    return ""


def _wrong(got: np.ndarray, want: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """The entries of ``got`` farther than ``bound`` from ``want`` (equal values, infinities too, are right)."""
    with np.errstate(invalid="ignore", over="ignore"):
        return ~((np.abs(got.astype(np.float64) - want) <= bound) | (got == want))


def _explains(
    got: np.ndarray, want: np.ndarray, bound: np.ndarray, value: np.ndarray, slack: np.ndarray, wrong: np.ndarray
) -> bool:
    """Whether ``value`` (a known mistake's result, within ``slack``) explains ``got``: it matches ``got`` almost
    everywhere and at almost every ``wrong`` entry, where it is wrong too (so the right result never explains)."""
    if not wrong.any() or not _within(got, value, slack):
        return False
    return _within(got[wrong], value[wrong], slack[wrong]) and not _within(value[wrong], want[wrong], bound[wrong], 0.5)


def _diagnose(
    got: np.ndarray, bound: np.ndarray, candidates: dict[str, np.ndarray], want: np.ndarray, what: str
) -> str:
    """The hint of the first candidate (a known mistake's result) that explains ``got`` (:func:`_explains`); else a
    structural hint."""
    wrong = _wrong(got, want, bound)
    for hint, value in candidates.items():
        value = np.where(np.isnan(value) & ~np.isnan(want), got.astype(np.float64), value)  # NaN: unknown there
        slack = bound + 4 * ref.U16 * np.abs(value)  # the bound was derived for ``want``, not for ``value``
        if _explains(got, want, bound, value, slack, wrong):
            return hint
    return _structure_hint(got, want, bound, what)


# ------------------------------------------------------------------------------------------------------------
# Back-to-back GEMM
# ------------------------------------------------------------------------------------------------------------


def _first_epilogues(x: ref.B2BInputs, r: ref.B2BReference) -> dict[str, tuple[np.ndarray, float]]:
    """The first epilogue's usual mistakes: hint -> (the D0 it gives, in FP64; the factor its FP32 rounding of the
    accumulator carries, alpha0's place in ``reference.b2b_bound``)."""
    a0, a1 = float(x.alpha0), float(x.alpha1)
    return {
        "ReLU missing in the first epilogue: D0 = relu(alpha0 * acc)": (a0 * r.p0, a0),
        "alpha0 missing: D0 = relu(alpha0 * acc)": (ref.relu(r.p0), 1.0),
        "ReLU applied before alpha0: alpha0 * relu(acc) (with a negative alpha0 the order shows): scale first, "
        "then ReLU": (a0 * ref.relu(r.p0), a0),
        "alpha0 applied twice": (ref.relu(a0 * a0 * r.p0), a0 * a0),
        "alpha1 used instead of alpha0": (ref.relu(a1 * r.p0), a1),
    }


def _d0_candidates(x: ref.B2BInputs, r: ref.B2BReference) -> dict[str, np.ndarray]:
    return {hint: d0 for hint, (d0, _) in _first_epilogues(x, r).items()}


def _inferred_d0(x: ref.B2BInputs, r: ref.B2BReference, got: np.ndarray, want: np.ndarray, bound: np.ndarray) -> str:
    """Where D0 is not kept: the hint of the first mistake of the first epilogue whose D1 explains ``got`` (the
    second stage right on that mistake's D0, within the bound ``reference.b2b_bound`` derives for it, which counts
    the FP16 store of D0 and the FP32 sums), or ""."""
    b1, c = x.b1.astype(np.float64), x.c1.astype(np.float64)
    wrong = _wrong(got, want, bound)
    for hint, (d0, scale) in _first_epilogues(x, r).items():
        with np.errstate(over="ignore", invalid="ignore"):
            d1 = ref.relu(float(x.alpha1) * (d0 @ b1) + float(x.beta1) * c)
            _, slack = ref.b2b_bound(x.a0, x.b0, x.b1, x.c1, scale, x.alpha1, x.beta1, np.abs(d0), d1, r.p0)
        d1 = np.where(np.isnan(d1) & ~np.isnan(want), got.astype(np.float64), d1)  # NaN: unknown there
        if _explains(got, want, bound, d1, slack, wrong):
            return hint
    return ""


def _d1_candidates(x: ref.B2BInputs, r: ref.B2BReference) -> dict[str, np.ndarray]:
    a0, a1, b1 = float(x.alpha0), float(x.alpha1), float(x.beta1)
    y0b1 = r.d0 @ x.b1.astype(np.float64)
    c = x.c1.astype(np.float64)
    with np.errstate(over="ignore"):
        early = (a1 * y0b1).astype(np.float16).astype(np.float64)
    out = {
        "ReLU missing in the second epilogue: D1 = relu(alpha1 * acc + beta1 * C1)": r.p1,
        "alpha1 * acc1 was rounded to FP16 before beta1 * C1 was added (where beta1 C1 cancels it, that rounding "
        "shows): add in FP32 and round once, at the store": ref.relu(early + b1 * c),
        "beta1*C1 missing: D1 = relu(alpha1 * acc + beta1 * C1)": ref.relu(a1 * y0b1),
        "C1 added without beta1": ref.relu(a1 * y0b1 + c),
        "alpha1 missing: D1 = relu(alpha1 * acc + beta1 * C1)": ref.relu(y0b1 + b1 * c),
        "alpha1 applied twice": ref.relu(a1 * a1 * y0b1 + b1 * c),
        "alpha1 also scales C1: alpha1 * (acc + beta1 * C1)": ref.relu(a1 * (y0b1 + b1 * c)),
        "alpha0 applied again in the second GEMM": ref.relu(a0 * a1 * y0b1 + b1 * c),
    }  # without D0 kept, a wrong first epilogue is inferred from D1 (``_inferred_d0``)
    return out


def _b2b_not_written(got: np.ndarray, kept: dict[str, np.ndarray]) -> str:
    if "d0" in kept and (untouched(kept["d0"]) or untouched(kept["d0"], float("nan"))):
        return "stage 'd0' was not written"
    if untouched(got) or untouched(got, float("nan")):
        return "D1 is all zero or was not written"
    return ""


def _own_d0(x: ref.B2BInputs, r: ref.B2BReference, d0: np.ndarray) -> ref.B2BReference:
    """``r`` with D1's stage from the GPU's own D0 (``reference.d1_from_d0``): D1's bound is then the second stage's
    rounding alone, not D0's error besides, so a rounding at the wrong step of the second epilogue shows."""
    p1, d1, bound = ref.d1_from_d0(d0, x.b1, x.c1, x.alpha1, x.beta1)
    return dataclasses.replace(r, d0=d0.astype(np.float64), p1=p1, d1=d1, bound_d1=bound)


def _check_b2b_case(x: ref.B2BInputs, got: np.ndarray, kept: dict[str, np.ndarray], batched: bool, label: str) -> None:
    r = ref.b2b_ref(*x.args())
    got = np.asarray(got)
    names = ("batch", "row", "col") if batched else ("row", "col")
    batches = range(x.a0.shape[0]) if batched else [None]
    stages = [("d0", kept.get("d0"), r.d0, r.bound_d0, _d0_candidates)] if "d0" in kept else []
    if "d0" in kept and np.shape(kept["d0"]) == r.d0.shape:
        r = _own_d0(x, r, np.asarray(kept["d0"]))  # D0 passed first: D1 is held to its own stage's bound
    stages.append(("d1", got, r.d1, r.bound_d1, _d1_candidates))
    for stage, value, want, bound, candidates in stages:
        value = np.asarray(value)
        if value.shape != want.shape:
            compare(stage, value, want, names=names, case=label)  # reports the shape
        if value.dtype != np.float16:
            raise CheckFailure(stage, f"stage '{stage}' on input '{label}': dtype {value.dtype}, expected float16")
        for b in batches:
            sel = (slice(None),) if b is None else (b,)
            g, w, bd = value[sel], want[sel], bound[sel]
            if _within(g, w, bd, share=1.0):
                continue
            xb = x if b is None else ref.B2BInputs(x.name, *(t[b] for t in x.args()[:4]), *x.args()[4:])
            rb = r if b is None else ref.B2BReference(*(getattr(r, f)[b] for f in r.__dataclass_fields__))
            named = candidates(xb, rb)
            hint = _diagnose(g, bd, named, w, stage.upper())
            first = _inferred_d0(xb, rb, g, w, bd) if stage == "d1" and "d0" not in kept else ""
            if first and hint in named:  # a second-epilogue mistake explains D1 as well
                hint, first = f"{hint}; or, in the first epilogue (D0 is not kept to tell): {first}", ""
            if b is not None and not hint:
                other = next((o for o in batches if o != b and _within(g, want[o], bound[o])), None)
                if other is not None:
                    hint = f"batch {b} holds the result of batch {other}: offset every operand by the batch index"
            where = stage if b is None else f"{stage} (batch {b})"
            try:
                compare(
                    where,
                    value,
                    want,
                    bound=bound if b is None else _only(bound, b),
                    names=names,
                    hint=first or hint,
                    case=f"{label}, alpha0={x.alpha0}, alpha1={x.alpha1}, beta1={x.beta1}",
                )
            except CheckFailure as failure:
                if not first:
                    raise
                _raise_inferred(failure, b)


def _raise_inferred(failure: CheckFailure, b: int | None) -> NoReturn:
    """Raise D1's ``failure``, whose hint names a mistake of the first epilogue, as a failure of stage 'd0': D1 pins
    it there, and the stage tells the attendee where to look."""
    where = "d0 (" + ("" if b is None else f"batch {b}, ") + "inferred from D1: this plan does not keep D0)"
    raise CheckFailure(
        where, f"stage '{where}': D1 is what a mistake in the first epilogue gives (the hint names it)\n{failure}"
    ) from None


def _only(bound: np.ndarray, b: int) -> np.ndarray:
    """``bound`` with every batch but ``b`` made infinite, so that the report lists batch ``b``'s entries."""
    out = np.full_like(bound, np.inf)
    out[b] = bound[b]
    return out


# D0 is written by the first TODO region (its epilogue); D1 needs all four
B2B_NEEDS = {"d0": 1}


def small_rows(m: int) -> int:
    """The rows of a check's smallest case: one or two row tiles (128 rows: a multiple of every row tile the plans
    choose), or ``m`` itself where it is no multiple of 128."""
    return 128 if m % 128 == 0 else m


def _b2b_driver(
    functions: Sequence[Any],
    *args: Any,
    shape: Sequence[int] = B2B_SHAPE,
    small: bool = False,
    block: dict[str, int] | None = None,
    **kwargs: Any,
) -> str:
    batch = kwargs.get("batch", BATCH) if kwargs.get("batched") else None
    if small:  # 128 rows, every K stage of GEMM 0; no batch (the batched plan runs the same kernel)
        shape, batch = (small_rows(int(shape[0])), *shape[1:]), None
    keep = kwargs.get("keep_d0", kwargs.get("stages") is not None)  # a check keeps D0 where it compares it
    return f"""
        import cupy as cp
        from utilities.fusion import reference as ref
        from utilities.fusion.tensorcore import BackToBack, BlockConfig, Kernels
        shape = {tuple(int(v) for v in shape)}
        x = ref.b2b_inputs(*shape, "random", 0, {batch})
        kernels = Kernels({sanitizer.kernels_arguments(functions)})
        cfg = {f"BlockConfig(**{dict(block)!r})" if block else None}
        plan = BackToBack(*shape, batch={batch}, keep_d0={keep}, cfg=cfg, kernels=kernels)
        for beta1 in (0.0, -0.5):  # both epilogues: C1 read and not
            plan(*(cp.asarray(v) for v in x.args()[:4]), -0.75, 1.25, beta1)
        cp.cuda.runtime.deviceSynchronize()
        """


def _b2b_contract(args: tuple, kwargs: dict) -> list[tuple[tuple, dict]]:
    """The driver's arguments at each plan of :data:`B2B_CONFIGS` (shape, block, whether D0 is kept), as 2b checks
    them: the other plan with its block, the notebook's with its default."""
    first, *rest = B2B_CONFIGS
    plans = [{"shape": first["shape"], "block": dict(first["block"]), "keep_d0": first["keep_d0"]}]
    return [((), p) for p in plans + [{"shape": c["shape"], "keep_d0": c["keep_d0"]} for c in rest]]


@checker("back-to-back GEMM", needs=B2B_NEEDS, driver=_b2b_driver, shared=True, contract=_b2b_contract)
def check_back_to_back(
    run: Callable[..., Any],
    *,
    stages: Callable[[], dict[str, Any]] | None = None,
    batched: bool = False,
    shape: Sequence[int] = B2B_SHAPE,
    batch: int = BATCH,
    block: dict[str, int] | None = None,
    seed: int | None = None,
    cases: Sequence[str] = ref.B2B_CASES,
) -> CheckResult:
    """``run(a0, b0, b1, c1, alpha0, alpha1, beta1)`` returns D1 (NumPy FP16); ``stages()`` returns ``{"d0": D0}``.

    ``shape`` is ``(m, k0, n0, n1)`` of the plan that ``run`` calls, ``block`` its BlockConfig's fields (None: the
    plan's default; the contract's two are :data:`B2B_CONFIGS`); ``batched=True`` gives every operand a leading axis
    of ``batch``. D0 is compared first when ``stages`` is given, so that a wrong first epilogue is reported as a wrong
    D0 rather than as a wrong D1.
    """
    name, seed = "back-to-back GEMM" + (f" (batched x{batch})" if batched else ""), fresh_seed(seed)
    if block:
        name += " (" + ", ".join(f"{key} {value}" for key, value in block.items()) + ")"
    m, k0, n0, n1 = (int(s) for s in shape)
    count = 0
    inputs = list(ref.b2b_cases(m, k0, n0, n1, seed, batch if batched else None, tuple(cases)))
    inputs += [*b2b_corners(inputs[0], seed), _infinite_c1(inputs[0])]
    for x in inputs:
        handed = x.args()
        if float(x.beta1) == 0.0:  # C1 must not be read: hand it over full of NaN
            handed = (*handed[:3], np.full_like(x.c1, np.nan), *handed[4:])
        label = f"{x.name} {m}x{k0}x{n0}x{n1}"
        got = output(run(*(a.copy() if isinstance(a, np.ndarray) else a for a in handed)), "d1", label)
        kept = {k: np.asarray(v) for k, v in (stages() if stages is not None else {}).items()}
        if float(x.beta1) == 0.0:

            def rerun(x: ref.B2BInputs = x) -> Any:
                args = [a.copy() if isinstance(a, np.ndarray) else a for a in x.args()]
                args[3] = np.zeros_like(x.c1)
                return run(*args)

            names = ("batch", "row", "col") if batched else ("row", "col")
            want = ref.b2b_ref(*x.args()).d1
            c_read_when_beta_is_zero("d1", got, want, rerun, c_name="C1", beta_name="beta1", names=names, case=label)
        if count == 0:
            blank = _b2b_not_written(got, kept)
            if blank:
                return not_yet(name, blank)
        _check_b2b_case(x, got, kept, batched, label)
        count += 1
    domain = f"shape (m, k0, n0, n1) = {(m, k0, n0, n1)}; cases {', '.join(x.name for x in inputs)}"
    return passed(name, count, seed, domain)


def b2b_corners(x: ref.B2BInputs, seed: int) -> list[ref.B2BInputs]:
    """Inputs that make the order of each epilogue's steps visible (beside ``reference.B2B_CASES``):

    - a negative alpha0: D0 = relu(alpha0 acc0) is nonzero where acc0 < 0, so ReLU before alpha0 shows;
    - a C1 that cancels alpha1 D0 B1 (C1 = -(alpha1 / beta1) D0 B1 from D0 as the GPU rounds it, itself rounded
      to FP16): D1 is about 2^-11 of its terms, so rounding alpha1 acc1 to FP16 before adding beta1 C1 shows;
    - alpha0, alpha1 and beta1 zero: with the cases above every combination of the three, zero or not, is met.
    """
    rng = np.random.default_rng(seed)
    negative = dataclasses.replace(x, name="a negative alpha0", alpha0=-0.75, alpha1=1.25, beta1=-0.5)
    zeros = [  # alpha0, alpha1 and beta1 zero and not, in every combination the other cases do not meet
        dataclasses.replace(x, name=f"alpha0 = {a0}, alpha1 = {a1}, beta1 = {b1}", alpha0=a0, alpha1=a1, beta1=b1)
        for a0, a1, b1 in ((0.0, 1.25, -0.5), (0.75, 0.0, 1.0), (0.0, 0.0, 0.0), (0.75, 0.0, 0.0), (0.0, 1.25, 0.0))
    ]
    alpha1, beta1 = 1.5, -0.75
    d0, _ = ref.b2b_fp16(x.a0, x.b0, x.b1, x.c1, 0.75, alpha1, beta1)
    target = alpha1 * (d0.astype(np.float64) @ x.b1.astype(np.float64))
    c1 = (target / -beta1 * (1.0 + np.ldexp(rng.uniform(-1.0, 1.0, target.shape), -12))).astype(np.float16)
    cancelling = dataclasses.replace(x, name="beta1 C1 cancels alpha1 D0 B1", c1=c1, alpha0=0.75, alpha1=alpha1,
                                     beta1=beta1)  # fmt: skip
    return [negative, cancelling, *zeros]


def _infinite_c1(x: ref.B2BInputs) -> ref.B2BInputs:
    """``x`` with an Inf and a -Inf in C1 and beta1 = 0.5: D1 is Inf at the one, 0 at the other."""
    c1 = x.c1.copy()
    flat = c1.reshape(-1)
    flat[len(flat) // 3], flat[2 * len(flat) // 3] = np.inf, -np.inf
    return ref.B2BInputs("an Inf and a -Inf in C1", x.a0, x.b0, x.b1, c1, x.alpha0, x.alpha1, 0.5)


# ------------------------------------------------------------------------------------------------------------
# GEMM + bias + ReLU
# ------------------------------------------------------------------------------------------------------------


def _gemm_candidates(x: ref.GemmInputs, tile_n: int | None = None) -> dict[str, np.ndarray]:
    p = x.a.astype(np.float64) @ x.b.astype(np.float64)
    bias = x.bias.astype(np.float64)
    out = {
        "ReLU missing: out = relu(acc + bias)": p + bias,
        "bias missing: out = relu(acc + bias[col])": ref.relu(p),
        "ReLU applied before the bias: relu(acc) + bias": ref.relu(p) + bias,
        "ReLU applied before the bias, then again after it: relu(relu(acc) + bias) is bias where acc < 0 < bias; add "
        "the bias first, then ReLU once": ref.relu(ref.relu(p) + bias),
        "bias subtracted instead of added": ref.relu(p - bias),
    }
    n = p.shape[1]
    for tile in (64, 128, 256):  # a bias indexed by the column within the block, not within the matrix
        if n > tile and n % tile == 0:
            local = np.tile(bias[:tile], n // tile)
            out[f"bias indexed by the column within a {tile}-wide block tile: add the block's column offset"] = (
                ref.relu(p + local)
            )
    for width in (64, 128):  # a block width hard-coded in the column offset, where this plan's blocks are tile_n wide
        if tile_n and width != tile_n:
            cols = np.arange(n)
            at = width * (cols // tile_n) + cols % tile_n  # past the bias: whatever lies there, unknown (NaN)
            read = np.where(at < n, bias[np.minimum(at, n - 1)], np.nan)
            out[
                f"a block width of {width} hard-coded in the bias's column offset: this plan's blocks are {tile_n} "
                "wide; the offset is cuda.blockIdx.y * TN, TN from the Matmul (MM.size)"
            ] = ref.relu(p + read)
    if p.shape[0] == p.shape[1]:
        out["bias indexed by row instead of by column"] = ref.relu(p + bias[:, None])
    with np.errstate(over="ignore", invalid="ignore"):
        out[
            "the accumulator was rounded to FP16 before the bias: add the bias to the FP32 value and round once, at "
            "the end"
        ] = ref.relu(p.astype(np.float16).astype(np.float64) + bias)
    return out


CANCELLING = "a bias that nearly cancels the sum"


def _fp16(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(x, dtype=np.float64).astype(np.float16))


NONFINITE = "a NaN in A, an Inf in B, +-Inf and NaN in the bias"


def gemm_corners(m: int, n: int, k: int, seed: int) -> list[ref.GemmInputs]:
    """Inputs that make the rounding order visible and that hold non-finite values (see the module docstring)."""
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.5, 1.0, k)
    a = base[None, :] + np.ldexp(rng.integers(-4, 5, (m, k)), -10)  # rows close to one another: sums close too
    b = rng.uniform(0.0, 1.0, (k, n))
    a16, b16 = _fp16(a), _fp16(b)
    p0 = a16[0].astype(np.float64) @ b16.astype(np.float64)
    cancelling = ref.GemmInputs(CANCELLING, a16, b16, _fp16(-p0))  # relu(acc + bias) is small, |acc| is not
    x = ref.gemm_inputs(m, n, k, "random", int(rng.integers(2**31)))
    a, b, bias = x.a.copy(), x.b.copy(), x.bias.copy()
    a[int(rng.integers(m)), int(rng.integers(k))] = np.nan
    b[int(rng.integers(k)), int(rng.integers(n))] = np.inf
    columns = rng.choice(n, 3, replace=False)
    bias[columns] = (np.inf, -np.inf, np.nan)
    return [cancelling, ref.GemmInputs(NONFINITE, a, b, bias)]


def _gemm_driver(
    functions: Sequence[Any],
    *args: Any,
    shape: Sequence[int] = GEMM_SHAPE,
    small: bool = False,
    block: dict[str, int] | None = None,
    **kwargs: Any,
) -> str:
    m, n, k = (int(v) for v in shape)
    if small:  # one block tile (or a few) of 128 x 128, every K stage
        m, n = small_rows(m), small_rows(n)
    cfg = f"BlockConfig(**{dict(block)!r})" if block else None
    return f"""
        import cupy as cp
        from utilities.fusion import reference as ref
        from utilities.fusion.tensorcore import BlockConfig, GemmBiasRelu, Kernels
        x = ref.gemm_inputs({m}, {n}, {k}, "random", 0)
        plan = GemmBiasRelu({m}, {n}, {k}, cfg={cfg}, kernels=Kernels({sanitizer.kernels_arguments(functions)}))
        plan(*(cp.asarray(v) for v in x.args()))
        cp.cuda.runtime.deviceSynchronize()
        """


def _gemm_contract(args: tuple, kwargs: dict) -> list[tuple[tuple, dict]]:
    """The driver's arguments at each block of :data:`GEMM_CONFIGS`, at the check's shape."""
    return [(args, {**kwargs, "block": dict(c)}) for c in GEMM_CONFIGS]


@checker("GEMM + bias + ReLU", driver=_gemm_driver, shared=True, contract=_gemm_contract)
def check_gemm_bias_relu(
    run: Callable[..., Any],
    *,
    shape: Sequence[int] = GEMM_SHAPE,
    block: dict[str, int] | None = None,
    seed: int | None = None,
    cases: Sequence[str] = ref.GEMM_CASES,
) -> CheckResult:
    """``run(a, b, bias)`` returns ``relu(a @ b + bias)`` as NumPy FP16; ``shape`` is ``(m, n, k)`` of its plan,
    ``block`` its BlockConfig's fields (None: the course's; the contract's two are :data:`GEMM_CONFIGS`)."""
    name, seed = "GEMM + bias + ReLU", fresh_seed(seed)
    if block:
        name += " (" + ", ".join(f"{key} {value}" for key, value in block.items()) + ")"
    m, n, k = (int(s) for s in shape)
    count = 0
    inputs = [*ref.gemm_cases(m, n, k, seed, tuple(cases)), *gemm_corners(m, n, k, seed)]
    for x in inputs:
        got = output(run(x.a.copy(), x.b.copy(), x.bias.copy()), "out", f"{x.name} {m}x{n}x{k}")
        with np.errstate(over="ignore", invalid="ignore"):
            want, bound = ref.gemm_bias_relu_ref(*x.args())
        if count == 0 and (untouched(got) or untouched(got, float("nan"))):
            return not_yet(name, "the output is all zero or was not written")
        label = f"{x.name} {m}x{n}x{k}"
        if got.shape == want.shape and got.dtype != np.float16:
            raise CheckFailure("out", f"stage 'out' on input '{label}': dtype {got.dtype}, expected float16")
        if got.shape == want.shape:
            want = np.where(np.isnan(want) & (got == 0), 0.0, want)  # ReLU of NaN: NaN or 0 (x if x > 0 else 0)
        with np.errstate(over="ignore", invalid="ignore"):  # NaN and Inf inputs: the candidates carry them
            candidates = _gemm_candidates(x, (block or {}).get("tile_n"))
        hint = "" if got.shape != want.shape else _diagnose(got, bound, candidates, want, "the output")
        compare("out", got, want, bound=bound, names=("row", "col"), hint=hint, case=label)
        count += 1
    return passed(name, count, seed, f"shape (m, n, k) = {(m, n, k)}; cases {', '.join(x.name for x in inputs)}")

"""Checkers of the Ozaki-I exercises (notebooks 3a-3d), stage by stage against the NumPy reference.

Stages are compared exactly where the algorithm is exact (shifts, int8 digits, int32 products and diagonals)
and C bit for bit where beta = 0: the reconstructed sum x (before alpha) is computed operation for operation as the
reference computes it (each diagonal exact, the diagonals from the smallest weight, each product by 2^(-8d) exact,
so a multiply-add that fuses it rounds the same; ldexp rounds once), and C is then the one rounding fl(alpha x).
Where beta != 0, C lies within ``utilities.rounding.epilogue_bound``: a GPU fuses ``alpha * x + beta * c`` into one
multiply-add, with either product inside it, where NumPy rounds both products and their sum.

Every checker states its domain (printed under its pass line) and feeds the corners of that domain on every run,
beside fresh random inputs, so that its verdict does not depend on the seed:

- every slice count the plans accept, 1 to 12 (the GPU slicing splits its integer beyond 8);
- both ends of the FP64 range: row maxima at DBL_MAX, at the margin below 2^1024 and subnormal down to 2^-1074;
  entries far below their row maximum; ties of the last digit; carries that cascade through digits of 127 and -128;
- a NaN and an Inf in each operand (the sentinel shift: NaN in the affected rows and columns of C);
- both layouts of the epilogue's terms (the unfused S(S+1)/2 products, the partially fused S diagonals), and output
  shapes wider than a launch tile along each axis and not multiples of it (a swapped grid leaves entries unwritten);
- a C full of NaN when beta = 0 (it must not be read: the failure then says "C was read although beta = 0"),
  diagonal sums that FP32 cannot hold, and sums whose rounding shows the order of the accumulation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from .. import inputs, sanitizer
from ..checker import (
    ALPHA_ZERO,
    CheckFailure,
    CheckResult,
    alpha_zero_hint,
    c_read_when_beta_is_zero,
    checker,
    compare,
    fresh_seed,
    not_yet,
    output,
    passed,
    plain,
    quick_return,
    untouched,
)
from ..operands import NONFINITE_SHIFT
from ..rounding import epilogue_bound
from . import products as _products
from . import reference as _reference
from . import slicing as _slicing
from .epilogue import reconstruct

U = 2.0**-53
SLICE_COUNTS = tuple(range(_slicing.MIN_SLICES, _slicing.MAX_SLICES + 1))  # every count the plans accept
DBL_MAX = float(np.finfo(np.float64).max)
TOP = math.ldexp(127 / 128, 1024)  # the largest row maximum whose shift is 1024
SUBNORMAL = 2.0**-1074
SLICE_NAMES = ("slice", "row", "col")
EPILOGUE_SHAPE = (41, 70)  # wider than the epilogue's 32 x 8 launch block along each axis, a multiple of neither
GEMM_SHAPES = ((256, 384, 384), (300, 136, 392))  # 2 x 3 and 3 x 2 tiles of 128 x 128, the second padded
# The contract's parameters: beside the plan's tile for this GPU (tensorcore.tile_config: 128 x 128, K stages of 128
# on sm_80 and sm_90, 256 threads, 3 stages in flight), the notebooks check one plan at a block whose every size
# differs (OzakiConfig's fields), at GEMM_SHAPES[1]: 5 x 3 tiles of 64, 7 K stages of 64 (of 392, padded)
OTHER_TILE = {"tile_m": 64, "tile_n": 64, "tile_k": 64, "threads": 128, "depth": 2}
# The race run's case (compute-sanitizer's racecheck and synccheck, the checks' smallest case), whatever the shape and
# count of the check that starts it: one output tile of 128 x 128 (4 of OTHER_TILE), K padded over every stage and
# the pipeline's wrap (4 stages of 128, 7 of 64), and 3 slices: diagonals of one, two and three products, every
# barrier the kernels' loops reach (the count is a run-time argument); more slices only repeat them, slower.
RACE_SHAPE, RACE_SLICES = (128, 128, GEMM_SHAPES[1][2]), 3
# The exercise functions each stage depends on (``utilities.checker.unfinished_for``): the shifts are the
# course's code; the digits come from split_digits; products and diagonals from the products kernels.
# alpha of either sign and 0, beta 0 (C handed in all NaN: it must not be read) and not, in every combination: the
# order of each step shows. A shape's 20 cases meet each; its NaN and Inf pairs, the last two, meet alpha = 0.
GEMM_SCALARS = ((1.0, 0.0), (0.5, -2.0), (-1.5, 0.0), (-0.75, 1.25), (0.0, 1.25), (0.0, 0.0), (2.0, 0.5))
# The NaN and Inf pairs again, at alpha != 0 (beta C and 0): where alpha = 0 BLAS's quick return accepts beta C, so
# only these show a C that is not NaN at the sentinel's lines (22 cases a shape).
NONFINITE_SCALARS = ((2.0, 0.5), (-1.5, 0.0))
GEMM_NEEDS = {
    "exponent shifts of A": (),
    "exponent shifts of B": (),
    "slices of A": ("make_split_digits",),
    "slices of B": ("make_split_digits",),
    "slice products": ("make_split_digits", "make_products_kernel"),
    "anti-diagonal sums": ("make_split_digits", "make_products_kernel", "make_diagonals_kernel"),
}

DOMAIN_DIGITS = (
    "1 to 12 slices; row maxima from 2^-1074 to DBL_MAX (shifts -1073 to 1025); ties of the last digit; carries "
    "cascading through digits of 127 and -128; entries far below their row maximum; random entries for breadth"
)
DOMAIN_SLICING = DOMAIN_DIGITS + "; zero rows, signed zeros, NaN and Inf rows (the sentinel shift, zero digits)"
DOMAIN_EPILOGUE = (
    "1 to 12 slices in both layouts (S(S+1)/2 products, S diagonals); a 41 x 70 output (wider than a 32 x 8 block "
    "along each axis); shifts at both ends of the FP64 range; NaN sentinels in e and f; diagonal sums near 2^30; "
    "unfused terms of K = 131071 (2^31 - 2^14), whose diagonal sums pass 2^31; entries whose terms are all zero and "
    "entries whose last diagonal is zero; alpha negative, positive and 0, |alpha| above 1 and below, beta 0 and not "
    "in every combination, a C full of NaN when beta = 0, a C that cancels alpha times the sum; " + ALPHA_ZERO
)
DOMAIN_GEMM = (
    "shapes of 2 x 3 and 3 x 2 tiles, one padded; random, spread and adversarial operands; rows near DBL_MAX and "
    "subnormal rows; a NaN and an Inf in each operand, at alpha 0 and not; zero rows and columns; alpha of either "
    "sign and 0, beta 0 and not in every combination, a C full of NaN when beta = 0; " + ALPHA_ZERO
)


# ------------------------------------------------------------------------------------------------------------
# Drivers of the sanitizer runs (``sanitize=True``): the exercise functions' kernels once, at the checks' shapes
# ------------------------------------------------------------------------------------------------------------


def _slicing_driver(functions: Sequence[Any], *args: Any, **kwargs: Any) -> str:
    f = sanitizer.def_name(functions[0])
    return f"""
        from utilities import inputs
        from utilities.ozaki.tensorcore import slice_rows_on_gpu
        for slices in (7, 12):
            slice_rows_on_gpu(inputs.exponent_spread(13, 300, 2.0, slices), slices, {f})
        """


def _epilogue_driver(functions: Sequence[Any], *args: Any, **kwargs: Any) -> str:
    f = sanitizer.def_name(functions[0])
    return f"""
        import numpy as np
        from utilities.ozaki.check import unfused_offsets
        from utilities.ozaki.tensorcore import epilogue_on_gpu
        rng = np.random.default_rng(0)
        offsets = unfused_offsets(7)
        terms = rng.integers(-2**24, 2**24, (int(offsets[-1]), 41, 70)).astype(np.int32)
        e, f = rng.integers(-40, 41, 41).astype(np.int32), rng.integers(-40, 41, 70).astype(np.int32)
        epilogue_on_gpu(terms, offsets, e, f, -1.5, 0.75, np.ones((41, 70)), epilogue_factory={f})
        """


def _gemm_driver(functions: Sequence[Any], *args: Any, small: bool = False, **kwargs: Any) -> str:
    names = [sanitizer.def_name(fn) for fn in functions]
    variant = "fused" if "make_fused_kernel" in names else "partial" if "make_diagonals_kernel" in names else "unfused"
    slices = int(args[0]) if args else int(kwargs.get("slices", 7))
    m, n, k = (kwargs.get("shapes") or GEMM_SHAPES)[-1]
    if small:  # the race run: the same case for every check of the notebook's loop, so that one run serves them
        (m, n, k), slices = RACE_SHAPE, RACE_SLICES
    block = kwargs.get("block")
    cfg = f"OzakiConfig(**{dict(block)!r})" if block else "None"
    return f"""
        import cupy as cp
        from utilities import inputs
        from utilities.ozaki.tensorcore import Kernels, OzakiConfig, OzakiGemm
        a, b = cp.asarray(inputs.normal({m}, {k}, 1)), cp.asarray(inputs.normal({k}, {n}, 2))
        plan = OzakiGemm({m}, {n}, {k}, slices={slices}, variant="{variant}", cfg={cfg},
                         kernels=Kernels({sanitizer.kernels_arguments(functions)}))
        plan(a, b, cp.ones(({m}, {n})), -1.5, 0.75)
        cp.cuda.runtime.deviceSynchronize()
        """


# ------------------------------------------------------------------------------------------------------------
# Corner inputs
# ------------------------------------------------------------------------------------------------------------


def _unit(slices: int, e: int = 0) -> float:
    """The weight of the last of ``slices`` digits in a row of shift ``e``."""
    return math.ldexp(1.0, e - 7 - 8 * (slices - 1))


def _cascade(slices: int, sign: int) -> float:
    """x (in a row of shift 0) whose truncated digits are 5, then 127s (128s when negative), then 200: balancing the
    200 pushes the digit above it to 128 (-129), and so on up to the top digit. At most 48 bits: exact."""
    length = min(max(slices, 2), 6)
    middle = 127 if sign > 0 else 128
    digits = [5] + [middle] * (length - 2) + [200]
    return sign * math.ldexp(sum(d * 256.0**-i for i, d in enumerate(digits)), -7)


def corner_rows(slices: int) -> list[tuple[str, list[float]]]:
    """Named rows (finite) that reach the corners of slicing with ``slices`` slices; each row holds its maximum."""
    u = _unit(slices)  # rows whose maximum is 0.9 have shift 0
    ties = [(2 * j + 1) * u / 2 for j in (0, 1, 2, 3, 127, 128)]
    if slices <= 6:  # a tie below a nonzero top digit: exact while the digits hold at most 48 bits
        ties += [0.5 + 1.5 * u, 0.25 + 2.5 * u]
    limits = [(5 + v * 256.0**-depth) / 128 for v in (127, 128, -128, -129) for depth in (1, 2, 5)]
    ordinary = [
        ("powers of two", [1.0, -0.5, 0.25, 2.0**-20, -(2.0**-50), 2.0**-64]),
        ("one nonzero entry", [0.0, 0.0, -2.5, 0.0]),
        ("signed zeros", [0.0, -0.0, -0.0]),
        (
            "truncated digits of 255 (the last one rounds up)",
            [1 - 2.0**-40, -(1 - 2.0**-52), 127 / 128 - 2.0**-53, 0.5 - 2.0**-60, -(2.0**-8 - 2.0**-61)],
        ),
        ("digits at the carry's limits (127, 128, -128, -129)", [0.9, *limits, *(-x for x in limits)]),
        ("carries that cascade through digits of 127 and -128", [0.9, _cascade(slices, 1), _cascade(slices, -1)]),
        ("ties of the last digit", [0.9, *ties, *(-t for t in ties)]),
        (
            "entries far below the row maximum",
            [
                0.9,
                u / 2,
                u / 2 + u * 2.0**-30,
                0.75 * u,
                u,
                1.5 * u,
                2.5 * u,
                -0.75 * u,
                -u / 2,
                0.25 * u,
                SUBNORMAL,
                -(2.0**-600),
            ],
        ),
    ]
    ends = [  # of the FP64 range, last: a mistake that fails everywhere is named by an ordinary row first
        (
            "a row whose maximum is DBL_MAX (shift 1025)",
            [DBL_MAX, -DBL_MAX / 3, 2.0**1000, -(2.0**900), 1.0, SUBNORMAL, 0.0],
        ),
        (
            "a row whose maximum is 127/128 * 2^1024 (shift 1024)",
            [TOP, -TOP, float(np.nextafter(TOP, 0)), 2.0**1015, -3.0],
        ),
        (
            "a row whose maximum is just above 127/128 * 2^1024 (shift 1025)",
            [float(np.nextafter(TOP, np.inf)), -1e300, 3.0],
        ),
        ("a subnormal row (maximum 7 * 2^-1074)", [7 * SUBNORMAL, -3 * SUBNORMAL, SUBNORMAL, 0.0, -SUBNORMAL]),
        ("a row whose maximum is 2^-1074, the smallest subnormal", [SUBNORMAL, -SUBNORMAL, 0.0]),
        (
            "a row whose maximum is 2^-1022 (smallest normal), the rest subnormal",
            [2.0**-1022, -3 * 2.0**-1060, 2.0**-1073, -(2.0**-1030)],
        ),
    ]
    return ordinary + ends


def corner_matrix(slices: int, width: int = 16) -> tuple[np.ndarray, list[str]]:
    """The corner rows of ``slices`` as one matrix (zero-padded to ``width``), plus rows holding NaN and Inf; and
    the name of every row."""
    rows = [
        *corner_rows(slices),
        ("a row holding a NaN", [1.0, np.nan, -2.0]),
        ("a row holding -Inf", [-np.inf, 3.0]),
        ("a row holding +Inf and a NaN", [np.nan, 0.5, np.inf]),
    ]
    out = np.zeros((len(rows), max(width, *(len(values) for _, values in rows))))
    for i, (_, values) in enumerate(rows):
        out[i, : len(values)] = values
    return out, [name for name, _ in rows]


def _fp_digits(
    x: float,
    e: int,
    slices: int,
    extract: Callable[[float], int] = math.trunc,
    last: Callable[[float], int] = round,
    carry: str = "cascade",
) -> list[int]:
    """3a's digits, digit by digit in FP64, with one step swappable for a usual mistake (for a hint that names it):
    ``carry`` is "cascade" (the lowest digit first), "upward" (the top first: a carry does not cascade), "wrap",
    "positive only" (digits below -128 kept), "no carry up" or "no carry down" (the digit wrapped, the digit above it
    not changed)."""
    t = math.ldexp(x, 7 - e)
    digits = []
    for _ in range(slices - 1):
        u = extract(t)
        digits.append(u)
        t = (t - u) * 256.0
    digits.append(last(t))
    if carry == "wrap":
        return [(d + 128) % 256 - 128 for d in digits]
    order = range(1, slices) if carry == "upward" else range(slices - 1, 0, -1)
    for s in order:
        if digits[s] > 127:
            digits[s], digits[s - 1] = digits[s] - 256, digits[s - 1] + (carry != "no carry up")
        elif digits[s] < -128 and carry != "positive only":
            digits[s], digits[s - 1] = digits[s] + 256, digits[s - 1] - (carry != "no carry down")
    return digits


DIGIT_MISTAKES: dict[str, dict[str, Any]] = {
    "the last digit rounds half to even (Python's round, np.rint, the GPU's rint), not half up": {
        "last": lambda t: math.floor(t + 0.5)
    },
    "the last digit rounds half to even, not half away from zero": {
        "last": lambda t: int(math.copysign(math.floor(abs(t) + 0.5), t))
    },
    "the last digit is rounded (to nearest, half to even), not truncated": {"last": math.trunc},
    "int(t + 0.5) rounds toward zero after the shift, so a negative last digit comes out one too high: round(t) "
    "rounds to nearest for either sign": {"last": lambda t: int(t + 0.5)},
    "the last digit rounds half down (ceil(t - 1/2)): a tie must round to even (Python's round)": {
        "last": lambda t: math.ceil(t - 0.5)
    },
    "the last digit rounds half toward zero: a tie must round to even (Python's round), for either sign": {
        "last": lambda t: int(math.copysign(math.ceil(abs(t) - 0.5), t))
    },
    "a negative tie of the last digit rounds away from zero, a positive one to even: a tie rounds to even for either "
    "sign (round(t) as it is, not round(-t) or a floor on the negative side)": {
        "last": lambda t: round(t) if t >= 0 else math.ceil(t - 0.5)
    },
    "a negative tie of the last digit rounds toward zero, a positive one to even: a tie rounds to even for either "
    "sign (round(t) as it is, not round(-t) or a floor on the negative side)": {
        "last": lambda t: round(t) if t >= 0 else math.floor(t + 0.5)
    },
    "peel the digits off toward zero (math.trunc): floor is not exact for negative x": {"extract": math.floor},
    "carries must cascade: go from the last digit to the first, so that a digit pushed to 128 or -129 by the carry "
    "from below carries on": {"carry": "upward"},
    "carry, do not wrap: a digit above 127 gives 1 to the next more significant digit (256 of its own units), one "
    "below -128 takes 1": {"carry": "wrap"},
    "carry both ways: a digit below -128 (a negative x's truncated digits reach -255) adds 256 to itself and takes "
    "1 from the next more significant digit": {"carry": "positive only"},
    "a digit above 127 lost 256 without giving 1 to the next more significant digit: the carry moves the 256 one "
    "digit up, it does not drop it": {"carry": "no carry up"},
    "a digit below -128 gained 256 without taking 1 from the next more significant digit: the carry moves the 256 one "
    "digit up, it does not make it": {"carry": "no carry down"},
}


def probe_points(slices: int) -> list[tuple[float, int]]:
    """(x, e) pairs that tell the usual digit mistakes apart: ties of the last digit and cascading carries, both
    signs, at ``slices`` and at one and two slices (each a row of shift 0, so e = 0)."""
    points = []
    for count in sorted({1, 2, slices}):
        for row, values in corner_rows(count):
            if "ties" in row or "cascade" in row or "limits" in row:
                points += [(float(v), count) for v in values if v != 0.9]
    return [(x, count) for x, count in points] + [(-x, count) for x, count in points]


def _digits_diagnosis(
    wrong: Sequence[tuple[Sequence[int], float, int]],
    slices: int,
    probe: Callable[[float, int, int], Sequence[int]] | None = None,
) -> str:
    """The hints of the usual mistakes that explain every ``(got digits, x, e)`` of ``wrong``, or "".

    Each mistake is a hypothesis tested by recomputing the digits with it (``_fp_digits``). When several explain
    the wrong entries and ``probe`` (the attendee's ``fn(x, e, slices)``) is given, each survivor is tested again
    on :func:`probe_points`, where the mistakes differ: only those that give the attendee's digits there too are
    named (floor is named only for code that peels digits like floor, not for code using trunc)."""
    wrong = [([int(d) for d in got], float(x), int(e)) for got, x, e in wrong]
    if all(not any(got) and 0 < abs(x) <= _unit(slices, e) for got, x, e in wrong):
        return (
            "all digits zero for a nonzero x: an x far below its row maximum has zero digits, but its last digit is "
            "rounded, not truncated, so it is +-1 from half a unit up: no shortcut that returns zeros for small |x|"
        )
    found = []
    for hint, change in DIGIT_MISTAKES.items():
        try:
            if all(_fp_digits(x, e, slices, **change) == got for got, x, e in wrong):
                found.append((hint, change))
        except (OverflowError, ValueError):
            continue
    if probe is not None and found:
        points = probe_points(slices)
        seen = [(x, count, [int(d) for d in probe(x, 0, count)]) for x, count in points]
        found = [
            (hint, change)
            for hint, change in found
            if all(_fp_digits(x, 0, count, **change) == got for x, count, got in seen)
        ]
    return "; or: ".join(hint for hint, _ in found)  # one entry may fit two mistakes: name both


def range_end_shift(e: int, slices: int) -> bool:
    """Whether a power of two that scales a row of shift ``e`` into its digits leaves the doubles: 2^(7 - e) (3a),
    2^(8S - 1 - e) (3b), their inverses, or 2^e itself, with an exponent above 1023 (Inf) or below -1074 (0)."""
    return any(n > 1023 or n < -1074 for n in (7 - e, e - 7, e, -e, 8 * slices - 1 - e, e - 8 * slices + 1))


def _range_hint(shifts: Sequence[int], slices: int, passed_elsewhere: bool) -> str:
    """The hint of a power of two that overflows or underflows, tested: every wrong digit lies in a row whose
    scaling needs such a power (:func:`range_end_shift`), and the rows that need none came out right."""
    if not shifts or not passed_elsewhere or not all(range_end_shift(int(e), slices) for e in shifts):
        return ""
    ends = plain(sorted({int(e) for e in shifts}))
    return (
        f"every wrong digit lies in a row at an end of the FP64 range (shift {ends}), "
        "where a power of two such as 2.0 ** (7 - e), 2.0 ** e or 2.0 ** (8 S - 1 - e) overflows to Inf or "
        "underflows to 0, and the other rows are right: math.ldexp(x, n) scales in one exact step"
    )


def _random_pairs(rng: np.random.Generator) -> list[tuple[float, float]]:
    """(x, row maximum) pairs over the whole exponent range, x up to 2^30 below its row maximum."""
    pairs = []
    for _ in range(20):
        x = float(rng.standard_normal()) * 2.0 ** float(rng.integers(-1000, 1000))
        pairs.append((x, abs(x) * 2.0 ** float(rng.integers(0, 30))))
    return pairs


def _range_pairs(m: int, k: int, n: int, seed: int) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(A, B) pairs at both ends of the FP64 range, with C finite: rows of A near DBL_MAX against a B scaled by
    2^-70, and subnormal rows of A against columns of B scaled up to 2^40 (results subnormal)."""
    rng = np.random.default_rng(seed)
    top = rng.standard_normal((m, k))
    top[0] = rng.standard_normal(k) * 2.0**1020
    top[0, rng.integers(k)] = DBL_MAX * rng.choice([-1.0, 1.0])  # shift 1025
    top[1] = rng.uniform(-1, 1, k) * TOP
    top[1, rng.integers(k)] = TOP  # shift 1024
    top[2] = rng.standard_normal(k) * 2.0**700
    b_top = rng.standard_normal((k, n)) * 2.0**-70
    low = rng.standard_normal((m, k))
    low[0] = rng.integers(-7, 8, k) * SUBNORMAL
    low[1] = rng.integers(-(2**20), 2**20, k) * SUBNORMAL
    low[2] = rng.standard_normal(k) * 2.0**-1050
    low[2, 0] = 2.0**-1022
    b_low = rng.standard_normal((k, n)) * np.ldexp(1.0, rng.integers(0, 41, n))[None, :]
    return [("rows near DBL_MAX", top, b_top), ("subnormal rows, subnormal results", low, b_low)]


def _nonfinite_pairs(m: int, k: int, n: int, seed: int) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """A NaN and an Inf in each operand: an Inf in a row of A and a NaN in a column of B, then the other way."""
    a, b = inputs.nonfinite_lines(m, k, n, seed)
    rng = np.random.default_rng(seed + 1)
    a2, b2 = inputs.normal(m, k, seed + 2), inputs.normal(k, n, seed + 3)
    a2[rng.integers(m), rng.integers(k)] = np.nan
    b2[rng.integers(k), rng.integers(n)] = np.inf
    return [
        ("an Inf in a row of A, a NaN in a column of B", a, b),
        ("a NaN in a row of A, an Inf in a column of B", a2, b2),
    ]


def _cases(m: int, k: int, n: int, seed: int, nonfinite: bool = False) -> Iterable[tuple[str, np.ndarray, np.ndarray]]:
    """Random, spread-out, adversarial and range-end (A, B) pairs; with ``nonfinite``, also pairs holding NaN and
    Inf in each operand."""
    rng = np.random.default_rng(seed)
    yield "random normal", inputs.normal(m, k, int(rng.integers(2**31))), inputs.normal(k, n, int(rng.integers(2**31)))
    yield (
        "exponent spread phi=2",
        inputs.exponent_spread(m, k, 2.0, int(rng.integers(2**31))),
        inputs.exponent_spread(k, n, 2.0, int(rng.integers(2**31))),
    )
    yield from inputs.adversarial_pairs(m, k, n, seed)
    yield from _range_pairs(m, k, n, seed)
    if nonfinite:
        yield from _nonfinite_pairs(m, k, n, seed)


def _stage_fn_result(fn: Callable[..., Any], *args: Any, stage: str = "result") -> Any:
    """``fn(*args)`` as arrays (a tuple stays a tuple); an output from a guard band fails ``stage`` when written
    outside (``utilities.checker.output``)."""
    return output(fn(*args), stage)


# ------------------------------------------------------------------------------------------------------------
# 3a: one number's digits, the terms of a diagonal
# ------------------------------------------------------------------------------------------------------------


def _slice_number_cases(rng: np.random.Generator) -> list[tuple[str, float, float, int]]:
    """(corner, x, row maximum, slices): every corner row's entries at every count, then random pairs."""
    cases = []
    for slices in SLICE_COUNTS:
        for row, values in corner_rows(slices):
            top = max(abs(v) for v in values)
            cases += [(row, float(x), top, slices) for x in values]
        cases += [("random x and row maximum", x, top, slices) for x, top in _random_pairs(rng)]
    return cases


@checker("slice one number")
def check_slice_number(fn: Callable[[float, int, int], Sequence[int]], *, seed: int | None = None) -> CheckResult:
    """``fn(x, e, slices)`` returns the balanced base-256 digits of x (digit s weighs 2^(e - 7 - 8s)).

    Domain: :data:`DOMAIN_DIGITS` (x finite, e the shift of a row that holds x).
    """
    name, seed = "slice one number", fresh_seed(seed)
    cases = _slice_number_cases(np.random.default_rng(seed))
    if all(not any(fn(x, 1, 7)) for x in (1.0, -1.0, 0.3, -0.3)):
        return not_yet(name, "all digits are zero")
    for row, x, top, slices in cases:
        e = int(_slicing.row_shifts(np.array([[x, top]]))[0])
        got = np.asarray(list(fn(float(x), e, slices)), dtype=np.int64)
        want = _slicing.slice_rows(np.array([[x, top]]), slices)[0][:, 0, 0].astype(np.int64)
        label = f"x = {x!r} in {row} (e = {e}), {slices} slices"
        if got.shape != want.shape:
            raise CheckFailure(
                "digits of one number",
                f"stage 'digits of one number' on input '{label}': {got.size} digits, "
                f"expected {slices}\nhint: return exactly `slices` digits: the count is the argument, not a fixed "
                "count",
            )
        if not np.array_equal(got, want):
            hint = _digits_diagnosis([(got, x, e)], slices, probe=fn) or _range_hint([e], slices, True)
            compare("digits of one number", got, want, names=("digit",), case=label, hint=hint)
    return passed(name, len(cases), seed, DOMAIN_DIGITS)


def diagonal_terms_ref(d: int, slices: int) -> list[tuple[int, int]]:
    """The pairs (s, t) with s + t = d and both below ``slices``, s ascending (any d >= 0)."""
    return [(s, d - s) for s in range(slices) if 0 <= d - s < slices]


@checker("anti-diagonal terms")
def check_diagonal_terms(
    fn: Callable[[int, int], Sequence[tuple[int, int]]], *, seed: int | None = None
) -> CheckResult:
    """``fn(d, slices)`` lists the products (s, t) on anti-diagonal d, s ascending, both s and t below ``slices``.

    Domain: 1 to 12 slices and d = 0 .. 2S + 1, the contract's "any d >= 0": Ozaki-I keeps d < S, but from d = S on
    the bound "both below slices" decides which terms exist (and from d = 2S - 1 on there are none).
    """
    name = "anti-diagonal terms"
    if not list(fn(3, 7)):
        return not_yet(name, "diagonal 3 has no terms")
    count = 0
    for slices in SLICE_COUNTS:
        for d in range(2 * slices + 2):
            got = [tuple(int(i) for i in p) for p in fn(d, slices)]
            want = diagonal_terms_ref(d, slices)
            count += 1
            if got != want:
                if sorted(got) == want:
                    hint = "the right pairs in the wrong order: list them with s ascending (s is the slice of A, first)"
                elif d < slices:
                    hint = "s runs from 0 to d and t = d - s"
                else:
                    hint = (
                        f"diagonal {d} lies past the last one Ozaki-I keeps ({slices - 1}): there both s and t "
                        "must stay below the number of slices, so s starts at d - (slices - 1)"
                    )
                raise CheckFailure(
                    name,
                    f"stage '{name}': diagonal {d} with {slices} slices gave {plain(got)}, expected "
                    f"{plain(want)}\nhint: {hint}",
                )
    return passed(name, count, 0, "1 to 12 slices, every diagonal d = 0 .. 2S + 1 (those past S - 1 too)")


# ------------------------------------------------------------------------------------------------------------
# 3b: slicing, the FP64 epilogue; the diagonal sums
# ------------------------------------------------------------------------------------------------------------


@checker("slicing", driver=_slicing_driver)
def check_slicing(
    fn: Callable[[np.ndarray, int], tuple[Any, Any]],
    slices: int | Sequence[int] = SLICE_COUNTS,
    *,
    seed: int | None = None,
) -> CheckResult:
    """``fn(a, slices)`` returns ``(a_slices (S, m, k) int8, e (m,) int32)``: the row slicing of A.

    Domain: :data:`DOMAIN_SLICING`, at every count of ``slices`` (default 1 to 12: beyond 8 the GPU slicing splits
    its integer in two). At each count: the corner matrix (:func:`corner_matrix`), then random, spread, adversarial,
    range-end and non-finite matrices of 13 x 40.
    """
    name, seed = "slicing", fresh_seed(seed)
    counts = [slices] if isinstance(slices, int) else list(slices)
    count = 0
    for s in counts:
        corners, rows = corner_matrix(s)
        cases = [("corner rows", corners, rows), *((c, a, None) for c, a, _ in _cases(13, 40, 5, seed + s, True))]
        for case, a, labels in cases:
            got_slices, got_e = _stage_fn_result(fn, a, s, stage="slices")
            want_slices, want_e = _slicing.slice_rows(a, s)
            if count == 0 and untouched(got_slices):
                return not_yet(name, "every digit is zero")
            label = f"{case}, {s} slices"
            compare(
                "exponent shifts",
                got_e,
                want_e,
                names=("row",),
                case=label,
                hint="e is the smallest integer with max|row| <= (127/128) 2^e; use frexp, bump e when the mantissa "
                "exceeds 127/128, and 0 for an all-zero row",
            )
            got_slices = np.asarray(got_slices)
            if got_slices.shape == want_slices.shape and not np.array_equal(got_slices, want_slices):
                wrong = np.argwhere((got_slices != want_slices).any(axis=0))[:20]
                i, j = (int(v) for v in wrong[0])
                row_name = labels[i] if labels is not None else ""
                hint = _digits_diagnosis([(got_slices[:, r, c], a[r, c], want_e[r]) for r, c in wrong], s)
                if not hint and s > 8 and s != counts[0] and all(c <= 8 for c in counts[: counts.index(s)]):
                    hint = (
                        f"every count up to 8 passed and {s} fails: beyond 8 slices N does not fit an int64; the "
                        "given high_part writes the 4 lowest digits and returns the part above them, whose HIGH "
                        "digits remain"
                    )
                wrong_rows = (got_slices != want_slices).any(axis=(0, 2))
                ends = np.array([range_end_shift(int(e), s) for e in want_e])
                shifts = [int(e) for e in want_e[wrong_rows]]
                hint = hint or _range_hint(shifts, s, not wrong_rows[~ends].any())
                label += f" (x = {float(a[i, j])!r} at row {i}" + (f": {row_name})" if row_name else ")")
                compare("slices", got_slices, want_slices, names=SLICE_NAMES, case=label, hint=hint)
            compare("slices", got_slices, want_slices, names=SLICE_NAMES, case=label)
            count += 1
    return passed(name, count, seed, DOMAIN_SLICING + f"; slice counts {plain(counts)}")


@checker("anti-diagonal sums")
def check_diagonals(
    fn: Callable[[np.ndarray, np.ndarray], Any], slices: int = 7, *, seed: int | None = None
) -> CheckResult:
    """``fn(a_slices, b_slices)`` returns the int32 anti-diagonal sums (S, m, n)."""
    name, seed = "anti-diagonal sums", fresh_seed(seed)
    count = 0
    for case, a, b in _cases(33, 96, 40, seed):
        st = _reference.ozaki_stages(a, b, slices)
        got = _stage_fn_result(fn, st.a_slices, st.b_slices, stage="anti-diagonal sums")
        if count == 0 and st.diagonals.any() and untouched(got):
            return not_yet(name, "every diagonal is zero")
        compare(
            "anti-diagonal sums",
            got,
            st.diagonals,
            names=("diagonal", "row", "col"),
            case=case,
            hint="diagonal d sums A_s @ B_t over s + t == d (b_slices[t] is B_t transposed); accumulate in int32",
        )
        count += 1
    return passed(name, count, seed)


def _large_odd_diagonals(slices: int, m: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """Diagonal sums as large as an int32 accumulator holds, all odd: none is exact in FP32, and their FP64 sum
    rounds, so that the order of the accumulation shows."""
    return (rng.integers(-(2**30), 2**30, (slices, m, n), dtype=np.int64) | 1).astype(np.int32)


def unfused_offsets(slices: int) -> np.ndarray:
    """Where each diagonal's terms start in the unfused layout (``product_terms`` order), and the end: d(d+1)/2."""
    return np.array([d * (d + 1) // 2 for d in range(slices + 1)], dtype=np.int32)


def diagonal_offsets(slices: int) -> np.ndarray:
    """The partially fused layout: one term, the diagonal's sum, per diagonal."""
    return np.arange(slices + 1, dtype=np.int32)


def epilogue_reference(
    terms: np.ndarray, offsets: np.ndarray, e: np.ndarray, f: np.ndarray, alpha: float, beta: float, c: np.ndarray
) -> np.ndarray:
    """C from the terms of each diagonal (terms offsets[d] .. offsets[d+1] - 1 belong to diagonal d), as
    ``utilities.ozaki.epilogue.reconstruct`` defines it: each diagonal summed exactly, then the diagonals in FP64
    from the smallest weight to the largest."""
    sums = np.stack([terms[offsets[d] : offsets[d + 1]].sum(axis=0, dtype=np.int64) for d in range(len(offsets) - 1)])
    return reconstruct(sums, e, f, alpha, beta, c)


def _epilogue_variant(
    terms: np.ndarray,
    offsets: np.ndarray,
    e: np.ndarray,
    f: np.ndarray,
    alpha: float,
    beta: float,
    c: np.ndarray,
    mistake: str,
) -> np.ndarray:
    """The epilogue with one of the usual mistakes (for a hint that names it)."""
    S = len(offsets) - 1
    order = range(S) if mistake == "largest weight first" else range(S - 1, -1, -1)
    if mistake == "last diagonal dropped":
        order = range(S - 2, -1, -1)
    weight = 8 if mistake == "weights 2^(8d)" else -8
    acc = np.zeros(terms.shape[1:])
    if mistake == "each term at its weight":  # one FP64 rounding per term, not per diagonal
        for d in order:
            for t in range(offsets[d], offsets[d + 1]):
                acc = acc + terms[t].astype(np.float64) * 2.0 ** (-8 * d)
        order = range(0)
    for d in order:
        if mistake == "accumulated in float32":
            diagonal = terms[offsets[d] : offsets[d + 1]].sum(axis=0, dtype=np.int64).astype(np.float64)
            acc = (acc + diagonal * 2.0 ** (-8 * d)).astype(np.float32).astype(np.float64)
            continue
        if mistake == "one term per diagonal":
            diagonal = terms[d].astype(np.float64) if d < terms.shape[0] else 0.0
        elif mistake == "first term only":
            diagonal = terms[offsets[d]].astype(np.float64)
        else:
            chosen = terms[offsets[d] : offsets[d + 1]]
            if mistake == "through float32":
                diagonal = chosen.astype(np.float32).astype(np.float64).sum(axis=0)
            elif mistake == "summed in int32":
                exact = chosen.sum(axis=0, dtype=np.int64)
                diagonal = ((exact + 2**31) % 2**32 - 2**31).astype(np.float64)  # what an int32 accumulator keeps
            else:
                diagonal = chosen.sum(axis=0, dtype=np.int64).astype(np.float64)
        acc = acc + diagonal * 2.0 ** (weight * d)
    with np.errstate(over="ignore", invalid="ignore"):
        shift = (
            e.astype(np.int64)[:, None]
            + f.astype(np.int64)[None, :]
            - 14
            + {"shift 13": 1, "shift 15": -1}.get(mistake, 0)
        )
        out = alpha * np.ldexp(acc, shift)
        if beta != 0:
            out = out + beta * c
    out[e == NONFINITE_SHIFT, :] = np.nan
    out[:, f == NONFINITE_SHIFT] = np.nan
    return out


EPILOGUE_MISTAKES = {
    "largest weight first": "the diagonals were added from the largest weight to the smallest: run d from S - 1 "
    "down to 0, as the reference does, so that the FP64 sum rounds the same way",
    "through float32": "a term passed through float32, which holds 24 bits: convert int32 -> float64 directly",
    "accumulated in float32": "the diagonals were accumulated in float32, which holds 24 bits: acc must be a "
    "float64 (acc = 0.0 in a numba kernel is one)",
    "summed in int32": "each diagonal's terms were summed in int32, which wraps past 2^31 - 1: the unfused layout "
    "takes K up to 131071, so a term reaches 2^31 - 2^14 and diagonal d adds d + 1 of them; sum in float64 (exact "
    "here) or int64",
    "one term per diagonal": "terms[d] was taken as diagonal d: in the unfused layout diagonal d has d + 1 terms, "
    "terms offsets[d] .. offsets[d + 1] - 1; add them all",
    "first term only": "only the first term of each diagonal was added: loop t from offsets[d] to offsets[d + 1] - 1",
    "each term at its weight": "each term was added into acc at its weight, one FP64 rounding a term: add each "
    "diagonal's terms first, the exact sum of its terms, then the diagonal at its weight",
    "last diagonal dropped": "diagonal S - 1 (the smallest weight) was left out: add all S = len(offsets) - 1 "
    "diagonals, not a fixed count",
    "weights 2^(8d)": "diagonal d was weighted by 2^(8d): its weight is 2^(-8d) (the digits of A and B each weigh "
    "2^(-8s) and 2^(-8t))",
    "shift 13": "C is twice the right one: the scale is 2^(e_i + f_j - 14), not 2^(e_i + f_j - 13)",
    "shift 15": "C is half the right one: the scale is 2^(e_i + f_j - 14), not 2^(e_i + f_j - 15)",
}


def _epilogue_hint(
    got: np.ndarray,
    terms: np.ndarray,
    offsets: np.ndarray,
    e: np.ndarray,
    f: np.ndarray,
    alpha: float,
    beta: float,
    c: np.ndarray,
    bound: np.ndarray,
) -> str:
    for mistake, hint in EPILOGUE_MISTAKES.items():
        candidate = _epilogue_variant(terms, offsets, e, f, alpha, beta, c, mistake)
        with np.errstate(invalid="ignore"):
            same = (np.abs(got - candidate) <= bound) | (np.isnan(got) & np.isnan(candidate)) | (got == candidate)
        if same.all():
            return hint
    return ""


def _epilogue_cases(seed: int) -> list[tuple[str, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """(case, terms, offsets, e, f): every count in both layouts, then the stages of real products at 7 slices."""
    rng = np.random.default_rng(seed)
    m, n = EPILOGUE_SHAPE
    cases = []
    for s in SLICE_COUNTS:
        layout = "unfused" if s % 2 else "partially fused"
        offsets = unfused_offsets(s) if s % 2 else diagonal_offsets(s)
        terms = rng.integers(-(2**24), 2**24, (int(offsets[-1]), m, n)).astype(np.int32)
        e, f = rng.integers(-40, 41, m).astype(np.int32), rng.integers(-40, 41, n).astype(np.int32)
        e[int(rng.integers(m))], f[int(rng.integers(n))] = NONFINITE_SHIFT, NONFINITE_SHIFT
        terms[:, 1, :] = 0  # row 1: every sum exactly zero (C = beta C there)
        terms[offsets[s - 1] :, 2, :] = 0  # row 2: the last diagonal zero, the others not
        cases.append((f"random terms (sums exactly zero in row 1), {s} slices, {layout} layout", terms, offsets, e, f))
    k, s = 48, 7
    for case, a, b in (
        *_range_pairs(m, k, n, seed),
        *_nonfinite_pairs(m, k, n, seed),
        ("large digits: diagonal sums above 2^24", *inputs.adversarial_pairs(m, k, n, seed)[-1][1:]),
    ):
        st = _reference.ozaki_stages(a, b, s)
        products = _products.slice_products(st.a_slices, st.b_slices)
        cases.append((f"{case}, 7 slices, unfused layout", products, unfused_offsets(s), st.e, st.f))
        cases.append((f"{case}, 7 slices, partially fused layout", st.diagonals, diagonal_offsets(s), st.e, st.f))
    normal = _reference.ozaki_stages(inputs.normal(m, k, seed), inputs.normal(k, n, seed + 1), s)
    for s in (7, 12):
        cases.append(
            (
                f"odd diagonal sums near 2^30, {s} slices",
                _large_odd_diagonals(s, m, n, rng),
                diagonal_offsets(s),
                normal.e,
                normal.f,
            )
        )
        cases.append(
            (
                f"unfused terms of K = {UNFUSED_MAX_K} (up to 2^31 - 2^14): diagonal sums past 2^31, {s} slices",
                _largest_unfused_terms(s, m, n, rng),
                unfused_offsets(s),
                normal.e,
                normal.f,
            )
        )
    return cases


UNFUSED_MAX_K = _products.max_k_int32(1, 1)  # the unfused layout's plans accept K up to 131071


def _largest_unfused_terms(slices: int, m: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """Products as large as K = 131071 makes them (|A_s @ B_t| <= K 2^14 = 2^31 - 2^14), one sign per entry, so
    that every diagonal of two or more terms sums past int32's range (the terms themselves are exact int32)."""
    top = UNFUSED_MAX_K * 2**14
    sign = rng.choice(np.array([-1, 1]), (1, m, n))
    count = int(unfused_offsets(slices)[-1])
    return (sign * rng.integers(top - 2**24, top + 1, (count, m, n))).astype(np.int32)


@checker("FP64 epilogue", driver=_epilogue_driver)
def check_epilogue(fn: Callable[..., Any], *, seed: int | None = None) -> CheckResult:
    """``fn(terms, offsets, e, f, alpha, beta, c)`` returns C (float64): terms (T, m, n) int32, diagonal d's terms
    are ``terms[offsets[d]:offsets[d + 1]]``, S = len(offsets) - 1.

    Domain: :data:`DOMAIN_EPILOGUE`. With beta = 0 the C handed in is all NaN: it must not be read.
    """
    name, seed = "FP64 epilogue", fresh_seed(seed)
    rng = np.random.default_rng(seed)
    # |alpha| above 1 and below, and 0; beta 0 and not in every combination (the NaN and Inf pairs meet alpha = 0)
    scalars = [(1.0, 0.0), (-1.5, 0.75), (0.5, 0.0), (3.0, -1.0), (-0.75, 1.25), (0.0, 1.25), (0.0, 0.0)]
    count = 0
    cases = _epilogue_cases(seed)
    cases.append(("C cancels alpha times the sum to 2^-30 of it, " + cases[6][0], *cases[6][1:]))
    for index, (case, terms, offsets, e, f) in enumerate(cases):
        alpha, beta = scalars[index % len(scalars)]
        c = rng.standard_normal((e.shape[0], f.shape[0]))
        if case.startswith("C cancels"):
            alpha, beta = -1.5, 0.75
            with np.errstate(invalid="ignore", over="ignore"):
                x = epilogue_reference(terms, offsets, e, f, alpha, 0.0, c)
            c = np.where(np.isfinite(x), -x * (1.0 + np.ldexp(rng.uniform(-1, 1, x.shape), -30)) / beta, c)
        c_arg = np.full_like(c, np.nan) if beta == 0.0 else c.copy()  # with beta = 0, C must not be read
        got = _stage_fn_result(fn, terms, offsets, e, f, alpha, beta, c_arg, stage=name)
        want = epilogue_reference(terms, offsets, e, f, alpha, beta, c)
        if count == 0 and want.any() and untouched(got):
            return not_yet(name, "C is all zero")
        label = f"{case}, alpha={alpha}, beta={beta}"
        if beta == 0.0:
            rerun = lambda: _stage_fn_result(fn, terms, offsets, e, f, alpha, beta, np.zeros_like(c))  # noqa: B023, E731
            c_read_when_beta_is_zero(name, got, want, rerun, names=("row", "col"), case=label)
        with np.errstate(invalid="ignore", over="ignore"):
            x = epilogue_reference(terms, offsets, e, f, 1.0, 0.0, c)  # what alpha multiplies
        want = quick_return(got, want, alpha, beta, c)
        bound = epilogue_bound(x, c, alpha, beta, want)
        hint = ""
        if got.shape == want.shape and got.dtype == want.dtype:
            with np.errstate(invalid="ignore"):
                ok = np.abs(got - want) <= bound
            if not (ok | (got == want) | (np.isnan(got) & np.isnan(want))).all():
                hint = alpha_zero_hint(got, want, alpha, beta)
                hint = hint or _epilogue_hint(got, terms, offsets, e, f, alpha, beta, c, bound)
        compare(name, got, want, bound=bound, names=("row", "col"), case=label, hint=hint)
        count += 1
    return passed(name, count, seed, DOMAIN_EPILOGUE)


# ------------------------------------------------------------------------------------------------------------
# 3b-3d: the whole emulated GEMM, stage by stage
# ------------------------------------------------------------------------------------------------------------


_STAGE_ORDER = ["a_slices", "b_slices", "products", "diagonals"]


def _gemm_contract(args: tuple, kwargs: dict) -> list[tuple[tuple, dict]]:
    """The driver's arguments at the plan's own block and at :data:`OTHER_TILE` (3b-3d check that one at the last of
    :data:`GEMM_SHAPES`, with 7 slices)."""
    return [(args, {**kwargs, "block": None}), ((7,), {"shapes": [GEMM_SHAPES[-1]], "block": dict(OTHER_TILE)})]


@checker("Ozaki-I GEMM", needs=GEMM_NEEDS, driver=_gemm_driver, shared=True, contract=_gemm_contract)
def check_ozaki_gemm(
    run: Callable[..., Any],
    slices: int = 7,
    *,
    shapes: Sequence[tuple[int, int, int]] = GEMM_SHAPES,
    stages: Callable[[], dict[str, Any]] | None = None,
    block: dict[str, int] | None = None,
    seed: int | None = None,
    adversarial: bool = True,
) -> CheckResult:
    """``run(a, b, c, alpha, beta)`` returns C; ``stages()`` (optional) returns the intermediate arrays it kept.

    Stage names understood: ``e``, ``f``, ``a_slices``, ``b_slices``, ``diagonals`` or ``products``. They are
    compared first, so that a wrong slice is reported as a wrong slice rather than as a wrong C. With beta = 0
    the C handed to ``run`` is all NaN: it must not be read. Domain: :data:`DOMAIN_GEMM` (the count is the plan's:
    a notebook checks several plans). ``block``: the plan's OzakiConfig fields when not its default (the contract's
    other: :data:`OTHER_TILE`), for the messages and the race run.
    """
    name, seed = "Ozaki-I GEMM", fresh_seed(seed)
    rng = np.random.default_rng(seed)
    tile = (block or {}).get("tile_m", 128), (block or {}).get("tile_n", 128)  # tile_config: 128 x 128 everywhere
    count = 0
    for m, n, k in shapes:
        cases = list(_cases(m, k, n, seed + count, nonfinite=True))
        chosen = cases if adversarial else cases[:2] + cases[-2:]
        scalars = [GEMM_SCALARS[(count + i) % len(GEMM_SCALARS)] for i in range(len(chosen))]
        chosen, scalars = chosen + cases[-2:], scalars + list(NONFINITE_SCALARS)  # the NaN and Inf pairs, alpha != 0
        for (case, a, b), (alpha, beta) in zip(chosen, scalars, strict=True):
            c = rng.standard_normal((m, n))
            label = f"{case} {m}x{n}x{k}, {slices} slices, alpha={alpha}, beta={beta}"
            got = output(run(a, b, np.full_like(c, np.nan) if beta == 0.0 else c.copy(), alpha, beta), "C", label)
            ref = _reference.ozaki_stages(a, b, slices)
            want = reconstruct(ref.diagonals, ref.e, ref.f, alpha, beta, c)
            x = reconstruct(ref.diagonals, ref.e, ref.f)  # what alpha multiplies: alpha = 1, beta = 0
            kept = stages() if stages is not None else {}
            if beta == 0.0:  # before "not written": a C that was read makes an all-NaN result too

                def rerun(a=a, b=b, c=c, alpha=alpha) -> Any:
                    return run(a, b, np.zeros_like(c), alpha, 0.0)

                c_read_when_beta_is_zero("C", got, want, rerun, names=("row", "col"), case=label)
            if count == 0 and want.any():
                blank = [s for s, v in kept.items() if s in _STAGE_ORDER and untouched(v)]  # shifts may be 0
                if blank:
                    return not_yet(name, f"stage '{min(blank, key=_STAGE_ORDER.index)}' is all zero")
                if untouched(got) or untouched(got, float("nan")):
                    return not_yet(name, "C is all zero or was not written")
            if kept:
                _compare_stages(kept, ref, label, tile)
            want = quick_return(got, want, alpha, beta, c)
            bound = epilogue_bound(x, c, alpha, beta, want)

            def recount(other: int, a=a, b=b, c=c, alpha=alpha, beta=beta) -> np.ndarray:
                st = _reference.ozaki_stages(a, b, other)
                return reconstruct(st.diagonals, st.e, st.f, alpha, beta, c)

            hint = _gemm_hint(got, want, bound, alpha, beta, kept, recount, slices, shifts=(ref.e, ref.f))
            compare("C", got, want, bound=bound, names=("row", "col"), case=label, hint=hint)
            count += 1
    other = "" if not block else "; block " + ", ".join(f"{key} {value}" for key, value in block.items())
    return passed(name, count, seed, DOMAIN_GEMM + f"; {slices} slices; shapes {plain(list(shapes))}{other}")


def _gemm_hint(
    got: np.ndarray,
    want: np.ndarray,
    bound: np.ndarray,
    alpha: float,
    beta: float,
    kept: dict[str, Any],
    recount: Callable[[int], np.ndarray] | None = None,
    slices: int = 0,
    shifts: tuple[np.ndarray, np.ndarray] | None = None,
) -> str:
    """What a wrong C is, where the checker tested it: an alpha = 0 shortcut; a line of A or B whose shift is the
    sentinel (``shifts``: the reference's e and f) without its NaN; C of one slice more or fewer (``recount(s)``),
    recomputed; the stages before C, when the plan kept them, compared right (so C's own step is wrong); whole tiles
    still holding the poison. "" else."""
    got = np.asarray(got)
    if got.shape != want.shape:
        return ""
    with np.errstate(invalid="ignore"):
        wrong = ~((np.abs(got - want) <= bound) | (got == want) | (np.isnan(got) & np.isnan(want)))
    if not wrong.any():
        return ""
    hints = [alpha_zero_hint(got, want, alpha, beta)]
    if not hints[0] and shifts is not None and (sentinel := _sentinel_hint(got, want, *shifts)):
        return sentinel
    for other in (slices - 1, slices + 1) if recount is not None and not hints[0] else ():
        if _slicing.MIN_SLICES <= other <= _slicing.MAX_SLICES:
            value = recount(other)
            with np.errstate(invalid="ignore"):
                same = (np.abs(got - value) <= bound) | (got == value) | (np.isnan(got) & np.isnan(value))
            if same.all():
                hints.append(f"C is what {other} slices give: this plan's count is {slices}; take it from the plan")
                break
    if not any(hints) and any(stage in kept for stage in ("products", "diagonals")):
        hints.append("every stage the plan kept came out right (compared before C): the step from them to C is wrong")
    poison = np.isnan(got) & ~np.isnan(want)
    tiles = [t for t in _tiles_where(poison, 128) if poison[t[0] : t[0] + 128, t[1] : t[1] + 128].all()]
    if tiles and (poison == _tile_mask(poison.shape, tiles, 128)).all():
        hints.append(f"the tiles of C at rows and columns {plain(tiles[:6])} still hold the poison: never written")
    return "; ".join(h for h in hints if h)


def _sentinel_hint(got: np.ndarray, want: np.ndarray, e: np.ndarray, f: np.ndarray) -> str:
    """The first row of A and column of B whose shift is the sentinel and whose line of C is not all NaN where it
    must be, named with an entry; "" when there is none."""
    missed = np.isnan(want) & ~np.isnan(got)
    said = []
    for axis, shift, line, operand, index in ((1, e, "row", "A", "e"), (0, f, "column", "B", "f")):
        lines = np.flatnonzero((np.asarray(shift) == NONFINITE_SHIFT) & missed.any(axis=axis))
        if lines.size:
            i = int(lines[0])
            j = int(np.flatnonzero(missed[i] if axis == 1 else missed[:, i])[0])
            at = (i, j) if axis == 1 else (j, i)
            said.append(
                f"{line} {i} of {operand} holds a NaN or an Inf (its shift {index}[{i}] is the non-finite sentinel "
                f"NONFINITE_SHIFT = {NONFINITE_SHIFT}): C's {line} {i} must be NaN, got C[{at[0]}, {at[1]}] = "
                f"{float(got[at])!r}"
            )
    if not said:
        return ""
    return "; ".join(said) + (
        "; write NaN where e[row] or f[col] is NONFINITE_SHIFT, whatever alpha and beta: that line's digits are zero, "
        "so scaling them gives 0 (or beta C), not NaN"
    )


def _tiles_where(mask: np.ndarray, size: int) -> list[tuple[int, int]]:
    """The (first row, first column) of every size x size tile of ``mask`` that holds a True."""
    return [
        (i, j)
        for i in range(0, mask.shape[0], size)
        for j in range(0, mask.shape[1], size)
        if mask[i : i + size, j : j + size].any()
    ]


def _tile_mask(shape: tuple[int, ...], tiles: list[tuple[int, int]], size: int) -> np.ndarray:
    out = np.zeros(shape, bool)
    for i, j in tiles:
        out[i : i + size, j : j + size] = True
    return out


def _compare_stages(kept: dict[str, Any], ref: _reference.OzakiStages, case: str, tile: tuple[int, int]) -> None:
    """The stages the plan kept against the reference; ``tile``: the plan's block (rows, columns of C), for the
    products' hint."""
    S, m, k = ref.a_slices.shape
    n = ref.b_slices.shape[1]
    view = {name: np.asarray(value) for name, value in kept.items()}
    if "e" in view:
        compare("exponent shifts of A", view["e"][:m], ref.e, names=("row",), case=case)
    if "f" in view:
        compare("exponent shifts of B", view["f"][:n], ref.f, names=("col",), case=case)
    if "a_slices" in view:
        compare("slices of A", view["a_slices"][:S, :m, :k], ref.a_slices, names=SLICE_NAMES, case=case)
    if "b_slices" in view:
        compare("slices of B", view["b_slices"][:S, :n, :k], ref.b_slices, names=("slice", "col", "row"), case=case)
    if "diagonals" in view:
        compare(
            "anti-diagonal sums",
            view["diagonals"][:, :m, :n],
            ref.diagonals,
            names=("diagonal", "row", "col"),
            case=case,
            hint="each diagonal d accumulates A_s @ B_t for s + t == d: check the loop bounds and indices",
        )
    if "products" in view:
        want = _products.slice_products(ref.a_slices, ref.b_slices)
        got = view["products"][:, :m, :n]
        compare(
            "slice products",
            got,
            want,
            names=("product", "row", "col"),
            case=case,
            hint="" if np.array_equal(got, want) else _products_hint(got, want, ref, tile),
        )


_ZERO = "zero"  # a product (or a tile of one) that is all zero and no pair of the slices gives
_BY_TILE = "by tile"  # each tile of C's is some A_s @ B_t, not the same pair in every tile
_NONE = "none"  # some tile is no A_s @ B_t of the slices, nor zero


def _pairs_held(
    got: np.ndarray, ref: _reference.OzakiStages, tile: tuple[int, int]
) -> tuple[list[Any], list[list[set[Any]]]]:
    """What each product the plan kept holds: the slice pairs (s, t), 0 <= s, t < S, whose product A_s @ B_t it
    equals in every tile of the plan's block (``tile``: rows, columns); else :data:`_ZERO`, :data:`_BY_TILE` or
    :data:`_NONE`. Beside it, per product, the pairs each tile equals (``None`` standing for a tile all zero that
    no pair gives)."""
    S, m, k = ref.a_slices.shape
    n = ref.b_slices.shape[1]
    a, b = ref.a_slices.reshape(S * m, k).astype(np.float64), ref.b_slices.reshape(S * n, k).astype(np.float64)
    table = (a @ b.T).reshape(S, m, S, n).transpose(0, 2, 1, 3).reshape(S * S, m, n)  # exact: below 2^53
    w = np.random.default_rng(0).random((m, n))
    tiles = [(i, j) for i in range(0, m, tile[0]) for j in range(0, n, tile[1])]
    views = [(slice(i, i + tile[0]), slice(j, j + tile[1])) for i, j in tiles]
    keys = [table[:, r, c].reshape(S * S, -1) @ w[r, c].ravel() for r, c in views]  # a fingerprint of each pair
    held, by_tile = [], []
    for product in np.asarray(got, np.float64):
        sets = []
        for (r, c), key in zip(views, keys, strict=True):
            part = product[r, c]
            near = np.flatnonzero(np.isclose(key, part.ravel() @ w[r, c].ravel(), rtol=1e-9, atol=1e-9))
            pairs = {(int(i) // S, int(i) % S) for i in near if np.array_equal(table[i][r, c], part)}
            sets.append(pairs or ({None} if not part.any() else set()))
        common = set.intersection(*sets)
        if common - {None}:
            held.append(common - {None})
        elif common:
            held.append(_ZERO)
        else:
            held.append(_BY_TILE if all(sets) else _NONE)
        by_tile.append(sets)
    return held, by_tile


def _pair(s: int, t: int) -> str:
    return f"A_{s} @ B_{t}"


def _holds(held: Any, by_tile: list[set[Any]], tile: tuple[int, int], n: int) -> str:
    """What one product holds, in words."""
    if isinstance(held, set):
        return " or ".join(_pair(*pair) for pair in sorted(held)) + (" (equal here)" if len(held) > 1 else "")
    if held == _ZERO:
        return "zero (no pair of the slices gives that: likely a slice index below 0 or above S - 1, read as zeros)"
    if held == _NONE:
        return "no product A_s @ B_t of the slices"
    tiles_n = -(-n // tile[1])
    first = next(index for index, pairs in enumerate(by_tile) if pairs - {None})  # a tile that some pair gives
    shown = sorted(by_tile[first] - {None})[0]
    other = next(index for index, pairs in enumerate(by_tile) if shown not in pairs)  # one it does not give
    said = []
    for index in (first, other):
        i, j = divmod(index, tiles_n)
        pairs = sorted(by_tile[index] - {None})
        what = _pair(*(shown if index == first else pairs[0])) if pairs else "zero"
        said.append(f"{what} in tile ({i}, {j}) (rows from {i * tile[0]}, columns from {j * tile[1]})")
    return ", ".join(said) + ": not the same pair in every tile"


# Named mistakes of the products kernel: each maps product p (the contract's pair (s, t) on diagonal d = s + t, which
# starts at p = d(d+1)/2) to the pair that mistake multiplies, and says what it is. Most specific first.
_PRODUCT_MISTAKES: list[tuple[Callable[[int, int, int, int, int], tuple[int, int]], str]] = [
    (
        lambda p, s, t, d, S: (0, 0),
        "every product is A_0 @ B_0, product 0's pair: each block derives the pair of its own product p = "
        "blockIdx.z (diagonal by diagonal, s ascending)",
    ),
    (
        lambda p, s, t, d, S: (t, s),
        "every wrong product p is A_t @ B_s for the contract's (s, t): s and t are swapped, or s runs down the "
        "diagonal; s is the slice of A (get_tile's first pair) and ascends along each diagonal, t = d - s",
    ),
    (
        lambda p, s, t, d, S: (d, -1) if s == 0 and d > 0 else (s, t),
        "the wrong products are the first of each diagonal d >= 1 (p = d(d+1)/2 = 1, 3, 6, ...), the others right: "
        "there your kernel is still on diagonal d - 1, which ends at p - 1; the test that moves p on to diagonal d "
        "is off by one at p = d(d+1)/2 exactly",
    ),
    (  # the same mistake in a kernel whose loop never moves p = 0 off diagonal 0 (a `for` loop of p steps)
        lambda p, s, t, d, S: (-1, d + 2) if s == d and d > 0 else (s, t),
        "the wrong products are the last of each diagonal d >= 1 (p = d(d+1)/2 + d = 2, 5, 9, ...), the others "
        "right: there your kernel has already moved on to diagonal d + 1, which starts at p + 1",
    ),
    (
        lambda p, s, t, d, S: (-1, d + 2) if s == d else (s, t),
        "the wrong products are the last of each diagonal d (p = d(d+1)/2 + d = 0, 2, 5, ...), the others right: "
        "there your kernel has already moved on to diagonal d + 1, which starts at p + 1",
    ),
    (
        lambda p, s, t, d, S: (s + d, -s),
        "your products are A_(s+d) @ B_(-s) for the contract's (s, t) on diagonal d (a negative slice reads as "
        "zeros): as if diagonal d started at p = d(d-1)/2; diagonals 0 to d - 1 hold 1 + 2 + ... + d products, so "
        "diagonal d starts at p = d(d+1)/2",
    ),
    (
        lambda p, s, t, d, S: (s - 1, t + 1),
        "your products are A_(s-1) @ B_(t+1) for the contract's (s, t): s is one too small, as if diagonal d "
        "started at p = d(d+1)/2 + 1; it starts at d(d+1)/2, with s = 0",
    ),
    (
        lambda p, s, t, d, S: (s + 1, t - 1),
        "your products are A_(s+1) @ B_(t-1) for the contract's (s, t): s is one too large, as if diagonal d "
        "started at p = d(d+1)/2 - 1; it starts at d(d+1)/2, with s = 0",
    ),
    (
        lambda p, s, t, d, S: (0, t),
        "every wrong product p is A_0 @ B_t: t is right and s stayed 0; s = p - d(d+1)/2 is p's place on its diagonal",
    ),
    (
        lambda p, s, t, d, S: (0, d),
        "every wrong product p is A_0 @ B_d, the first of its diagonal d: s stayed 0 (and t = d - s = d); "
        "s = p - d(d+1)/2 is p's place on its diagonal",
    ),
    (
        lambda p, s, t, d, S: (s, 0),
        "every wrong product p is A_s @ B_0: s is right and t stayed 0; t = d - s",
    ),
    (
        lambda p, s, t, d, S: (s, p - s),
        "your products are A_s @ B_(p-s): s is right, t is not; t = d - s, with d the diagonal of p, not p - s",
    ),
    (
        lambda p, s, t, d, S: (p - p * (p + 1) // 2, p * (p + 1) // 2),
        "your products are what diagonal d = p gives (products 0 and 1 right, the others on slices outside 0 to "
        "S - 1, read as zeros): diagonal d holds d + 1 products, so p's diagonal is the last d with d(d+1)/2 <= p",
    ),
    (
        lambda p, s, t, d, S: (p // S, p % S),
        "your products are A_(p // S) @ B_(p % S): p numbers only the pairs with s + t < S, diagonal by diagonal, "
        "not an S x S grid row by row",
    ),
    (
        lambda p, s, t, d, S: (p % S, p // S),
        "your products are A_(p % S) @ B_(p // S): p numbers only the pairs with s + t < S, diagonal by diagonal, "
        "not an S x S grid",
    ),
]


def _named_products_mistake(
    got: np.ndarray, wrong: set[int], held: list[Any], terms: list[tuple[int, int]], S: int
) -> str:
    """The first of :data:`_PRODUCT_MISTAKES` that gives every product the plan kept: its pair where that pair is one
    of the slices (the right pair only where the product is right), and where it is not, a product all zero or one
    that no pair gives (what such a tile loads); "" when none does."""
    for mistake, text in _PRODUCT_MISTAKES:
        fits = True
        for p, (s, t) in enumerate(terms):
            pair = mistake(p, s, t, s + t, S)
            if pair == (s, t):
                fits = p not in wrong
            elif 0 <= pair[0] < S and 0 <= pair[1] < S:
                fits = isinstance(held[p], set) and pair in held[p]
            else:
                fits = p in wrong and (held[p] in (_ZERO, _NONE) or not np.any(got[p]))
            if not fits:
                break
        if fits:
            return text
    return ""


def _products_hint(got: np.ndarray, want: np.ndarray, ref: _reference.OzakiStages, tile: tuple[int, int]) -> str:
    """Which pair of slices the first wrong product multiplied, against the contract's pair for it, and the mistake
    that gives every product the plan kept, when one of :data:`_PRODUCT_MISTAKES` does (else what the contract's
    order is). ``tile``: the plan's block (rows, columns), to tell a pair that depends on the block's tile."""
    S = ref.a_slices.shape[0]
    terms = _products.product_terms(S)
    if got.shape != want.shape:
        return f"the plan kept {len(got)} products, {len(terms)} expected: each (s, t) with s + t < S once, by diagonal"
    wrong = [p for p in range(len(terms)) if not np.array_equal(got[p], want[p])]
    held, by_tile = _pairs_held(got, ref, tile)
    p = next((q for q in wrong if held[q] == _BY_TILE), wrong[0])
    s, t = terms[p]
    d = s + t
    shown = ", ".join(map(str, wrong[:8])) + (", ..." if len(wrong) > 8 else "")
    said = (
        f"{len(wrong)} of {len(terms)} products wrong (p = {shown}); product {p} should be {_pair(s, t)} (diagonal "
        f"d = s + t = {d}, which starts at p = d(d+1)/2 = {d * (d + 1) // 2}; s = {s} is p's place on it), your "
        f"kernel's is {_holds(held[p], by_tile[p], tile, got.shape[2])}"
    )
    if held[p] == _BY_TILE:
        return said + "; (s, t) must come from p = blockIdx.z alone, the same in every block of product p"
    named = _named_products_mistake(got, set(wrong), held, terms, S)
    if named:
        return f"{said}; {named}"
    return said + (
        "; product p is A_s @ B_t on diagonal d = s + t: the diagonals in order, each from s = 0 to s = d, so "
        "diagonal d starts at p = d(d+1)/2 and s = p - d(d+1)/2 (utilities.ozaki.products.product_terms)"
    )

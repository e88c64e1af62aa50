"""Ozaki-I's checkers (3a, 3b) against wrong versions written for issue 35 (not the course's mutants in
``tools/mistakes``): each is rejected on every seed, by the stage it breaks, with a message that names the mistake;
the correct alternatives pass. One of each kind the issue names: a rounding or an integer overflow that a guessed
hint would misname (an int8 digit array is no DBL_MAX overflow), an int32 sum that only K = 131071 shows, a float32
accumulator, C read although beta = 0, a write outside the output, a bound on the loop that only some d show.

3a's functions and 3b's digits are built from the solution's source as ``tools/mutation_test.py`` builds them (the
device function compiled for the CPU, where a division by zero raises instead of giving inf); 3b's epilogue is a
NumPy stand-in for the kernel (the checker takes any function of its contract), so that every seed runs in seconds.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from utilities import mutants
from utilities.guard import Canvas
from utilities.operands import NONFINITE_SHIFT
from utilities.ozaki import check

ROOT = Path(__file__).resolve().parent.parent
SEEDS = (1, 2, 3, 4, 5)


SLICE = "3a slice_number"
TERMS = "3a diagonal_terms"
_CARRY = """    for s in range(slices - 1, 0, -1):
        if digits[s] > 127:
            digits[s] -= 256
            digits[s - 1] += 1
        elif digits[s] < -128:
            digits[s] += 256
            digits[s - 1] -= 1"""

WRONG = [
    mutants.Mistake(SLICE, "rounding", "the last digit as int(t + 0.5): toward zero for negative t",
                    old="digits.append(round(t))", new="digits.append(int(t + 0.5))", message="int(t + 0.5)"),
    mutants.Mistake(SLICE, "integer overflow", "the digits kept in an int8 array before the carry (bytes, as on a GPU)",
                    old=_CARRY, new="    import numpy as np\n    digits = [int(v) for v in np.array(digits, np.int8)]\n"
                    + _CARRY, message="does not fit its type", stage=mutants.RUNNING),
    mutants.Mistake(SLICE, "float overflow", "scales in two steps: ldexp by 7, then a division by 2.0 ** e",
                    old="t = math.ldexp(x, 7 - e)", new="t = math.ldexp(x, 7) / 2.0**e", message="math.ldexp",
                    stage=mutants.RUNNING),
    mutants.Mistake(SLICE, "carry", "carries only digits above 127: a negative x's digits below -128 stay",
                    old="        elif digits[s] < -128:\n            digits[s] += 256\n"
                        "            digits[s - 1] -= 1\n",
                    new="", message="carry both ways"),
    mutants.Mistake("3b split_digits (device function)", "float underflow",
                    "v scaled in two steps, the second a division by 2.0 ** e: 0 for a subnormal row's shift",
                    old="v = math.ldexp(x, int(8 * SLICES - 1 - e))", new="v = math.ldexp(x, 8 * SLICES - 1) / 2.0**e",
                    message="underflowed to 0", stage=mutants.RUNNING),  # compiled for the CPU a division by 0 raises
    mutants.Mistake(TERMS, "edge", "bounds s by the slices but not t = d - s",
                    old="return [(s, d - s) for s in range(d + 1) if s < slices and d - s < slices]",
                    new="return [(s, d - s) for s in range(min(d, slices - 1) + 1)]",
                    message="both s and t must stay below"),
    mutants.Mistake(TERMS, "off by one", "starts s at d - slices instead of d - (slices - 1)",
                    old="return [(s, d - s) for s in range(d + 1) if s < slices and d - s < slices]",
                    new="return [(s, d - s) for s in range(max(0, d - slices), min(d, slices - 1) + 1)]",
                    message="s starts at d - (slices - 1)"),
]  # fmt: skip

RIGHT = [
    mutants.Alternative(SLICE, "the carry through divmod", old=_CARRY, new="""    for s in range(slices - 1, 0, -1):
        q, r = divmod(digits[s] + 128, 256)
        digits[s] = r - 128
        digits[s - 1] += q"""),
    mutants.Alternative(SLICE, "int() truncates toward zero as math.trunc does", old="u = math.trunc(t)",
                        new="u = int(t)"),
    mutants.Alternative(TERMS, "t over its range, then sorted by s",
                        old="return [(s, d - s) for s in range(d + 1) if s < slices and d - s < slices]",
                        new="return [(d - t, t) for t in range(slices - 1, -1, -1) if 0 <= d - t < slices]"),
]  # fmt: skip


@pytest.mark.parametrize("mistake", WRONG, ids=lambda m: m.what)
def test_each_wrong_version_is_rejected_on_every_seed_with_its_name(mistake, judged):
    verdict = judged(mistake, SEEDS)
    assert verdict.status == "rejected", verdict.line() + "\n" + verdict.message
    if mistake.kind == "integer overflow":
        assert "DBL_MAX" not in verdict.message and "ldexp" not in verdict.message


@pytest.mark.parametrize("alternative", RIGHT, ids=lambda a: a.what)
def test_each_correct_alternative_passes_on_every_seed(alternative, judged):
    verdict = judged(alternative, SEEDS)
    assert verdict.status == "accepted", verdict.line() + "\n" + verdict.message


def test_trunc_code_with_a_wrong_tie_rule_is_not_told_about_floor(judged):
    """Half up and floor extraction explain the same negative tie; the probe tells them apart: only the first."""
    half_up = mutants.Mistake(SLICE, "rounding", "half up", old="digits.append(round(t))",
                              new="digits.append(math.floor(t + 0.5))", message="not half up")  # fmt: skip
    verdict = judged(half_up, SEEDS)
    assert verdict.status == "rejected" and "floor is not exact" not in verdict.message


def test_a_digit_mistake_no_hint_recomputes_is_told_by_its_entries_alone(judged):
    """Issue 41: a wrong digit on a row of the carry's limits was told about a carry, which no test had found; a
    hint is only given where a recomputed mistake gives the attendee's digits."""
    odd = mutants.Mistake(SLICE, "rounding", "the last digit one too high at 5 slices", old="digits.append(round(t))",
                          new="digits.append(round(t) + (slices == 5))", message="")  # fmt: skip
    verdict = judged(odd, SEEDS)
    assert verdict.status == "rejected" and "hint:" not in verdict.message, verdict.message


@pytest.mark.parametrize(
    ("rule", "says"),
    [
        ("round(t) if t >= 0 else -math.floor(-t + 0.5)", "a negative tie of the last digit rounds away from zero"),
        ("round(t) if t >= 0 else math.floor(t + 0.5)", "a negative tie of the last digit rounds toward zero"),
        ("math.ceil(t - 0.5)", "half down"),
        ("int(math.copysign(math.ceil(abs(t) - 0.5), t))", "half toward zero"),
    ],
)
def test_a_tie_rounded_the_wrong_way_is_named_by_its_rule(rule, says, judged):
    wrong = mutants.Mistake(SLICE, "rounding", rule, old="digits.append(round(t))", new=f"digits.append({rule})",
                            message=says)  # fmt: skip
    verdict = judged(wrong, SEEDS)
    hint = verdict.message.split("\nhint: ")[1]
    assert verdict.status == "rejected" and "carr" not in hint, verdict.message


def test_a_power_of_two_past_the_doubles_is_named_only_where_the_other_rows_are_right(judged):
    """3b's device function scaled by 2.0 ** (8 S - 1 - e): Inf for a subnormal row, whose digits alone are wrong."""
    wrong = mutants.Mistake("3b split_digits (device function)", "edge", "2.0 ** n",
                            old="v = math.ldexp(x, int(8 * SLICES - 1 - e))", new="v = x * 2.0 ** (8 * SLICES - 1 - e)",
                            message="at an end of the FP64 range")  # fmt: skip
    assert judged(wrong, SEEDS[:2]).status == "rejected"
    assert check._range_hint([-1066], 7, True) and not check._range_hint([-1066, 3], 7, True)
    assert not check._range_hint([-1066], 7, False), "a wrong ordinary row: not the power of two alone"


# --- 3b's FP64 epilogue: a NumPy stand-in for the kernel, right and wrong ------------------------------------------


def epilogue(sum_dtype=np.int64, acc_dtype=np.float64, read_c: bool = False, stray: bool = False):
    """``fn(terms, offsets, e, f, alpha, beta, c)`` as the kernel computes C, with the chosen mistakes."""

    def fn(terms, offsets, e, f, alpha, beta, c):
        acc = np.zeros(terms.shape[1:], acc_dtype)
        for d in range(len(offsets) - 2, -1, -1):
            diagonal = terms[offsets[d] : offsets[d + 1]].sum(axis=0, dtype=sum_dtype).astype(np.float64)
            acc = (acc + diagonal * 2.0 ** (-8 * d)).astype(acc_dtype)
        bad = (e[:, None] == NONFINITE_SHIFT) | (f[None, :] == NONFINITE_SHIFT)
        shift = np.where(bad, 0, e[:, None].astype(np.int64) + f[None, :].astype(np.int64) - 14)
        with np.errstate(over="ignore", invalid="ignore"):
            out = alpha * np.ldexp(acc.astype(np.float64), shift)
            if beta != 0.0 or read_c:
                out = out + beta * c
        out = np.where(bad, np.nan, out)
        if not stray:
            return out
        canvas = Canvas(out.shape, np.float64, fill=np.nan)
        canvas.out[...] = out
        canvas.buffer[canvas.guard + canvas.size] = 0.0  # the next row's first entry: past the last row here
        return canvas.written()

    return fn


@pytest.mark.parametrize(
    ("what", "fn", "stage", "says"),
    [
        ("each diagonal summed in int32", epilogue(sum_dtype=np.int32), "FP64 epilogue", "summed in int32"),
        ("acc in float32", epilogue(acc_dtype=np.float32), "FP64 epilogue", "accumulated in float32"),
        ("C read when beta = 0", epilogue(read_c=True), "FP64 epilogue", "C was read although beta = 0"),
        ("a store one past the output", epilogue(stray=True), "FP64 epilogue", "wrote outside its output"),
    ],
)
@pytest.mark.parametrize("seed", SEEDS)
def test_each_wrong_epilogue_is_rejected_on_every_seed_with_its_name(what, fn, stage, says, seed):
    with pytest.raises(check.CheckFailure) as info:
        check.check_epilogue(fn, seed=seed)
    assert info.value.stage == stage and says in str(info.value), str(info.value)


@pytest.mark.parametrize("sums", [np.int64, np.float64], ids=["int64 sums", "float64 sums"])
@pytest.mark.parametrize("seed", SEEDS)
def test_correct_epilogues_pass_on_every_seed(sums, seed):
    assert check.check_epilogue(epilogue(sum_dtype=sums), seed=seed).status == "passed"


# --- issue 41: alpha = 0 in every combination with beta, sums exactly zero --------------------------------------


def epilogue_shortcut(kind: str):
    """The right epilogue but for one shortcut: ``"alpha 0: return"`` leaves C unwritten where alpha = 0, ``"alpha 0:
    zero"`` writes 0 there (beta C dropped), ``"alpha 0: quick"`` writes beta C (BLAS's quick return: right),
    ``"zero sum"`` writes 0 where the sum is 0 (beta C dropped there)."""
    right = epilogue()

    def fn(terms, offsets, e, f, alpha, beta, c):
        if alpha == 0.0 and kind.startswith("alpha 0"):
            out = np.full(c.shape, np.nan)
            if kind == "alpha 0: zero":
                out[...] = 0.0
            elif kind == "alpha 0: quick":
                out[...] = beta * c if beta != 0.0 else 0.0
            return out
        out = right(terms, offsets, e, f, alpha, beta, c)
        if kind == "zero sum":
            zero = (terms == 0).all(axis=0)
            out = np.where(zero & ~np.isnan(out), 0.0, out)
        return out

    return fn


@pytest.mark.parametrize(
    ("kind", "says"),
    [
        ("alpha 0: return", "with alpha = 0 C was left unwritten"),
        ("alpha 0: zero", "with alpha = 0 C came out 0"),
        ("zero sum", ""),
    ],
)
@pytest.mark.parametrize("seed", SEEDS[:3])
def test_an_alpha_zero_or_zero_sum_shortcut_is_rejected(kind, says, seed):
    with pytest.raises(check.CheckFailure) as info:
        check.check_epilogue(epilogue_shortcut(kind), seed=seed)
    assert info.value.stage == "FP64 epilogue" and says in str(info.value), str(info.value)


@pytest.mark.parametrize("seed", SEEDS[:3])
def test_blas_quick_return_passes_the_epilogue_and_the_gemm_checks(seed):
    assert check.check_epilogue(epilogue_shortcut("alpha 0: quick"), seed=seed).status == "passed"

    def gemm(a, b, c, alpha, beta):
        if alpha == 0.0:
            return beta * c if beta != 0.0 else np.zeros_like(c)
        return check._reference.ozaki_gemm_ref(a, b, 7, alpha, beta, c, nonfinite="propagate")

    assert check.check_ozaki_gemm(gemm, 7, shapes=[(40, 24, 56)], seed=seed).status == "passed"


def test_every_alpha_and_beta_combination_meets_the_gemm_check():
    combos = {(alpha == 0.0, beta == 0.0, alpha < 0) for alpha, beta in check.GEMM_SCALARS}
    assert {(True, True, False), (True, False, False), (False, True, False), (False, False, False)} <= combos
    assert {(False, True, True), (False, False, True)} <= combos, "a negative alpha with beta 0 and not"
    cases = 2 + 14 + 2 + 2  # random and spread, adversarial, the ends of the range, NaN and Inf
    nonfinite = [check.GEMM_SCALARS[i % len(check.GEMM_SCALARS)] for i in (cases - 2, cases - 1)]
    assert all(alpha == 0.0 for alpha, _ in nonfinite), "the NaN and Inf pairs meet alpha = 0"
    again = {(alpha < 0, beta == 0.0) for alpha, beta in check.NONFINITE_SCALARS if alpha != 0.0}
    assert {(True, True), (False, False)} <= again, "and again alpha != 0 (either sign), with beta 0 and not"

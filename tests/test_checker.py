"""The checkers pass correct stages, reject broken ones naming the stage, and spot unfinished exercises."""

from __future__ import annotations

import math

import numpy as np
import pytest

from utilities import ozaki
from utilities.checker import PLACEHOLDER, CheckFailure
from utilities.ozaki import check

# --- correct implementations pass --------------------------------------------------------------------------


def test_reference_stages_pass_every_checker():
    assert check.check_slicing(ozaki.slice_rows, seed=1)
    assert check.check_diagonals(ozaki.diagonal_sums, seed=2)
    assert check.check_epilogue(ozaki.reconstruct, seed=3)
    assert check.check_diagonal_terms(lambda d, S: [p for p in ozaki.product_terms(S) if sum(p) == d])


def reference_run(slices=7):
    return lambda a, b, c, alpha, beta: ozaki.ozaki_gemm_ref(a, b, slices, alpha, beta, c, nonfinite="propagate")


def test_end_to_end_checker_passes_the_reference_and_compares_kept_stages():
    kept = {}

    def run(a, b, c, alpha, beta):
        st = ozaki.ozaki_stages(a, b, 7)
        kept.update(e=st.e, f=st.f, a_slices=st.a_slices, b_slices=st.b_slices, diagonals=st.diagonals)
        return ozaki.reconstruct(st.diagonals, st.e, st.f, alpha, beta, c)

    assert check.check_ozaki_gemm(run, 7, shapes=[(40, 24, 56)], stages=lambda: kept, seed=4)


# --- broken implementations are rejected, and the failing stage is named -------------------------------------


def digits_with(extract=math.trunc, last=round, carry=True):
    """Notebook 3a's digit routine, with one of its three steps swappable for a broken one."""

    def digits_of(x, e, slices):
        t = math.ldexp(x, 7 - e)
        out = []
        for _ in range(slices - 1):
            u = extract(t)
            out.append(u)
            t = (t - u) * 256.0
        out.append(last(t))
        if not carry:
            return [((d + 128) % 256) - 128 for d in out]  # wraps instead of carrying
        for s in range(slices - 1, 0, -1):
            if out[s] > 127:
                out[s], out[s - 1] = out[s] - 256, out[s - 1] + 1
            elif out[s] < -128:
                out[s], out[s - 1] = out[s] + 256, out[s - 1] - 1
        return out

    return digits_of


def slicing_with(digit_fn=None, shift_fn=None):
    """A row slicer built from a digit routine and a shift routine (the reference's unless given)."""
    digit_fn = digit_fn or digits_with()

    def slicer(a, slices):
        e = (shift_fn or ozaki.row_shifts)(a)
        digits = np.zeros((slices, *a.shape), np.int8)
        for i, j in np.ndindex(*a.shape):
            digits[:, i, j] = np.asarray(digit_fn(a[i, j], int(e[i]), slices), dtype=np.int64)
        return digits, e

    return slicer


floor_digits = digits_with(extract=math.floor)  # floor is not exact for small negative t
no_carry_digits = digits_with(carry=False)
half_up_digits = digits_with(last=lambda t: math.floor(t + 0.5))  # half up instead of half to even


def margin_one_shifts(a):  # forgets the 127/128 margin
    mu = np.abs(a).max(axis=1)
    return np.where(mu > 0, np.frexp(mu)[1], 0).astype(np.int32)


def shifted_by_one(a):
    return ozaki.row_shifts(a) + 1


def diagonals_with(term_filter):
    def fn(a_slices, b_slices):
        S = a_slices.shape[0]
        out = np.zeros((S, a_slices.shape[1], b_slices.shape[1]), np.int64)
        for s in range(S):
            for t in range(S):
                if term_filter(s, t, S):
                    out[s + t if s + t < S else S - 1] += a_slices[s].astype(np.int64) @ b_slices[t].astype(np.int64).T
        return out.astype(np.int32)

    return fn


def swapped_diagonals(a_slices, b_slices):
    good = ozaki.diagonal_sums(a_slices, b_slices)
    S = a_slices.shape[0]
    bad = good.copy()
    bad[1] = sum(a_slices[t].astype(np.int64) @ b_slices[1 - t].astype(np.int64).T for t in range(2)).astype(np.int32)
    bad[S - 1] = good[S - 1] + (a_slices[S - 1] != 0).sum()  # and an off-by-something in the last diagonal
    return bad


def epilogue_with(weight_exp=lambda d: -8 * d, scale=-14, read_c=False, diagonals=lambda S: range(S - 1, -1, -1)):
    def fn(D, e, f, alpha, beta, c):
        S = D.shape[0]
        acc = np.zeros(D.shape[1:])
        for d in diagonals(S):
            acc = acc + D[d].astype(np.float64) * 2.0 ** weight_exp(d)
        out = alpha * np.ldexp(acc, e[:, None].astype(np.int64) + f[None, :] + scale)
        return out + beta * c if (beta != 0 or read_c) else out

    return fn


BROKEN = [
    ("floor digits", lambda: check.check_slicing(slicing_with(floor_digits), seed=5), "slices"),
    ("no carry", lambda: check.check_slicing(slicing_with(no_carry_digits), seed=5), "slices"),
    ("round half up", lambda: check.check_slice_number(half_up_digits), "digits of one number"),
    ("no 127/128 margin", lambda: check.check_slicing(slicing_with(shift_fn=margin_one_shifts), seed=5),
     "exponent shifts"),
    ("shift off by one", lambda: check.check_slicing(slicing_with(shift_fn=shifted_by_one), seed=5),
     "exponent shifts"),
    ("diagonal misses s = d", lambda: check.check_diagonals(diagonals_with(lambda s, t, S: s + t < S and s < s + t)),
     "anti-diagonal sums"),
    ("keeps dropped terms", lambda: check.check_diagonals(diagonals_with(lambda s, t, S: True)), "anti-diagonal sums"),
    ("swapped slices", lambda: check.check_diagonals(swapped_diagonals), "anti-diagonal sums"),
    ("int64 diagonals", lambda: check.check_diagonals(lambda a, b: ozaki.diagonal_sums(a, b).astype(np.int64)),
     "anti-diagonal sums"),
    ("weight sign", lambda: check.check_epilogue(epilogue_with(weight_exp=lambda d: 8 * d)), "FP64 epilogue"),
    ("scale -13", lambda: check.check_epilogue(epilogue_with(scale=-13)), "FP64 epilogue"),
    ("reads C when beta = 0", lambda: check.check_epilogue(epilogue_with(read_c=True)), "FP64 epilogue"),
    ("drops last diagonal", lambda: check.check_epilogue(epilogue_with(diagonals=lambda S: range(S - 2, -1, -1))),
     "FP64 epilogue"),
    ("6 slices instead of 7", lambda: check.check_ozaki_gemm(reference_run(6), 7, shapes=[(40, 24, 56)], seed=6), "C"),
]  # fmt: skip


@pytest.mark.parametrize(("label", "run", "stage"), BROKEN, ids=[b[0] for b in BROKEN])
def test_broken_stage_is_rejected_with_its_name(label, run, stage):
    with pytest.raises(CheckFailure) as failure:
        run()
    if stage is not None:
        assert failure.value.stage == stage
    message = str(failure.value)
    assert "got" in message and "expected" in message or "dtype" in message or "diagonal" in message


def test_at_least_ten_broken_implementations_are_covered():
    assert len(BROKEN) >= 10


def test_failure_message_names_indices_values_and_hint():
    with pytest.raises(CheckFailure) as failure:
        check.check_slicing(slicing_with(shift_fn=shifted_by_one), seed=5)
    text = str(failure.value)
    assert "stage 'exponent shifts'" in text and "at (row " in text and "hint:" in text


# --- unfinished exercises are reported, not raised -------------------------------------------------------------


def test_untouched_skeletons_are_not_implemented(capsys, define):
    skeleton = define(f"def skeleton(*args):\n    pass  {PLACEHOLDER}\n", "skeleton")  # what the exercise keeps

    def zero_slices(a, S):
        return np.zeros((S, *a.shape), np.int8), ozaki.row_shifts(a)

    assert check.check_slicing(zero_slices, exercise=skeleton).status == "not implemented"
    zero_diagonals = define(
        f"import numpy as np\ndef d(a, b):\n    return np.zeros((a.shape[0], a.shape[1], b.shape[1]), np.int32)  "
        f"{PLACEHOLDER}\n", "d",
    )  # fmt: skip
    assert check.check_diagonals(zero_diagonals).status == "not implemented"
    zero_digits = define(f"def digits(x, e, S):\n    return [0] * S  {PLACEHOLDER}\n", "digits")
    assert check.check_slice_number(zero_digits).status == "not implemented"
    assert "not implemented yet" in capsys.readouterr().out


def test_code_without_a_placeholder_that_writes_nothing_is_wrong(define):
    """Not implemented means a placeholder is left: filled-in code whose result stays zero is reported wrong."""
    filled = define("def digits(x, e, S):\n    return [0] * S\n", "digits")
    with pytest.raises(CheckFailure) as info:
        check.check_slice_number(filled)
    assert info.value.stage == "result" and "no placeholder line left" in str(info.value)


def test_an_exception_in_the_attendees_code_names_a_stage(define):
    broken = define("def digits(x, e, S):\n    return [0] * S + [1 // 0]\n", "digits")
    with pytest.raises(CheckFailure) as info:
        check.check_slice_number(broken)
    assert info.value.stage == "running your code" and "ZeroDivisionError" in str(info.value)
    unfinished = define(f"def digits(x, e, S):\n    return 1 // 0  {PLACEHOLDER}\n", "digits")
    assert check.check_slice_number(unfinished).status == "not implemented"


def test_a_wrong_result_from_code_with_a_placeholder_is_unfinished(define):
    skeleton = define(f"def skeleton(x, e, slices):\n    return [1] * slices  {PLACEHOLDER}\n", "skeleton")
    result = check.check_slice_number(skeleton)
    assert result.status == "not implemented"


def test_a_wrong_result_without_placeholder_raises(define):
    attempt = define("def attempt(x, e, slices):\n    return [1] * slices\n", "attempt")
    with pytest.raises(CheckFailure):
        check.check_slice_number(attempt)

"""The Ozaki-I checkers pass correct stages, reject broken ones naming the stage and the cause, feed the corners of
their domain on every run, and spot unfinished exercises."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from utilities import ozaki
from utilities.checker import PLACEHOLDER, CheckFailure
from utilities.ozaki import check

SEEDS = (0, 1, 2, 3, 4)

# --- correct implementations pass --------------------------------------------------------------------------


def test_reference_stages_pass_every_checker():
    assert check.check_slicing(ozaki.slice_rows, seed=1)
    assert check.check_diagonals(ozaki.diagonal_sums, seed=2)
    assert check.check_epilogue(check.epilogue_reference, seed=3)
    assert check.check_diagonal_terms(check.diagonal_terms_ref)


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
            if np.isfinite(a[i]).all():  # a row holding NaN or Inf keeps zero digits
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
    """The epilogue in NumPy over (terms, offsets), with one of its steps swappable for a broken one."""

    def fn(terms, offsets, e, f, alpha, beta, c):
        S = len(offsets) - 1
        acc = np.zeros(terms.shape[1:])
        for d in diagonals(S):
            exact = terms[offsets[d] : offsets[d + 1]].sum(axis=0, dtype=np.int64)
            acc = acc + exact.astype(np.float64) * 2.0 ** weight_exp(d)
        with np.errstate(over="ignore", invalid="ignore"):
            out = alpha * np.ldexp(acc, e[:, None].astype(np.int64) + f[None, :] + scale)
            out = out + beta * c if (beta != 0 or read_c) else out
        out[e == ozaki.NONFINITE_SHIFT, :] = np.nan
        out[:, f == ozaki.NONFINITE_SHIFT] = np.nan
        return out

    return fn


BROKEN = [  # (label, run, stage, a piece of the message that names the mistake)
    ("floor digits", lambda seed: check.check_slicing(slicing_with(floor_digits), seed=seed), "slices",
     "floor is not exact"),
    ("no carry", lambda seed: check.check_slicing(slicing_with(no_carry_digits), seed=seed), "slices", "do not wrap"),
    ("round half up", lambda seed: check.check_slice_number(half_up_digits, seed=seed), "digits of one number",
     "half to even"),
    ("no 127/128 margin", lambda seed: check.check_slicing(slicing_with(shift_fn=margin_one_shifts), seed=seed),
     "exponent shifts", "127/128"),
    ("shift off by one", lambda seed: check.check_slicing(slicing_with(shift_fn=shifted_by_one), seed=seed),
     "exponent shifts", "smallest integer"),
    ("diagonal misses s = d", lambda seed: check.check_diagonals(
        diagonals_with(lambda s, t, S: s + t < S and s < s + t), seed=seed), "anti-diagonal sums", "s + t == d"),
    ("keeps dropped terms", lambda seed: check.check_diagonals(diagonals_with(lambda s, t, S: True), seed=seed),
     "anti-diagonal sums", "s + t == d"),
    ("swapped slices", lambda seed: check.check_diagonals(swapped_diagonals, seed=seed), "anti-diagonal sums",
     "s + t == d"),
    ("int64 diagonals", lambda seed: check.check_diagonals(
        lambda a, b: ozaki.diagonal_sums(a, b).astype(np.int64), seed=seed), "anti-diagonal sums", "dtype int64"),
    ("weight sign", lambda seed: check.check_epilogue(epilogue_with(weight_exp=lambda d: 8 * d), seed=seed),
     "FP64 epilogue", "2^(-8d)"),
    ("scale -13", lambda seed: check.check_epilogue(epilogue_with(scale=-13), seed=seed), "FP64 epilogue",
     "e_i + f_j - 14"),
    ("reads C when beta = 0", lambda seed: check.check_epilogue(epilogue_with(read_c=True), seed=seed),
     "FP64 epilogue", "C was read although beta = 0"),
    ("7 diagonals whatever the count", lambda seed: check.check_epilogue(
        epilogue_with(diagonals=lambda S: range(6, -1, -1)), seed=seed), "running your code", "hard-coded count"),
    ("largest weight first", lambda seed: check.check_epilogue(epilogue_with(diagonals=range), seed=seed),
     "FP64 epilogue", "largest weight to the smallest"),
    ("drops last diagonal", lambda seed: check.check_epilogue(
        epilogue_with(diagonals=lambda S: range(S - 2, -1, -1)), seed=seed), "FP64 epilogue", "not a fixed count"),
    ("6 slices instead of 7", lambda seed: check.check_ozaki_gemm(reference_run(6), 7, shapes=[(40, 24, 56)],
                                                                  seed=seed), "C", "what 6 slices give"),
]  # fmt: skip


@pytest.mark.parametrize(("label", "run", "stage", "names"), BROKEN, ids=[b[0] for b in BROKEN])
def test_broken_stage_is_rejected_with_its_name_on_every_seed(label, run, stage, names):
    for seed in SEEDS:
        with pytest.raises(CheckFailure) as failure:
            run(seed)
        assert failure.value.stage == stage
        message = str(failure.value)
        assert names in message, message
        assert "np.int" not in message and "np.float" not in message, "values print plain"


def test_at_least_ten_broken_implementations_are_covered():
    assert len(BROKEN) >= 10


def test_failure_message_names_indices_values_and_hint():
    with pytest.raises(CheckFailure) as failure:
        check.check_slicing(slicing_with(shift_fn=shifted_by_one), seed=5)
    text = str(failure.value)  # the first case is the corner matrix
    assert "stage 'exponent shifts'" in text and "at (row " in text and "hint:" in text


# --- unfinished exercises are reported, not raised -------------------------------------------------------------


def test_untouched_skeletons_are_not_implemented(capsys, define):
    skeleton = define(f"def skeleton(*args):\n    pass  {PLACEHOLDER}\n", "skeleton")  # what the exercise keeps

    def zero_slices(a, S):
        return np.zeros((S, *a.shape), np.int8), ozaki.row_shifts(a)

    assert check.check_slicing(zero_slices, exercise=skeleton).status == "not implemented"
    zero_diagonals = define(
        f"import numpy as np\ndef d(a, b):\n    return np.zeros((a.shape[0], a.shape[1], b.shape[1]), np.int32)  "
        f"{PLACEHOLDER}\n",
        "d",
    )
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


# --- the domain's corners, fed on every run --------------------------------------------------------------------


def test_corner_rows_reach_both_ends_of_the_range_and_every_corner():
    for slices in (1, 7, ozaki.MAX_SLICES):
        a, names = check.corner_matrix(slices)
        e = ozaki.row_shifts(a)
        finite = e != ozaki.NONFINITE_SHIFT
        assert {1025, 1024, -1073} <= set(e[finite].tolist()), "shifts at both ends of the FP64 range"
        assert (~finite).sum() == 3 and len(names) == a.shape[0]
        assert any("ties" in n for n in names) and any("cascade" in n for n in names)
    assert check.SLICE_COUNTS == tuple(range(1, 13))


def test_the_diagonal_terms_bound_is_observable():
    """Without "both below slices" the diagonals Ozaki-I keeps are right; the checker asks for the others too."""
    with pytest.raises(CheckFailure, match="both s and t must stay below"):
        check.check_diagonal_terms(lambda d, S: [(s, d - s) for s in range(d + 1)])


def _swapped_grid(fn, block=(32, 8)):
    """``fn``'s result where a kernel with its grid axes swapped writes (x along rows); NaN where it writes nothing."""

    def run(*args):
        out = np.asarray(fn(*args)).copy()
        m, n = out.shape
        rows, cols = block[0] * -(-n // block[0]), block[1] * -(-m // block[1])  # what the swapped threads cover
        out[rows:, :] = np.nan
        out[:, cols:] = np.nan
        return out

    return run


def test_a_swapped_grid_fails_the_epilogue_check():
    with pytest.raises(CheckFailure, match="entries wrong"):
        check.check_epilogue(_swapped_grid(check.epilogue_reference), seed=1)


def test_a_swapped_tile_grid_fails_the_gemm_check_and_says_where():
    with pytest.raises(CheckFailure, match="never written"):
        check.check_ozaki_gemm(
            _swapped_grid(reference_run(7), block=(128, 128)), 7, shapes=[(300, 136, 40)], seed=2, adversarial=False
        )


def test_an_epilogue_for_one_layout_fails_on_the_other():
    def partial_only(terms, offsets, e, f, alpha, beta, c):  # takes terms[d] as diagonal d
        return check.epilogue_reference(terms[: len(offsets) - 1], np.arange(len(offsets)), e, f, alpha, beta, c)

    with pytest.raises(CheckFailure, match=r"offsets\[d \+ 1\] - 1"):
        check.check_epilogue(partial_only, seed=3)


def test_checkers_print_their_domain(capsys):
    check.check_diagonal_terms(check.diagonal_terms_ref)
    check.check_epilogue(check.epilogue_reference, seed=4)
    out = capsys.readouterr().out
    assert out.count("checked:") == 2 and "1 to 12 slices" in out and "both layouts" in out


# --- diagnosis by cause ------------------------------------------------------------------------------------------


def test_a_gemm_that_reads_c_when_beta_is_zero_is_named(define):
    """An all-NaN result from a C that was read is not "not written": the message names the cause."""

    def reads_c(a, b, c, alpha, beta):
        return ozaki.ozaki_gemm_ref(a, b, 7, alpha, 1.0, c, nonfinite="propagate") - c + beta * c  # uses C always

    attempt = define("def run(a, b, c, alpha, beta):\n    return c\n", "run")  # finished code: no placeholder
    with pytest.raises(CheckFailure, match="C was read although beta = 0") as info:
        check.check_ozaki_gemm(reads_c, 7, shapes=[(40, 24, 56)], seed=5, exercise=attempt)
    assert info.value.stage == "C" and "at (row" in str(info.value)


def forgets_the_sentinel(slices: int = 7):
    """3d's fused kernel without its NaN branch (issue: accepted on an H200): every entry is
    alpha * ldexp(acc, int32(e_i + f_j - 14)) (+ beta C), also where e_i or f_j is the sentinel NONFINITE_SHIFT. The
    digits of such a line are zero, so its entries come out +-0 or beta C instead of NaN."""

    def run(a, b, c, alpha, beta):
        st = ozaki.ozaki_stages(a, b, slices)
        acc = ozaki.reconstruct(st.diagonals, np.zeros_like(st.e), np.full_like(st.f, 14))  # the FP64 sum, unscaled
        shift = (st.e.astype(np.int64)[:, None] + st.f.astype(np.int64)[None, :] - 14).astype(np.int32)  # wraps
        with np.errstate(over="ignore", invalid="ignore"):
            out = alpha * np.ldexp(acc, shift)
        return out + beta * c if beta != 0.0 else out

    return run


def test_a_gemm_without_the_sentinels_nan_is_rejected_and_named():
    """Issue: with the NaN and Inf pairs met only at alpha = 0 (BLAS's quick return: beta C accepted there), a fused
    kernel that skips the sentinel's NaN passed. They meet alpha != 0 too; the hint names the line and the sentinel."""
    for seed in SEEDS:
        with pytest.raises(CheckFailure) as info:
            check.check_ozaki_gemm(forgets_the_sentinel(), 7, shapes=[(40, 24, 56)], seed=seed)
        message = str(info.value)
        assert info.value.stage == "C" and "a NaN in" in message and "sentinel" in message, message
        assert re.search(r"(row|column) \d+ of (A|B) holds a NaN or an Inf", message), message
        assert "NONFINITE_SHIFT" in message and "must be NaN" in message, message
    for adversarial in (True, False):
        run = reference_run(7)
        assert check.check_ozaki_gemm(run, 7, shapes=[(40, 24, 56)], seed=1, adversarial=adversarial)


# --- the products stage's hint: a right kernel is not sent back to its code ----------------------------------------


def products_plan(tables: str = "written", kernel: str = "right", keep_tables: bool = True):
    """A plan whose products stage computes, for each product p, A_s @ B_t from its index tables ``term_s`` and
    ``term_t``: as the plan wrote them, or with term_s written over with zeros (what 3b's products met on an H200);
    its kernel reads them right, takes s = 0, or swaps s and t. ``stages()`` keeps the tables or not."""
    slices, kept = 3, {}

    def run(a, b, c, alpha, beta):
        st = ozaki.ozaki_stages(a, b, slices)
        term_s, term_t = (np.array(x, np.int32) for x in zip(*ozaki.product_terms(slices), strict=True))
        if tables == "overwritten":
            term_s[:] = 0
        pairs = {"right": list(zip(term_s, term_t, strict=True))}
        pairs |= {"s = 0": [(0, t) for _, t in pairs["right"]], "swapped": [(t, s) for s, t in pairs["right"]]}
        a64, b64 = st.a_slices.astype(np.int64), st.b_slices.astype(np.int64)
        products = np.stack([a64[s] @ b64[t].T for s, t in pairs[kernel]]).astype(np.int32)
        kept.update(e=st.e, f=st.f, a_slices=st.a_slices, b_slices=st.b_slices, products=products)
        if keep_tables:
            kept.update(term_s=term_s, term_t=term_t)
        return ozaki.reconstruct(st.diagonals, st.e, st.f, alpha, beta, c)

    return lambda seed: check.check_ozaki_gemm(run, slices, shapes=[(40, 24, 56)], stages=lambda: kept, seed=seed)


@pytest.mark.parametrize(
    ("plan", "says", "not_said"),
    [
        (products_plan("overwritten"), ["no longer hold what the plan wrote", "your kernel is right"], []),
        (products_plan("overwritten", keep_tables=False), ["A_0 @ B_t", "a fresh plan then passes"], ["is right"]),
        (products_plan(kernel="s = 0"), ["your kernel took slice 0 of A, not s = term_s[p]"], ["fresh plan"]),
        (products_plan("overwritten", "swapped"), ["no longer hold", "look at yours too"], ["your kernel is right"]),
        (products_plan(kernel="swapped"), ["s and t are swapped"], ["fresh plan"]),
    ],
    ids=["tables overwritten", "tables overwritten, not kept", "kernel takes s = 0", "both", "kernel swaps s and t"],
)
def test_the_products_hint_tells_an_overwritten_table_from_a_wrong_kernel(plan, says, not_said):
    with pytest.raises(CheckFailure) as failure:
        plan(6)
    message = str(failure.value)
    assert failure.value.stage == "slice products", message
    assert all(text in message for text in says) and not any(text in message for text in not_said), message

"""The Ozaki-I checkers pass correct stages, reject broken ones naming the stage and the cause, feed the corners of
their domain on every run, and spot unfinished exercises."""

from __future__ import annotations

import ast
import importlib.util
import itertools
import math
import re
import textwrap
from pathlib import Path

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


# --- the products stage: the kernel's derivation of (s, t) from p, and the hint of a wrong one ---------------------

ROOT = Path(__file__).resolve().parent.parent
TENSORCORE = ROOT / "utilities" / "ozaki" / "tensorcore.py"


def products_kernel_source() -> str:
    """``make_products_kernel``'s source as the module holds it (read, not imported: no GPU stack needed)."""
    text = TENSORCORE.read_text(encoding="utf-8")
    node = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == "make_products_kernel")
    return ast.get_source_segment(text, node)


def derivation(kernel_source: str):
    """``pair(p, bx, by)``: the (s, t) that the lines between BEGIN and END SOLUTION of ``kernel_source`` give for
    product p in the block of tile (bx, by), run as Python (they are plain integer arithmetic)."""
    lines = kernel_source.splitlines()
    begin = next(i for i, line in enumerate(lines) if line.strip() == "# BEGIN SOLUTION")
    end = next(i for i, line in enumerate(lines) if line.strip() == "# END SOLUTION")
    code = compile(textwrap.dedent("\n".join(lines[begin + 1 : end])), "make_products_kernel", "exec")

    def pair(p: int, bx: int = 0, by: int = 0) -> tuple[int, int]:
        names = {"p": p, "bx": bx, "by": by}
        exec(code, names)  # noqa: S102 - the course's own solution lines, or a mutant of them
        return int(names["s"]), int(names["t"])

    return pair


def test_the_products_solution_derives_every_products_pair_in_the_contracts_order():
    """The solution's own lines (read from the module: a broken solution fails here) give product p's pair as
    ``product_terms`` lists it, for every p of every count up to 20, whatever the block's tile."""
    pair = derivation(products_kernel_source())
    for slices in range(1, 21):
        terms = [(s, d - s) for d in range(slices) for s in range(d + 1)]  # slices beyond check_slices' 12 too
        if slices <= 12:
            assert terms == ozaki.product_terms(slices)
        assert [pair(p, p % 3, p % 2) for p in range(len(terms))] == terms, slices


def products_plan(pair, slices: int = 7, tile: tuple[int, int] = (128, 128)):
    """A plan whose products stage does what the products kernel does with ``pair``: block (bx, by, p) writes tile
    (bx, by) of A_s @ B_t, (s, t) = pair(p, bx, by), into product p; a slice outside 0 .. S - 1 reads as zeros (the
    slice buffers' spare slices are zero, and the pipeline's TMA fills a box outside its tensor with zeros)."""
    kept = {}

    def run(a, b, c, alpha, beta):
        st = ozaki.ozaki_stages(a, b, slices)
        m, n = a.shape[0], b.shape[1]
        a64, b64 = st.a_slices.astype(np.float64), st.b_slices.astype(np.float64)  # exact: below 2^53
        products = np.zeros((len(ozaki.product_terms(slices)), m, n), np.int32)
        for p, bx, by in itertools.product(range(len(products)), range(-(-m // tile[0])), range(-(-n // tile[1]))):
            s, t = pair(p, bx, by)
            if 0 <= s < slices and 0 <= t < slices:
                rows, cols = slice(bx * tile[0], (bx + 1) * tile[0]), slice(by * tile[1], (by + 1) * tile[1])
                products[p, rows, cols] = (a64[s, rows] @ b64[t, cols].T).astype(np.int32)
        kept.update(e=st.e, f=st.f, a_slices=st.a_slices, b_slices=st.b_slices, products=products)
        return ozaki.reconstruct(st.diagonals, st.e, st.f, alpha, beta, c)

    return run, lambda: kept


# 3b's check: its first plan (2 x 3 tiles), and the contract's other block at its padded shape
PRODUCTS_CASES = [((256, 384, 384), None), ((300, 136, 392), check.OTHER_TILE)]


def products_check(pair, seed: int, shape, block, adversarial: bool = True) -> None:
    tile = (block["tile_m"], block["tile_n"]) if block else (128, 128)
    run, stages = products_plan(pair, 7, tile)
    check.check_ozaki_gemm(run, 7, shapes=[shape], stages=stages, block=block, seed=seed, adversarial=adversarial)


def test_the_products_solution_passes_3bs_check():
    for shape, block in PRODUCTS_CASES:  # the pairs do not depend on the inputs: a few of the check's cases
        products_check(derivation(products_kernel_source()), 3, shape, block, adversarial=False)


def products_mistakes():
    spec = importlib.util.spec_from_file_location("mistakes_ozaki", ROOT / "tools" / "mistakes" / "ozaki.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [m for m in module.MISTAKES if m.exercise == "3b products"]


@pytest.mark.parametrize("mistake", products_mistakes(), ids=lambda m: m.what)
@pytest.mark.parametrize(("shape", "block"), PRODUCTS_CASES, ids=["own block", "other block"])
def test_every_products_mistake_is_rejected_with_its_own_hint(mistake, shape, block):
    """Each of ``tools/mistakes/ozaki.py``'s products mutants, applied to the module's solution, fails the products
    stage with the text the GPU tool expects of it (and the one pair of slices it multiplied where it is one)."""
    pair = derivation(mistake.apply(products_kernel_source()))
    for seed in (0, 1):
        with pytest.raises(CheckFailure) as failure:
            products_check(pair, seed, shape, block)
        message = str(failure.value)
        assert failure.value.stage == "slice products", message
        assert mistake.message in message and "should be A_" in message, message
        if "tile" in mistake.what:  # two tiles of one product that hold different pairs, named
            held = re.findall(r"(A_\d+ @ B_\d+|zero) in tile \((\d+), (\d+)\)", message)
            assert len(held) == 2 and held[0][0] != held[1][0], message


def test_the_products_hint_names_the_pair_each_wrong_product_multiplied():
    """The hint says which pair the first wrong product should be and is; a pair that is no named mistake gets the
    contract's order, not a cause the evidence does not show."""
    terms = ozaki.product_terms(7)

    def shuffled(p, bx=0, by=0):  # products 4 and 5 exchanged: no named mistake
        return terms[{4: 5, 5: 4}.get(p, p)]

    with pytest.raises(CheckFailure) as failure:
        products_check(shuffled, 0, *PRODUCTS_CASES[0])
    message = str(failure.value)
    assert "2 of 28 products wrong (p = 4, 5)" in message, message
    assert "product 4 should be A_1 @ B_1 (diagonal d = s + t = 2, which starts at p = d(d+1)/2 = 3" in message
    assert "your kernel's is A_2 @ B_0" in message and "s = p - d(d+1)/2" in message, message
    for text in ("swapped", "one too", "stayed 0", "first of each", "last of each", "tile"):
        assert text not in message.split("your kernel's is")[1], message

    def zeros_from_3(p, bx=0, by=0):  # a pair outside the slices from p = 3 on
        return terms[p] if p < 3 else (-1, 9)

    with pytest.raises(CheckFailure) as failure:
        products_check(zeros_from_3, 0, *PRODUCTS_CASES[0])
    assert "product 3 should be A_0 @ B_2" in str(failure.value) and "your kernel's is zero" in str(failure.value)

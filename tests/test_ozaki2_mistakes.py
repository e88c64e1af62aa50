"""The Ozaki-II checkers against realistic mistakes (``tools/mistakes/ozaki2.py``): each semantic mistake is rejected
on every seed, by the stage it breaks, and each correct alternative passes. The exercises are built as the mutation
tool builds them (device functions compiled for the CPU, the reconstruction kernel in numba's CUDA simulator)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from utilities.checker import CheckFailure

ROOT = Path(__file__).resolve().parent.parent


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


TOOL = _load(ROOT / "tools" / "mutation_test.py", "mutation_test_for_mistakes")  # selects numba's simulator
DATA = _load(ROOT / "tools" / "mistakes" / "ozaki2.py", "mistakes_ozaki2")
SEEDED = {"4a symmetric_residue", "4a crt_reconstruct"}  # checkers whose seed the builders let a test choose


def _exercise(name: str):
    return TOOL.EXERCISES[name]()


def _apply(source: str, old: str, new: str) -> str:
    assert source.count(old) == 1, f"{old!r} must occur exactly once in the solution"
    return source.replace(old, new)


@pytest.mark.parametrize("mistake", DATA.MISTAKES, ids=lambda m: f"{m.exercise}: {m.what}")
def test_every_mistake_is_rejected(mistake):
    text, build, check, _ = _exercise(mistake.exercise)
    wrong = build(_apply(text, mistake.old, mistake.new))
    with pytest.raises(CheckFailure):
        check(wrong)


@pytest.mark.parametrize("mistake", [m for m in DATA.MISTAKES if m.exercise in SEEDED], ids=lambda m: m.what)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_cpu_mistakes_are_rejected_on_every_seed(mistake, seed):
    from utilities.ozaki2 import check

    text, build, _, _ = _exercise(mistake.exercise)
    wrong = build(_apply(text, mistake.old, mistake.new))
    checker = check.check_residue if "residue" in mistake.exercise else check.check_crt
    with pytest.raises(CheckFailure):
        checker(wrong, seed=seed)


def test_the_fp64_mistake_is_named():
    from utilities.ozaki2 import check

    mistake = next(m for m in DATA.MISTAKES if m.kind == "rounding" and m.exercise == "4a symmetric_residue")
    text, build, _, _ = _exercise(mistake.exercise)
    with pytest.raises(CheckFailure, match="2\\^53"):
        check.check_residue(build(_apply(text, mistake.old, mistake.new)), seed=4)


@pytest.mark.parametrize("alternative", DATA.CORRECT, ids=lambda a: f"{a.exercise}: {a.what}")
def test_every_correct_alternative_passes(alternative):
    text, build, check, _ = _exercise(alternative.exercise)
    assert check(build(_apply(text, alternative.old, alternative.new)))


ONE_DOUBLE = next(m for m in DATA.MISTAKES if m.message == "in one double")
FUSED_ONE_DOUBLE = "            s1 = fma(u, C1[t] + C2[t] + C3[t], s1)"  # what a GPU's compiler makes of the mistake


@pytest.mark.parametrize("new", [ONE_DOUBLE.new, FUSED_ONE_DOUBLE], ids=["rounded twice", "fused, as on a GPU"])
def test_one_double_is_named_in_either_rounding_of_its_sum(new):
    text, build, check, _ = _exercise(ONE_DOUBLE.exercise)
    with pytest.raises(CheckFailure) as info:
        check(build(_apply(text, ONE_DOUBLE.old, new)))
    assert info.value.stage == "C" and "in one double" in str(info.value), str(info.value)


def test_one_double_is_not_said_of_other_wrong_outputs():
    from utilities import inputs
    from utilities.ozaki2 import check
    from utilities.ozaki2 import reference as ref

    left_out = next(m for m in DATA.MISTAKES if m.exercise == ONE_DOUBLE.exercise and m.message == "the third sum")
    text, build, run_check, _ = _exercise(left_out.exercise)
    with pytest.raises(CheckFailure) as info:
        run_check(build(_apply(text, left_out.old, left_out.new)))
    assert "the third sum" in str(info.value) and "in one double" not in str(info.value), str(info.value)

    a, b = inputs.normal(19, 90, 1), inputs.normal(90, 21, 2)
    st = ref.ozaki2_stages(a, b, 2)
    want = ref.reconstruct(st.digits, st.mu, st.nu, 2, 1.0, 0.0, None, a, b)
    bound = check.c_bound(st, 1.0, 0.0, None, want)
    fused = next(x for hint, x in check.crt_mistakes(st.digits, 2, fused=True).items() if "in one double" in hint)
    shift = -(st.mu.astype(np.int64)[:, None] + st.nu.astype(np.int64)[None, :])
    for right_or_mistaken in (want, np.ldexp(fused, shift)):
        got = right_or_mistaken.copy()
        got[::7, ::5] *= 1 + 2.0**-30  # a few entries off: neither the right C nor a mistake's, rounded either way
        assert check._reconstruction_hint(got, st, 1.0, 0.0, None, want, bound) == ""

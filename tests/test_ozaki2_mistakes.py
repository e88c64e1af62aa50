"""The Ozaki-II checkers against realistic mistakes (``tools/mistakes/ozaki2.py``): each semantic mistake is rejected
on every seed, by the stage it breaks, and each correct alternative passes. The exercises are built as the mutation
tool builds them (device functions compiled for the CPU, the reconstruction kernel in numba's CUDA simulator)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

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

"""Mutation testing: the engine finds and sorts mutants, and the CPU exercises' checkers reject every mutant that
changes a result (``tools/mutation_test.py`` writes the full table to ``results/mutation-cpu.json``)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from utilities import mutants
from utilities.checker import CheckFailure

ROOT = Path(__file__).resolve().parents[1]

TOY = """def scale(x, k):
    y = 0
    # BEGIN SOLUTION
    y = x * k + 1
    # END SOLUTION
    return y - 1
"""


def _tool():
    spec = importlib.util.spec_from_file_location("mutation_test", ROOT / "tools" / "mutation_test.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _build(text: str):
    ns: dict = {}
    exec(text, ns)
    return ns["scale"]


def test_mutants_change_only_the_solution_region():
    found = mutants.mutants(TOY)
    kinds = {m.what for m in found}
    assert {"Mult -> Div", "Mult -> Add", "Add -> Sub", "constant 1 -> 2", "constant 1 -> 0"} <= kinds
    assert any(w.startswith("statement dropped: y = x * k + 1") for w in kinds)
    assert {m.line for m in found} == {4}, "only the line inside BEGIN/END SOLUTION is mutated"
    for m in found:
        assert m.source != TOY and "return y - 1" in m.source


def test_evaluate_sorts_rejected_survived_and_equivalent():
    def strong(fn):
        for x, k in ((2, 3), (5, -1), (0, 7)):
            if fn(x, k) != x * k:
                raise CheckFailure("scale", f"scale({x}, {k})")

    def weak(fn):  # only x = 0, k = 1: many mutants pass it
        if fn(0, 1) != 0:
            raise CheckFailure("scale", "scale(0, 1)")

    def differs(fn):
        return any(fn(x, k) != x * k for x in range(-3, 4) for k in range(1, 4))

    good = mutants.evaluate("toy", TOY, _build, strong, differs)
    assert not good.survived and good.rejected and good.score == 1.0
    holey = mutants.evaluate("toy", TOY, _build, weak, differs)
    assert holey.survived, "a checker with a hole must let a result-changing mutant survive"
    assert holey.score < 1.0
    assert "survived" in holey.line() and "%" in holey.line()


def test_a_mutant_that_does_not_build_counts_as_rejected():
    def build(text):
        if "x / k" in text:
            raise SyntaxError("pretend")
        return _build(text)

    score = mutants.evaluate("toy", TOY, build, lambda fn: None, lambda fn: False)
    assert any(m.what == "Mult -> Div" for m in score.rejected)


FAST = ["3a slice_number", "3a diagonal_terms", "4a symmetric_residue", "4a crt_reconstruct",
        "4b residue (device function)", "3b split_digits (device function)"]  # fmt: skip


@pytest.mark.parametrize("exercise", FAST)
def test_checker_rejects_every_result_changing_mutant(exercise):
    tool = _tool()
    [score] = tool.run([exercise], quiet=True)
    assert score.rejected, "no mutant was rejected: the exercise has no solution region?"
    assert not score.survived, "\n".join(f"line {m.line}: {m.what}" for m in score.survived)


def test_the_committed_scores_cover_every_exercise_and_show_no_survivor():
    data = json.loads((ROOT / "results" / "mutation-cpu.json").read_text())
    tool = _tool()
    assert [e["exercise"] for e in data["exercises"]] == list(tool.EXERCISES)
    for entry in data["exercises"]:
        assert entry["survived"] == 0 and entry["score"] == 1.0, entry

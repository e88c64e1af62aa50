"""Mutation testing: the engine finds and sorts mutants; the CPU exercises' checkers reject every syntactic mutant that
changes a result and every realistic mistake of ``tools/mistakes`` on every seed, with a message that names it, and
accept the correct alternatives (``tools/mutation_test.py`` writes the full table to ``results/mutation-cpu.json``);
the GPU tool plans at least ten mutants per kernel exercise without a GPU and runs them in processes it restarts."""

from __future__ import annotations

import functools
import importlib.util
import json
import subprocess
import sys
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


@functools.cache
def _tool():
    spec = importlib.util.spec_from_file_location("mutation_test", ROOT / "tools" / "mutation_test.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
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


def test_no_swap_of_arguments_that_commute():
    """fma's factors, and min's or max's operands, commute: swapping them makes a mutant equivalent by construction
    (4b's reconstruction on the GPU: ``s1 = fma(u, C1[t], s1)`` survived three times); other calls still swap."""
    source = (
        "def f(u, w, s, a, b):\n    # BEGIN SOLUTION\n    s = fma(u, w, s)\n    s = math.fma(u, w, s)\n"
        "    s = cuda.fma(u, w, s)\n    s = min(a, b) + max(a, b) + np.maximum(a, b)\n    s = pow(a, b)\n"
        "    s = obj.scale(a, b)\n    # END SOLUTION\n    return s\n"
    )
    swaps = [m for m in mutants.mutants(source) if m.what == "first two arguments swapped"]
    assert [m.line for m in swaps] == [7, 8], [m.line for m in swaps]
    assert "pow(b, a)" in swaps[0].source and "obj.scale(b, a)" in swaps[1].source


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


FAST = [
    "3a slice_number",
    "3a diagonal_terms",
    "4a symmetric_residue",
    "4a crt_reconstruct",
    "4b residue (device function)",
    "2c neighbor (device function)",
]


@pytest.mark.parametrize("exercise", FAST)
def test_checker_rejects_every_result_changing_mutant(exercise):
    tool = _tool()
    [score] = tool.run([exercise], quiet=True)
    assert score.rejected, "no mutant was rejected: the exercise has no solution region?"
    assert not score.survived, "\n".join(f"line {m.line}: {m.what}" for m in score.survived)


@pytest.mark.parametrize("exercise", list(_tool().EXERCISES))
def test_the_solution_itself_differs_from_nothing(exercise):
    """The wider differential test of each exercise accepts the solution (else every survivor would be a false one)."""
    text, build, _, differs = _tool().EXERCISES[exercise]()
    assert not differs(build(text))


# --- semantic mutants: realistic mistakes and correct alternatives, as data ------------------------------------------

MISTAKES, ALTERNATIVES = mutants.load_mistakes(ROOT / "tools" / "mistakes")
OURS = ("3a", "3b")  # the CPU exercises of tracks 3a and 3b: every mistake on every seed here
SLOW = "3b epilogue"  # its Python kernel runs thread by thread: one seed here, all of them in the tool


def _cpu_items(items):
    names = {mutants.exercise_key(n): n for n in _tool().EXERCISES}
    return [
        (names[mutants.exercise_key(i.exercise)], i)
        for i in items
        if mutants.exercise_key(i.exercise) in names and i.exercise.startswith(OURS)
    ]


@pytest.mark.parametrize(("exercise", "mistake"), _cpu_items(MISTAKES), ids=lambda x: getattr(x, "what", x))
def test_every_mistake_is_rejected_on_every_seed_with_a_message_that_names_it(exercise, mistake):
    text, build, check, _ = _tool().EXERCISES[exercise]()
    seeds = (1,) if exercise.startswith(SLOW) else _tool().SEEDS
    verdict = mutants.judge(mistake, text, build, check, seeds)
    assert verdict.status == "rejected", verdict.line()


@pytest.mark.parametrize(("exercise", "alternative"), _cpu_items(ALTERNATIVES), ids=lambda x: getattr(x, "what", x))
def test_every_correct_alternative_passes(exercise, alternative):
    text, build, check, _ = _tool().EXERCISES[exercise]()
    seeds = (1,) if exercise.startswith(SLOW) else _tool().SEEDS
    verdict = mutants.judge(alternative, text, build, check, seeds)
    assert verdict.status == "accepted", verdict.line()


def test_the_mistakes_cover_every_kind_the_issue_names_and_each_cpu_exercise_holds_a_few():
    kinds = {m.kind for m in MISTAKES}
    assert {"edge", "hard-coded count", "swapped axes", "rounding order"} <= kinds
    for exercise in ("3a slice_number", "3a diagonal_terms", "3b split_digits", "3b epilogue"):
        assert len(mutants.for_exercise(MISTAKES, exercise)) >= 5
        assert len(mutants.for_exercise(ALTERNATIVES, exercise)) >= 2


def test_every_mistake_names_an_exercise_of_a_tool_and_applies_to_it():
    gpu = _gpu_tool()
    cpu_names = {mutants.exercise_key(n) for n in _tool().EXERCISES}
    for item in MISTAKES + ALTERNATIVES:
        key = mutants.exercise_key(item.exercise)
        assert key in cpu_names or key in gpu.GPU_EXERCISES, f"{item.exercise}: no tool has this exercise"
        if key in gpu.GPU_EXERCISES:
            _, source, _ = gpu.cell_plan(gpu.GPU_EXERCISES[key])
        else:
            source = _tool().EXERCISES[next(n for n in _tool().EXERCISES if mutants.exercise_key(n) == key)]()[0]
        assert item.apply(source) != source


def test_a_mistake_applies_once_and_a_message_counts():
    toy = mutants.Mistake("toy", "edge", "adds 2", old="x * k + 1", new="x * k + 2", message="scale(")
    assert "x * k + 2" in toy.apply(TOY)
    with pytest.raises(ValueError, match="occurs 0 times"):
        mutants.Mistake("toy", "edge", "absent", old="nothing like it", new="").apply(TOY)

    def strong(fn, seed=0):
        if fn(2, 3) != 6:
            raise CheckFailure("scale", f"scale(2, 3) on seed {seed}")

    def by_seed(fn, seed=0):  # rejects on odd seeds only: a verdict that depends on the seed
        if seed % 2 and fn(2, 3) != 6:
            raise CheckFailure("scale", "scale(2, 3)")

    assert mutants.judge(toy, TOY, _build, strong, (0, 1, 2)).status == "rejected"
    quiet = mutants.Mistake("toy", "edge", "adds 2", old="x * k + 1", new="x * k + 2", message="not in the message")
    assert mutants.judge(quiet, TOY, _build, strong, (0, 1)).status == "misnamed"
    assert mutants.judge(toy, TOY, _build, by_seed, (0, 1, 2)).status == "some seeds"
    assert mutants.judge(toy, TOY, _build, lambda fn, seed=0: None, (0,)).status == "missed"
    same = mutants.Alternative("toy", "the same", old="x * k + 1", new="k * x + 1")
    assert mutants.judge(same, TOY, _build, strong, (0, 1)).status == "accepted"


def test_only_the_checkers_verdict_for_the_right_stage_rejects_a_mistake():
    """An exception the checker only passes on (stage "running your code": NumPy refusing np.int8(128.0) in a
    harness, say) is no verdict, unless the mistake says that raising is its symptom; a named stage must match."""
    toy = mutants.Mistake("toy", "edge", "adds 2", old="x * k + 1", new="x * k + 2")

    def passes_an_exception_on(fn, seed=0):
        if fn(2, 3) != 6:
            raise CheckFailure(mutants.RUNNING, "stage 'running your code': OverflowError: out of bounds for int8")

    def names_a_stage(fn, seed=0):
        if fn(2, 3) != 6:
            raise CheckFailure("digits (batch 1)", "stage 'digits (batch 1)': 1 of 1 entries wrong")

    assert mutants.judge(toy, TOY, _build, passes_an_exception_on, (0, 1)).status == "wrong stage"
    raising = mutants.Mistake("toy", "edge", "adds 2", old="x * k + 1", new="x * k + 2", stage=mutants.RUNNING)
    assert mutants.judge(raising, TOY, _build, passes_an_exception_on, (0, 1)).status == "rejected"
    assert mutants.judge(toy, TOY, _build, names_a_stage, (0, 1)).status == "rejected"
    digits = mutants.Mistake("toy", "edge", "adds 2", old="x * k + 1", new="x * k + 2", stage="digits")
    assert mutants.judge(digits, TOY, _build, names_a_stage, (0,)).status == "rejected"
    other = mutants.Mistake("toy", "edge", "adds 2", old="x * k + 1", new="x * k + 2", stage="residues")
    assert mutants.judge(other, TOY, _build, names_a_stage, (0,)).status == "wrong stage"


def test_the_gpu_tool_counts_a_mistake_only_by_a_checkfailure_of_its_stage():
    gpu = _gpu_tool()
    mistake = gpu.Planned("edge", "w", "src", message="tie", stage="residue(w, t)")
    assert gpu.semantic_status(mistake, ("rejected", "stage 'residue(w, t)': ... tie", 1.0, "residue(w, t)"))[0] == (
        "rejected"
    )
    assert gpu.semantic_status(mistake, ("rejected", "stage 'residues': ... tie", 1.0, "residues"))[0] == "wrong stage"
    assert gpu.semantic_status(mistake, ("rejected", "OverflowError: int8", 1.0, ""))[0] == "error"
    assert gpu.semantic_status(mistake, ("rejected", "stage 'residue(w, t)': x", 1.0, "residue(w, t)"))[0] == (
        "misnamed"
    )
    assert gpu.semantic_status(mistake, ("timed out", "killed", 240.0, ""))[0] == "timed out"
    assert gpu.semantic_status(mistake, ("passed", "", 1.0, ""))[0] == "missed"
    assert gpu.semantic_status(mistake, None)[0] == "not run"
    alternative = gpu.Planned("alternative", "w", "src")
    assert gpu.semantic_status(alternative, ("passed", "", 1.0, ""))[0] == "accepted"
    assert gpu.semantic_status(alternative, ("rejected", "x", 1.0, "C"))[0] == "false alarm"


def test_the_committed_scores_cover_every_exercise_and_show_no_hole():
    data = json.loads((ROOT / "results" / "mutation-cpu.json").read_text())
    tool = _tool()
    assert [e["exercise"] for e in data["exercises"]] == list(tool.EXERCISES)
    for entry in data["exercises"]:
        assert entry["syntactic"]["survived"] == 0 and entry["syntactic"]["score"] == 1.0, entry
        if entry["exercise"].startswith(OURS):
            assert entry["semantic"]["mistakes"] >= 5 and entry["semantic"]["score"] == 1.0, entry
            assert entry["semantic"]["accepted"] == entry["semantic"]["alternatives"] >= 2, entry


# --- GPU mutants: planned here, run on a GPU ------------------------------------------------------------------------


@functools.cache
def _gpu_tool():
    spec = importlib.util.spec_from_file_location("mutation_gpu", ROOT / "tools" / "mutation_gpu.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


DRY_RUN = """
import runpy, sys
sys.argv = ["mutation_gpu.py", "--dry-run"]
try:
    runpy.run_path("tools/mutation_gpu.py", run_name="__main__")
except SystemExit as done:
    code = done.code
print("GPU stack:", sorted(m for m in sys.modules if m.split(".")[0] in ("cupy", "nvmath") or m == "numba.cuda"))
sys.exit(code)
"""


def test_the_gpu_dry_run_lists_at_least_ten_mutants_per_kernel_exercise_without_a_gpu():
    done = subprocess.run([sys.executable, "-c", DRY_RUN], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "GPU stack: []" in done.stdout, "the dry run imports nothing of the GPU stack"
    gpu = _gpu_tool()
    for name, exercise in gpu.GPU_EXERCISES.items():
        setup, cell, check = gpu.cell_plan(exercise)
        assert "# BEGIN SOLUTION" in cell and setup and "check" in check
        planned, broken = gpu.plan_mutants(name, cell, 10)
        every = len(mutants.mutants(cell))  # 4b's reconstruction: three fma lines, their swaps commute (none made)
        assert not broken and (len(planned) >= 10 or sum(not p.semantic for p in planned) == every), name
        assert f"{name} (solutions/{exercise.stem}.ipynb" in done.stdout
    assert {"0", "1", "2a", "2b", "2c", "2d", "3b", "3c", "3d", "4b"} == {n.split()[0] for n in gpu.GPU_EXERCISES}


def test_the_gpu_sample_is_deterministic_and_spread():
    gpu = _gpu_tool()
    assert gpu.sample(list(range(100)), 4) == [0, 25, 50, 75] and gpu.sample([1, 2], 5) == [1, 2]
    assert gpu.selected("3b,4b") == ["3b products", "4b residue", "4b digit", "4b reconstruct"]
    assert gpu.selected("1_multipass") == ["1 multipass"]  # a notebook's name selects its exercise
    assert gpu.selected("gemm_bias_relu") == gpu.selected("2a_epilogue_fusion") == ["2a gemm_bias_relu"]
    assert gpu.selected("3b_ozaki_unfused") == ["3b products"]
    with pytest.raises(SystemExit, match="'1-multipass' names no exercise"):
        gpu.selected("2a,1-multipass")  # a typo would have skipped the exercise on a GPU, silently


def test_the_gpu_runner_sorts_mutants_restarts_after_a_hang_and_writes_the_report(tmp_path):
    """The process machinery on the CPU, with a toy exercise: a check, a survivor, a hang past the time limit."""
    gpu = _gpu_tool()
    cell = "def scale(x, k):\n    # BEGIN SOLUTION\n    y = x * k\n    # END SOLUTION\n    return y\n"
    check = (
        "from utilities.checker import CheckFailure\n"
        "if scale(2, 3) != 6 or scale(0, 5) != 0:\n    raise CheckFailure('scale', 'scale(2, 3) is not 6')\n"
    )
    hang = cell.replace("y = x * k", "import time\n    time.sleep(60)\n    y = x * k")
    planned = [
        gpu.Planned("syntactic", "Mult -> Add", cell.replace("x * k", "x + k")),
        gpu.Planned("syntactic", "a hang", hang),
        gpu.Planned("syntactic", "k * x", cell.replace("x * k", "k * x")),
        gpu.Planned("edge", "adds one", cell.replace("x * k", "x * k + 1"), message="is not 6"),
        gpu.Planned("alternative", "a loop", cell.replace("y = x * k", "y = sum(x for _ in range(k))")),
    ]
    job = gpu.Job("toy", planned, ["import math"], cell, check, tmp_path)
    gpu.run_jobs([job], parallel=1, timeout=8, setup_timeout=60)
    entry = gpu.entry(job)
    assert entry["baseline"].startswith("passed"), entry
    assert entry["syntactic"]["rejected"] == 2 and entry["syntactic"]["timed_out"] == ["a hang"]
    assert entry["syntactic"]["survivors"] == ["k * x"]  # the GPU run cannot tell an equivalent one: review it
    assert entry["semantic"]["rejected"] == 1 and entry["semantic"]["accepted"] == 1
    gpu.write(tmp_path / "report.json", "test", "none", [entry])
    assert json.loads((tmp_path / "report.json").read_text())["exercises"][0]["exercise"] == "toy"


def test_the_gpu_report_has_the_cpu_reports_form(tmp_path):
    """results/mutation-gpu.json in mutation-cpu.json's form: the same top-level keys and, for each exercise, the same
    keys of its syntactic and semantic scores (the GPU's own beside them)."""
    gpu = _gpu_tool()
    job = gpu.Job("toy", [gpu.Planned("syntactic", "a change", "x = 1")], [], "x = 0", "", tmp_path)
    job.outcome = {0: ("rejected", "stage 'C'", 3.0, "C")}
    gpu.write(tmp_path / "gpu.json", "python tools/mutation_gpu.py", "NVIDIA H200", [gpu.entry(job)])
    report = json.loads((tmp_path / "gpu.json").read_text())
    cpu = json.loads((ROOT / "results" / "mutation-cpu.json").read_text())
    assert set(cpu) <= set(report) and report["gpu"] == "NVIDIA H200"
    theirs, ours = cpu["exercises"][0], report["exercises"][0]
    assert set(theirs["syntactic"]) <= set(ours["syntactic"]), set(theirs["syntactic"]) - set(ours["syntactic"])
    assert set(theirs["semantic"]) <= set(ours["semantic"])
    assert ours["syntactic"]["rejected"] == 1 and ours["syntactic"]["score"] == 1.0


def test_the_gpu_runs_estimate_comes_from_its_builds_and_the_last_run_through(tmp_path):
    gpu = _gpu_tool()
    (tmp_path / "results").mkdir()
    rows = [{"notebook": "2a_epilogue_fusion", "wall_s": 50.0, "longest_check_after_edit_s": 14.0,
             "longest_build_s": 16.0}]  # fmt: skip
    (tmp_path / "results" / "x-workshop.json").write_text(
        json.dumps({"date": "2026-11-27", "gpu": "G", "notebooks": rows})
    )
    name, measured = gpu.measured(tmp_path)
    assert name == "G" and measured["2a_epilogue_fusion"]["longest_build_s"] == 16.0
    seconds, how = gpu.estimate("2a gemm_bias_relu", 9, measured)
    assert seconds == 50.0 + 10 * 14.0 and "14 s a mutant" in how, "an edit's check holds its builds and races"
    guess = gpu.GUESS
    seconds, _ = gpu.estimate("4b reconstruct", 9, measured)  # no row: seven plain builds, no race run
    assert seconds == guess["setup_s"] + 10 * (7 * guess["plain_build_s"] + guess["check_s"])
    seconds, _ = gpu.estimate("2b b2b", 9, {})  # its blocks build side by side: one build's time, and a race run
    assert seconds == guess["setup_s"] + 10 * (guess["build_s"] + guess["check_s"] + guess["race_s"])
    assert gpu.measured(tmp_path / "nothing") == ("", {})


def test_each_gpu_exercise_builds_its_kernel_once_per_block_of_its_contract():
    from utilities.conv import check as conv
    from utilities.fusion import check as fusion
    from utilities.multipass import check as multipass
    from utilities.primer import check as primer

    gpu = _gpu_tool().GPU_EXERCISES
    contracts = {"0 primer": primer.CONFIGS, "1 multipass": multipass.CONFIGS, "2a gemm_bias_relu": fusion.GEMM_CONFIGS,
                 "2b b2b": fusion.B2B_CONFIGS, "2c conv epilogue": conv.CONV_CONFIGS,
                 "2d b2b epilogues": conv.CONV_B2B_CONFIGS}  # fmt: skip
    for name, configs in contracts.items():
        assert gpu[name].builds == len(configs) and gpu[name].races, name
    for name in ("3b products", "3c diagonals", "3d fused"):  # the plan's tile and OTHER_TILE
        assert gpu[name].builds == 2 and gpu[name].races
    assert not any(gpu[name].races for name in gpu if name.startswith("4b"))


def test_reviewed_equivalents_are_reported_apart_from_survivors(tmp_path):
    """A survivor of tools/mutation_gpu.py's table of reviewed equivalents (``EQUIVALENT``) is counted as equivalent,
    by its mutated line; --rescore applies the table to a report already written, and moves swaps of commuting
    arguments that an earlier generator made."""
    gpu = _gpu_tool()
    _, cell, _ = gpu.cell_plan(gpu.GPU_EXERCISES["2a gemm_bias_relu"])
    relu = next(m for m in mutants.mutants(cell) if m.what == "Gt -> GtE")
    other = next(m for m in mutants.mutants(cell) if m.what == "constant 0 -> 1")
    planned = [gpu.Planned("syntactic", f"line {m.line}: {m.what}", m.source, changed=gpu.mutated_line(cell, m.source))
               for m in (relu, other)]  # fmt: skip
    assert planned[0].changed == "tile[i] = x if x >= 0 else float32(0)"
    job = gpu.Job("2a gemm_bias_relu", planned, [], cell, "", tmp_path)
    job.outcome = {0: ("passed", "", 1.0, ""), 1: ("passed", "", 1.0, "")}
    syntactic = gpu.entry(job)["syntactic"]
    assert syntactic["equivalents"] == [planned[0].what] and syntactic["survivors"] == [planned[1].what]
    assert syntactic["equivalent"] == 1 and "sign of a zero" in syntactic["reviewed"][0]["why"]
    assert gpu.reviewed("2a gemm_bias_relu", "Gt -> GtE", "tile[i] = x if x < 0 else float32(0)") is None
    for entry in gpu.EQUIVALENT:  # every reviewed line is one a mutant of its exercise makes
        _, source, _ = gpu.cell_plan(gpu.GPU_EXERCISES[entry.exercise])
        made = {(m.what, gpu.mutated_line(source, m.source)) for m in mutants.mutants(source)}
        assert (entry.what, entry.line) in made, entry

    report = {"command": "python tools/mutation_gpu.py --only 2a,4b --max-mutants 10", "exercises": [
        {"exercise": "2a gemm_bias_relu", "syntactic": {"rejected": 9, "survived": 1, "equivalent": 0, "score": 0.9,
                                                        "survivors": ["line 46: Gt -> GtE"], "equivalents": []}},
        {"exercise": "4b reconstruct", "syntactic": {"rejected": 7, "survived": 3, "equivalent": 0, "score": 0.7,
                                                     "survivors": [f"line {n}: first two arguments swapped"
                                                                   for n in (43, 44, 45)], "equivalents": []}},
    ]}  # fmt: skip
    path = tmp_path / "mutation-gpu.json"
    path.write_text(json.dumps(report))
    assert gpu.main(["--rescore", "--json", str(path)]) == 0
    done = json.loads(path.read_text())
    for entry in done["exercises"]:
        s = entry["syntactic"]
        assert s["survivors"] == [] and s["survived"] == 0 and s["score"] == 1.0 and s["equivalent"] >= 1, entry
    assert "fma(u, C1[t], s1)" in done["exercises"][1]["syntactic"]["reviewed"][0]["line"]
    assert done["rescored"]["command"].startswith("python tools/mutation_gpu.py --rescore")

"""compute-sanitizer runs (``utilities.sanitizer``) on the CPU: where the binary is found, the command lines, the script
rebuilt from an exercise's functions, and the reports read from recorded output in the tool's format (races,
barriers, accesses, the summaries). The run on a GPU, with a planted race: ``tests/test_core_sanitizer_gpu.py``."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from utilities import checker, sanitizer
from utilities.checker import CheckFailure, CheckResult

ROOT = Path(__file__).resolve().parent.parent
KERNEL = "cudapy::__main__::race_kernel[abi:v1,cw51cXTLSUwv1sCUt9Uw1Ek](Array<float, 1, C, mutable, aligned>)"
SCRIPT = "/tmp/sanitize-1a2b/sanitized_kernel.py"

RACE = f"""\
running the kernel
========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at {KERNEL}+0x170 in {SCRIPT}:31
=========     and Read access at {KERNEL}+0x1b0 in {SCRIPT}:33 [1024 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""

HAZARD = """\
========= COMPUTE-SANITIZER
========= Error: Potential RAW hazard detected at __shared__ 0x80 in block (0,0,0) :
=========     Write Thread (31,0,0) at _ZN6cudapy8__main__11race_kernelB2v1B96cw51cXTLSUwv1sCUt9Uw1EkE5ArrayIfLi1E1C7mutable7alignedE+0x170 in race.py:31
=========     Read Thread (32,0,0) at _ZN6cudapy8__main__11race_kernelB2v1B96cw51cXTLSUwv1sCUt9Uw1EkE5ArrayIfLi1E1C7mutable7alignedE+0x1b0 in race.py:33
=========     Current Value : 0, Incoming Value : 1
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""  # noqa: E501

MEMCHECK = f"""\
========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at {KERNEL.replace("race_kernel", "store_kernel")}+0x2a0 in {SCRIPT}:40
=========     by thread (0,0,0) in block (3,0,0)
=========     Address 0x7f3e4c000600 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7f3e4c000000 of size 1536 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2f2a1f] in libcuda.so.1
=========         Host Frame: cuLaunchKernel [0x9a1b3] in libcuda.so.1
=========
========= Program hit CUDA_ERROR_LAUNCH_FAILED (error 719) due to "unspecified launch failure" on CUDA API call to cuMemcpyDtoH_v2.
=========     Saved host backtrace up to driver entry point at error
=========
========= ERROR SUMMARY: 2 errors
"""  # noqa: E501

SYNCCHECK = f"""\
========= COMPUTE-SANITIZER
========= Barrier error detected. Divergent thread(s) in block
=========     at {KERNEL.replace("race_kernel", "sync_kernel")}+0x90 in {SCRIPT}:12
=========     by thread (0,0,0) in block (0,0,0)
=========
========= ERROR SUMMARY: 1 error
"""

CLEAN = {
    "racecheck": "========= COMPUTE-SANITIZER\n"
    "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n",
    "synccheck": "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n",
    "memcheck": "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n",
}


def test_a_race_between_a_write_and_a_read_is_named_with_both_places():
    report = sanitizer.parse("racecheck", RACE)
    assert report.summary == 1 and not report.clean
    [race] = report.findings
    assert race.kind == "race" and race.headline.startswith("Error: Race reported between Write access")
    assert race.places() == [
        f"race_kernel+0x170 in {SCRIPT}:31",
        f"race_kernel+0x1b0 in {SCRIPT}:33",
    ]
    message = sanitizer.describe([report])
    assert "racecheck: Error: Race reported" in message and "cuda.syncthreads() is missing" in message


def test_the_hazard_form_and_mangled_names_read_the_same():
    [race] = sanitizer.parse("racecheck", HAZARD).findings
    assert race.kind == "race" and len(race.lines) == 4
    assert race.places() == ["race_kernel+0x170 in race.py:31", "race_kernel+0x1b0 in race.py:33"]


def test_memcheck_names_the_bad_write_and_the_fault_it_caused():
    report = sanitizer.parse("memcheck", MEMCHECK)
    assert report.summary == 2
    access, api = report.findings
    assert access.kind == "access" and "Invalid __global__ write of size 4 bytes" in access.headline
    assert any("1 bytes after the nearest allocation" in line for line in access.lines)
    assert not any("Host Frame" in line for line in access.lines)
    assert access.places()[0] == f"store_kernel+0x2a0 in {SCRIPT}:40"
    assert api.kind == "api" and "CUDA_ERROR_LAUNCH_FAILED" in api.headline
    assert "index past the end" in sanitizer.describe([report])


def test_synccheck_names_a_barrier_that_not_every_thread_reaches():
    [barrier] = sanitizer.parse("synccheck", SYNCCHECK).findings
    assert barrier.kind == "barrier" and "inside an if" in barrier.explain()
    assert barrier.places() == [f"sync_kernel+0x90 in {SCRIPT}:12"]


@pytest.mark.parametrize("tool", sanitizer.TOOLS)
def test_clean_summaries_are_clean(tool):
    report = sanitizer.parse(tool, "the program's own output\n" + CLEAN[tool])
    assert report.clean and report.summary == 0 and not report.findings


def test_the_command_line_of_each_tool():
    line = sanitizer.command("/opt/cs", "racecheck", "/tmp/s.py", python="/usr/bin/python3")
    assert line[:3] == ["/opt/cs", "--tool", "racecheck"] and line[-2:] == ["/usr/bin/python3", "/tmp/s.py"]
    assert "--error-exitcode" in line and "--racecheck-report" in line
    assert line[line.index("--report-api-errors") + 1] == "no"  # a library's probes of the driver are no finding
    assert "--racecheck-report" not in sanitizer.command("/opt/cs", "memcheck", "/tmp/s.py")
    with pytest.raises(ValueError, match="tool must be one of"):
        sanitizer.command("/opt/cs", "initcheck", "/tmp/s.py")


def test_the_binary_is_found_in_the_wheel_or_named_and_its_absence_said(tmp_path, monkeypatch):
    monkeypatch.delenv(sanitizer.ENV, raising=False)
    assert sanitizer.find_binary([str(tmp_path)]) is None
    binary = tmp_path.joinpath(*sanitizer.IN_WHEEL)
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    assert sanitizer.find_binary([str(tmp_path / "elsewhere"), str(tmp_path)]) == binary
    monkeypatch.setenv(sanitizer.ENV, str(tmp_path / "named"))
    assert sanitizer.find_binary([str(tmp_path)]) is None, "a named binary that is not there is not replaced"
    assert sanitizer.WHEEL in sanitizer.MISSING and "pip install" in sanitizer.MISSING


HELPERS = '''
import functools
import math

import numpy as np

from utilities.rounding import relu

SCALE = 3


def helper(x):
    return math.floor(x) * SCALE


@functools.cache
def make_thing(count):
    """A factory in the notebook's style: a decorator, globals of every kind."""
    table = np.arange(count)

    def thing(x):
        return helper(x) + int(table[-1]) + float(relu(np.array(-1.0)))

    return thing
'''


def test_the_script_rebuilds_what_an_exercise_function_uses_and_runs(tmp_path):
    path = tmp_path / "notebook_cells.py"
    path.write_text(HELPERS)
    namespace: dict = {"__name__": "__main__"}
    exec(compile(HELPERS, str(path), "exec"), namespace)
    text = sanitizer.script([namespace["make_thing"]], "print(make_thing(4)(2.5))")
    assert "import functools" in text and "import numpy as np" in text and "SCALE = 3" in text
    assert "from utilities.rounding import relu" in text
    assert text.index("def helper") < text.index("def make_thing"), "a helper is defined before its caller"
    script = tmp_path / "script.py"
    script.write_text(text)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path.parent)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "9.0"


def test_a_name_the_script_cannot_rebuild_is_said(tmp_path):
    source = "def uses_an_object(x):\n    return HANDLE.read(x)\n"
    path = tmp_path / "cell.py"
    path.write_text(source)
    namespace: dict = {"__name__": "__main__", "HANDLE": object()}
    exec(compile(source, str(path), "exec"), namespace)
    with pytest.raises(sanitizer.NotRebuilt, match="HANDLE"):
        sanitizer.script([namespace["uses_an_object"]], "")
    clean, message = sanitizer.sanitize("toy", [namespace["uses_an_object"]], "")
    assert clean and "skipped" in message and "HANDLE" in message


def _fake_runner(outputs: dict[str, str], code: int = sanitizer.ERROR_EXIT):
    def run(line, **kwargs):
        tool = line[line.index("--tool") + 1]
        text = outputs.get(tool, CLEAN[tool])
        return subprocess.CompletedProcess(line, 0 if text == CLEAN[tool] else code, stdout=text, stderr="")

    return run


def _toy_exercise(tmp_path):
    source = "def make_kernel(count):\n    return count + 1\n"
    path = tmp_path / "cell.py"
    path.write_text(source)
    namespace: dict = {"__name__": "__main__"}
    exec(compile(source, str(path), "exec"), namespace)
    return namespace["make_kernel"]


def test_a_sanitized_run_fails_naming_the_race_and_passes_when_clean(tmp_path):
    fn = _toy_exercise(tmp_path)
    binary = tmp_path / "compute-sanitizer"
    clean, message = sanitizer.sanitize("toy", [fn], "make_kernel(1)", binary=binary, runner=_fake_runner({}))
    assert clean and "found nothing" in message
    dirty = _fake_runner({"racecheck": RACE, "memcheck": MEMCHECK})
    clean, message = sanitizer.sanitize("toy", [fn], "make_kernel(1)", binary=binary, runner=dirty)
    assert (
        not clean and "racecheck: Error: Race reported" in message and "memcheck: Invalid __global__ write" in message
    )


def test_a_script_that_fails_under_the_tool_is_reported_with_its_traceback(tmp_path):
    fn = _toy_exercise(tmp_path)
    broken = "Traceback (most recent call last):\n  File 'x', line 1\nNameError: name 'plan' is not defined\n"
    failing = _fake_runner({"memcheck": broken + CLEAN["memcheck"]}, code=1)
    clean, message = sanitizer.sanitize("toy", [fn], "plan", binary=tmp_path / "cs", runner=failing)
    assert not clean and "did not run to its end" in message and "NameError" in message


def test_a_checker_with_a_driver_sanitizes_after_a_pass(tmp_path, monkeypatch, capsys):
    fn = _toy_exercise(tmp_path)
    drivers = []

    def driver(functions, *args, **kwargs):
        drivers.append((functions, args, kwargs))
        return "make_kernel(2)"

    @checker.checker("toy", driver=driver)
    def check_toy(run, size=3, *, seed=None) -> CheckResult:
        return checker.passed("toy", 1, 0)

    monkeypatch.setattr(sanitizer, "find_binary", lambda search=None: None)
    assert check_toy(fn, 5, exercise=fn, sanitize=True).status == "passed"
    assert drivers == [([fn], (5,), {})] and sanitizer.MISSING in capsys.readouterr().out
    monkeypatch.setattr(sanitizer, "find_binary", lambda search=None: tmp_path / "cs")
    monkeypatch.setattr(subprocess, "run", _fake_runner({"racecheck": RACE}))
    with pytest.raises(CheckFailure) as info:
        check_toy(fn, exercise=fn, sanitize=True)
    assert info.value.stage == "sanitizer" and "race_kernel+0x170" in str(info.value)
    assert check_toy(fn, exercise=fn).status == "passed", "without sanitize=True no tool runs"


def test_a_checker_without_a_driver_refuses_sanitize():
    @checker.checker("plain")
    def check_plain(run) -> CheckResult:
        return checker.passed("plain", 1, 0)

    with pytest.raises(TypeError, match="no sanitizer run"):
        check_plain(lambda: None, sanitize=True)


def test_short_names_keep_offsets_files_and_lines():
    assert sanitizer.short_name(f"{KERNEL}+0x90") == "race_kernel+0x90"
    assert sanitizer.short_name("kernel(float *)+0x90") == "kernel(float *)+0x90"
    assert sanitizer.short_name(textwrap.dedent("x.py:20:" + KERNEL)) == "x.py:20:race_kernel"


def test_kernels_arguments_follow_the_course_names(tmp_path):
    source = "def make_residue(count):\n    return count\n\n\ndef neighbor(m):\n    return m\n"
    path = tmp_path / "cells.py"
    path.write_text(source)
    namespace: dict = {}
    exec(compile(source, str(path), "exec"), namespace)
    assert sanitizer.kernels_arguments([namespace["make_residue"], namespace["neighbor"]]) == (
        "residue=make_residue, neighbor=neighbor"
    )


def _tracks_drivers():
    """(checker, exercise functions, the check's own arguments) of GPU checks whose exercises import on a CPU."""
    from utilities.conv import check as conv
    from utilities.conv import simt as conv_simt
    from utilities.ozaki import check as ozaki
    from utilities.ozaki import simt as ozaki_simt
    from utilities.ozaki2 import check as ozaki2
    from utilities.ozaki2 import simt as ozaki2_simt

    return [
        (ozaki2._scaling_driver, [ozaki2_simt.make_residue], (), {}),
        (ozaki2._digits_driver, [ozaki2_simt.make_digit], (), {}),
        (ozaki2._reconstruction_driver, [ozaki2_simt.make_reconstruct_kernel], (), {}),
        (ozaki2._gemm_driver, [ozaki2_simt.make_residue, ozaki2_simt.make_digit], (14,), {}),
        (ozaki._slicing_driver, [ozaki_simt.make_split_digits], (), {}),
        (ozaki._epilogue_driver, [ozaki_simt.make_epilogue_kernel], (), {}),
        (ozaki._gemm_driver, [ozaki_simt.make_split_digits, ozaki_simt.make_epilogue_kernel], (7,), {}),
        (conv._conv_driver, [conv_simt.neighbor], (), {"tile_n": 32}),
    ]


def test_every_drivers_script_compiles_and_its_cpu_imports_resolve():
    """The scripts a sanitized check writes, from the course's own exercise functions: valid Python, and every import
    that a CPU can make resolves (the GPU modules are imported on the GPU only)."""
    for driver, functions, args, kwargs in _tracks_drivers():
        text = sanitizer.script(functions, driver(functions, *args, **kwargs), sanitizer.PREAMBLE)
        compile(text, driver.__name__, "exec")
        assert "cupy.cuda.set_allocator(None)" in text, "memcheck sees a write past an array only without the pool"
        for name in map(sanitizer.def_name, functions):
            assert f"def {name}(" in text, (driver.__name__, name)
        cpu = [
            line
            for line in text.splitlines()
            if line.startswith(("import ", "from "))
            and not any(g in line for g in ("cupy", "tensorcore", "buildcache"))
        ]
        done = subprocess.run([sys.executable, "-c", "\n".join(cpu)], capture_output=True, text=True, cwd=ROOT)
        assert done.returncode == 0, (driver.__name__, done.stderr[-800:])
    assert "ConvConfig(**{'tile_n': 32, 'tile_k': 64})" in conv_driver_text()
    assert 'variant="unfused"' in _ozaki_driver_text()


def conv_driver_text():
    from utilities.conv import check as conv
    from utilities.conv import simt as conv_simt

    return conv._conv_driver([conv_simt.neighbor], tile_n=32)


def _ozaki_driver_text():
    from utilities.ozaki import check as ozaki
    from utilities.ozaki import simt as ozaki_simt

    return ozaki._gemm_driver([ozaki_simt.make_split_digits], 7)


def test_a_binary_that_cannot_start_is_reported(tmp_path):
    fn = _toy_exercise(tmp_path)

    def refuses(line, **kwargs):
        raise PermissionError(13, "Permission denied", line[0])

    clean, message = sanitizer.sanitize("toy", [fn], "make_kernel(1)", binary=tmp_path / "cs", runner=refuses)
    assert not clean and "could not start" in message and "chmod +x" in message


def test_a_local_name_that_a_notebook_global_shadows_is_not_rebuilt(tmp_path):
    """Notebook 4b holds a global ``a`` (a CuPy array) while its reconstruction kernel assigns a local ``a``: only
    the names a function reads as globals are rebuilt."""
    source = (
        "import math\n\n\ndef make_kernel(count):\n    def kernel(a, b):\n        c = a + b\n"
        "        a = math.floor(c)\n        return a * count\n\n    return kernel\n"
    )
    path = tmp_path / "cell.py"
    path.write_text(source)
    namespace: dict = {"__name__": "__main__", "a": object(), "c": object(), "count": object()}
    exec(compile(source, str(path), "exec"), namespace)
    text = sanitizer.script([namespace["make_kernel"]], "print(make_kernel(2)(1.5, 2.0))")
    assert "import math" in text and "a = " not in text.split("def make_kernel")[0]


# --- races by default -----------------------------------------------------------------------------------------

FAKE_TOOL = """#!{python}
import sys, time
tool = sys.argv[sys.argv.index("--tool") + 1]
with open({log!r}, "a") as log:
    log.write(f"{{tool}} {{time.monotonic()}}\\n")
time.sleep({sleep})
report = {reports!r}.get(tool, "")
print("the program's own output")
print(report or {clean!r}[tool])
sys.exit({exit} if report else 0)
"""


def fake_tool(tmp_path, reports=None, sleep=0.0, exit=sanitizer.ERROR_EXIT):
    """A stand-in compute-sanitizer: records when each tool started, prints the given report (or a clean one)."""
    path = tmp_path / "compute-sanitizer"
    log = tmp_path / "started.txt"
    path.write_text(
        FAKE_TOOL.format(
            python=sys.executable, log=str(log), sleep=sleep, reports=reports or {}, clean=CLEAN, exit=exit
        )
    )
    path.chmod(0o755)
    return path, log


def test_the_race_tools_run_at_once_in_processes_of_their_own(tmp_path):
    binary, log = fake_tool(tmp_path, {"racecheck": RACE}, sleep=1.0)
    pending = sanitizer.start("print('kernel')", binary=binary)
    assert not pending.finished()
    reports = pending.reports()
    assert [r.tool for r in reports] == ["racecheck", "synccheck"]
    starts = [float(line.split()[1]) for line in log.read_text().splitlines()]
    assert len(starts) == 2 and abs(starts[0] - starts[1]) < 0.9, "both tools start before either ends"
    assert pending.seconds < 1.9, "the two runs overlap"
    verdict, message = sanitizer.race_outcome(reports)
    assert verdict == "found" and "racecheck: Error: Race reported between Write access" in message
    assert "cuda.syncthreads() is missing" in message and "synccheck" not in message
    (tmp_path / "clean").mkdir()
    clean, _ = fake_tool(tmp_path / "clean")
    assert sanitizer.race_outcome(sanitizer.start("", binary=clean).reports()) == ("clean", "")


def test_a_barrier_some_threads_skip_is_found_by_synccheck(tmp_path):
    binary, _ = fake_tool(tmp_path, {"synccheck": SYNCCHECK})
    verdict, message = sanitizer.race_outcome(sanitizer.start("", binary=binary).reports())
    assert verdict == "found" and "Barrier error detected" in message and "inside an if" in message


def test_a_race_run_past_its_time_is_stopped_and_gives_no_verdict(tmp_path):
    binary, _ = fake_tool(tmp_path, sleep=30.0)
    pending = sanitizer.start("", binary=binary, timeout=1.0)
    reports = pending.reports()
    assert pending.seconds < 15 and all("ran past 1 s" in r.failed for r in reports)
    verdict, why = sanitizer.race_outcome(reports)
    assert verdict == "not checked" and "racecheck: it ran past 1 s" in why


def test_a_script_that_fails_under_the_race_tools_gives_no_verdict(tmp_path):
    broken = "Traceback (most recent call last):\nModuleNotFoundError: No module named 'cupy'\n"
    binary, _ = fake_tool(tmp_path, {"racecheck": broken, "synccheck": broken}, exit=1)
    verdict, why = sanitizer.race_outcome(sanitizer.start("", binary=binary).reports())
    assert verdict == "not checked" and "No module named 'cupy'" in why


def test_a_cancelled_race_run_leaves_no_process(tmp_path):
    binary, _ = fake_tool(tmp_path, sleep=60.0)
    pending = sanitizer.start("", binary=binary)
    processes = [process for _, process, _ in pending.runs]
    pending.cancel()
    assert all(process.poll() is not None for process in processes)


def test_no_tool_no_race_run(tmp_path, monkeypatch):
    monkeypatch.setattr(sanitizer, "find_binary", lambda search=None: None)
    assert sanitizer.start("print(1)") is None


def test_the_race_run_is_decided_by_where_the_kernels_ran():
    class Cuda:
        def __init__(self, available):
            self.available = available

        def is_available(self):
            return self.available

    gpu = {"numba.cuda": Cuda(True)}
    assert checker.race_check_skipped({}, gpu) == ("", False)
    assert checker.race_check_skipped({"COURSE_RACECHECK": "off"}, gpu) == ("COURSE_RACECHECK=off", True)
    assert checker.race_check_skipped({"NUMBA_ENABLE_CUDASIM": "1"}, gpu)[1] is False
    assert checker.race_check_skipped({}, {})[0].startswith("no kernel ran on a GPU")
    assert checker.race_check_skipped({}, {"numba.cuda": Cuda(False)}) == ("no GPU", False)


def _shared_toy(tmp_path, fails_on_call: int | None = None, bounds: bool = False):
    """A checker declared ``shared=True`` whose body calls ``run`` three times (a failure on call ``fails_on_call``),
    and the record of what happened: the driver's keywords, when the race run started."""
    fn = _toy_exercise(tmp_path)
    record = {"drivers": [], "calls": 0, "started_after": []}

    def driver(functions, *args, **kwargs):
        record["drivers"].append(kwargs)
        return "make_kernel(2)"

    @checker.checker("toy kernel", driver=driver, shared=True, bounds=bounds)
    def check_toy(run, *, shape=(256, 256), seed=None) -> CheckResult:
        for call in range(3):
            run()
            if call == fails_on_call:
                raise CheckFailure("C", "stage 'C': wrong")
        return checker.passed("toy kernel", 3, 0)

    def run():
        record["calls"] += 1

    return check_toy, run, fn, record


@pytest.fixture
def on_a_gpu(monkeypatch):
    """The race run's decision as on a GPU machine, and no verdict remembered from another test."""
    monkeypatch.setattr(checker, "race_check_skipped", lambda environ=None, modules=None: ("", False))
    monkeypatch.setattr(checker, "RACE_VERDICTS", {})


def test_a_shared_memory_check_finds_a_race_without_being_asked(tmp_path, monkeypatch, on_a_gpu):
    check_toy, run, fn, record = _shared_toy(tmp_path)
    binary, log = fake_tool(tmp_path, {"racecheck": RACE})
    real_start = sanitizer.start

    def start(text, *args, **kwargs):
        record["started_after"].append(record["calls"])
        assert "def make_kernel(" in text and "make_kernel(2)" in text
        return real_start(text, *args, binary=binary, **kwargs)

    monkeypatch.setattr(sanitizer, "start", start)
    with pytest.raises(CheckFailure) as info:
        check_toy(run, shape=(512, 512), exercise=fn)
    assert info.value.stage == "sanitizer" and "racecheck: Error: Race reported" in str(info.value)
    assert "smallest case" in str(info.value)
    assert record["drivers"] == [{"small": True, "shape": (512, 512)}], "the driver's smallest case"
    assert record["started_after"] == [0], "started with the check (its kernel build waits for the check's)"
    with pytest.raises(CheckFailure, match="Race reported"):
        check_toy(run, shape=(512, 512), exercise=fn)  # the same code again: the verdict stands, no second run
    assert record["started_after"] == [0]


def test_a_clean_shared_memory_check_says_what_ran_and_how_long(tmp_path, monkeypatch, capsys, on_a_gpu):
    check_toy, run, fn, _ = _shared_toy(tmp_path)
    binary, _ = fake_tool(tmp_path)
    real_start = sanitizer.start
    monkeypatch.setattr(sanitizer, "start", lambda text, **kw: real_start(text, binary=binary, **kw))
    assert check_toy(run, exercise=fn).status == "passed"
    out = capsys.readouterr().out
    assert "✓ toy kernel: no race and no barrier error under compute-sanitizer racecheck and synccheck (" in out
    assert "s of it after the check)" in out
    assert check_toy(run, exercise=fn).status == "passed"
    assert "checked before, same code" in capsys.readouterr().out


def test_a_failing_check_stops_its_race_run(tmp_path, monkeypatch, on_a_gpu):
    check_toy, run, fn, _ = _shared_toy(tmp_path, fails_on_call=1)
    binary, _ = fake_tool(tmp_path, sleep=60.0)
    started = []
    real_start = sanitizer.start

    def start(text, **kw):
        started.append(real_start(text, binary=binary, **kw))
        return started[-1]

    monkeypatch.setattr(sanitizer, "start", start)
    with pytest.raises(CheckFailure, match="stage 'C'"):
        check_toy(run, exercise=fn)
    assert len(started) == 1 and all(p.poll() is not None for _, p, _ in started[0].runs)


def test_without_the_tool_or_when_turned_off_a_check_says_races_were_not_checked(tmp_path, monkeypatch, capsys):
    check_toy, run, fn, _ = _shared_toy(tmp_path)
    monkeypatch.setattr(checker, "RACE_VERDICTS", {})
    monkeypatch.setattr(checker, "race_check_skipped", lambda environ=None, modules=None: ("", False))
    monkeypatch.setattr(sanitizer, "find_binary", lambda search=None: None)
    assert check_toy(run, exercise=fn).status == "passed"
    out = capsys.readouterr().out
    assert "… toy kernel: races not checked: compute-sanitizer not found" in out and sanitizer.WHEEL in out
    monkeypatch.setattr(
        checker, "race_check_skipped", lambda environ=None, modules=None: ("COURSE_RACECHECK=off", True)
    )
    assert check_toy(run, exercise=fn).status == "passed"
    assert "races not checked (COURSE_RACECHECK=off)" in capsys.readouterr().out


def test_no_race_run_without_a_gpu_without_exercise_code_or_when_asked_not_to(tmp_path, monkeypatch, capsys):
    check_toy, run, fn, record = _shared_toy(tmp_path)
    monkeypatch.setattr(sanitizer, "start", lambda *a, **k: pytest.fail("no race run here"))
    assert check_toy(run, exercise=fn).status == "passed"  # this machine: the simulator or no GPU
    monkeypatch.setattr(checker, "race_check_skipped", lambda environ=None, modules=None: ("", False))
    assert check_toy(run).status == "passed"  # no exercise code given: the course's kernel
    assert check_toy(run, exercise=fn, races=False).status == "passed"
    assert record["drivers"] == [] and "race" not in capsys.readouterr().out


def test_shared_needs_a_driver():
    with pytest.raises(TypeError, match="needs a driver"):
        checker.checker("no driver", shared=True)


def _shared_checkers():
    from utilities.conv import check as conv
    from utilities.fusion import check as fusion
    from utilities.multipass import check as multipass
    from utilities.ozaki import check as ozaki
    from utilities.ozaki2 import check as ozaki2
    from utilities.primer import check as primer

    modules = (primer, multipass, fusion, conv, ozaki, ozaki2)
    return {
        name: fn
        for module in modules
        for name, fn in vars(module).items()
        if name.startswith("check_") and getattr(fn, "driver", None) is not None
    }


def test_every_check_of_a_kernel_whose_threads_share_memory_runs_races_by_default():
    """The attendee writes (part of) a kernel body that shares memory between threads: the primer's tile GEMM, the
    multi-pass loop, 2a's and 2b's epilogues, 2c's and 2d's, the Ozaki-I products, diagonals and fused kernels.
    The others give a device function or a kernel without shared memory to the course's kernels."""
    shared = {name for name, fn in _shared_checkers().items() if fn.shared}
    assert shared == {
        "check_tile_gemm",
        "check_pass_gemm",
        "check_gemm_bias_relu",
        "check_back_to_back",
        "check_conv",
        "check_conv_b2b",
        "check_ozaki_gemm",
    }


def test_the_smallest_cases_are_one_or_two_blocks_with_every_k_stage():
    from utilities.conv import check as conv
    from utilities.fusion import check as fusion
    from utilities.multipass import check as multipass
    from utilities.ozaki import check as ozaki
    from utilities.primer import check as primer

    def small(driver, *args, **kwargs):
        text = driver([], *args, small=True, **kwargs)
        compile(textwrap.dedent(text), driver.__name__, "exec")
        return text

    b2b = small(fusion._b2b_driver, shape=(256, 576, 64, 128), batched=True, batch=3)
    assert "shape = (128, 576, 64, 128)" in b2b and "batch=None" in b2b and "(0.0, -0.5)" in b2b
    assert "GemmBiasRelu(128, 128, 192" in small(fusion._gemm_driver, shape=(384, 256, 192))
    text = small(conv._conv_driver, shape=conv.CONV_SHAPE, tile_n=32)
    assert "ConvShape(batch=1, height=8, width=16, c_in=64, c_out=32)" in text and "'tile_n': 32" in text
    block = conv.CONV_CONFIGS[0]
    text = small(conv._conv_driver, shape=conv.CONV_SHAPE, block=block)
    assert f"c_out={block['tile_n']})" in text and f"ConvConfig(**{block!r})" in text
    assert f"BlockConfig(**{fusion.GEMM_CONFIGS[0]!r})" in small(fusion._gemm_driver, block=fusion.GEMM_CONFIGS[0])
    other = fusion.B2B_CONFIGS[0]
    text = small(fusion._b2b_driver, shape=other["shape"], block=other["block"])
    assert "keep_d0=False" in text and f"BlockConfig(**{other['block']!r})" in text
    assert "keep_d0=True" in small(fusion._b2b_driver, stages=lambda: {})
    assert f"OzakiConfig(**{ozaki.OTHER_TILE!r})" in small(ozaki._gemm_driver, 7, block=ozaki.OTHER_TILE)
    assert "TileConfig(**{'tile_m': 64" in small(primer._driver, tile=(64, 64), block=primer.CONFIGS[0])
    assert "'fused': 8" in small(multipass._driver, "float16", tile=(64, 64))
    assert "c_out=64)" in small(conv._conv_driver, shape=conv.CONV_SHAPE)
    assert "B2BShape(batch=1, height=8, width=16, c_in=64, c_mid=64, c_out=128)" in small(conv._b2b_driver)
    assert "TileGemm(128, 128" in small(primer._driver, shape=(256, 384, 64), tile=(128, 128))
    assert "m, n, k = 128, 128, 3 * cfg.phase_k" in small(multipass._driver, "float16")
    text = small(ozaki._gemm_driver, 12, shapes=[(300, 136, 392)])
    assert "OzakiGemm(128, 128, 392, slices=3" in text  # one race case for the notebook's loop of checks
    assert small(ozaki._gemm_driver, 7, shapes=[(256, 384, 384)]) == text


def test_a_passed_check_waits_for_its_race_run_at_most_its_limit(tmp_path, monkeypatch, capsys, on_a_gpu):
    check_toy, run, fn, _ = _shared_toy(tmp_path)
    binary, _ = fake_tool(tmp_path, sleep=30.0)
    real_start = sanitizer.start
    monkeypatch.setattr(sanitizer, "start", lambda text, **kw: real_start(text, binary=binary, **kw))
    monkeypatch.setenv("COURSE_RACECHECK_WAIT", "1")
    assert check_toy(run, exercise=fn).status == "passed"
    out = capsys.readouterr().out
    assert "races not checked: racecheck: it ran past" in out and "stopped 1 s after the check" in out
    assert checker.race_wait({"COURSE_RACECHECK_WAIT": "x"}) == sanitizer.RACE_WAIT == checker.race_wait({})


def test_a_race_run_that_cannot_start_never_fails_the_attendees_check(tmp_path, monkeypatch, capsys, on_a_gpu):
    check_toy, run, fn, _ = _shared_toy(tmp_path)

    def broken(*args, **kwargs):
        raise RuntimeError("no session")

    monkeypatch.setattr(sanitizer, "start", broken)
    assert check_toy(run, exercise=fn).status == "passed"
    assert "races not checked: RuntimeError: no session" in capsys.readouterr().out


PAST_A = f"""\
{sanitizer.ARRAY_TAG} A 0x7f3e4c000000 24576
{sanitizer.ARRAY_TAG} B 0x7f3e4c200000 24576
========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 16 bytes
=========     at {KERNEL.replace("race_kernel", "multipass_kernel")}+0x1a30 in {SCRIPT}:43
=========     by thread (96,0,0) in block (0,0,0)
=========     Address 0x7f3e4c006000 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7f3e4c000000 of size 24,576 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: cuLaunchKernel [0x9a1b3] in libcuda.so.1
=========
========= ERROR SUMMARY: 1 error
"""


def test_memcheck_pads_its_allocations_and_a_read_past_an_announced_array_names_it(capsys):
    line = sanitizer.command("/bin/cs", "memcheck", "s.py")
    assert line[line.index("--padding") + 1] == str(sanitizer.PADDING) and sanitizer.PADDING >= 256
    assert "--padding" not in sanitizer.command("/bin/cs", "racecheck", "s.py")

    class Device:  # what announce reads of a CuPy array
        __cuda_array_interface__ = {"data": (0x7F3E4C000000, False)}
        nbytes = 24576

    sanitizer.announce(A=Device())
    assert capsys.readouterr().out == f"{sanitizer.ARRAY_TAG} A 0x7f3e4c000000 24576\n"
    report = sanitizer.parse("memcheck", PAST_A)
    assert report.arrays == {"A": 0x7F3E4C000000, "B": 0x7F3E4C200000}
    assert sanitizer.access_target(report.findings[0], report.arrays) == (
        "reads past the end of A (1 bytes after its last byte)"
    )
    verdict, message = sanitizer.race_outcome([report])
    named = "memcheck: your kernel reads past the end of A (1 bytes after its last byte): Invalid __global__ read"
    assert verdict == "found" and named in message
    unnamed = sanitizer.parse("memcheck", PAST_A.replace("0x7f3e4c000000 24576", "0x7f3e4c100000 24576"))
    assert sanitizer.access_target(unnamed.findings[0], unnamed.arrays) == ""  # no array of its own there
    assert sanitizer.access_target(sanitizer.parse("memcheck", MEMCHECK).findings[0], {}) == ""


def test_a_bounds_check_runs_memcheck_beside_racecheck_and_synccheck(tmp_path, monkeypatch, capsys, on_a_gpu):
    check_toy, run, fn, _ = _shared_toy(tmp_path, bounds=True)
    binary, log = fake_tool(tmp_path, {"memcheck": PAST_A})
    real_start = sanitizer.start
    monkeypatch.setattr(sanitizer, "start", lambda text, **kw: real_start(text, binary=binary, **kw))
    with pytest.raises(CheckFailure) as info:
        check_toy(run, exercise=fn)
    assert info.value.stage == "sanitizer" and "reads past the end of A" in str(info.value)
    assert "racecheck, synccheck and memcheck" in str(info.value)
    assert len(log.read_text().splitlines()) == 3, "the three tools ran at once"


def test_the_multipass_check_reads_past_its_operands_under_memcheck():
    from utilities.multipass import check as multipass

    assert multipass.check_pass_gemm.bounds and multipass.check_pass_gemm.shared
    text = multipass._driver([], "int8", small=True)
    assert "announce(A=a, B=bt)" in text and "(a, bt)" in text


def test_the_cause_comes_before_the_findings_however_long_they_are():
    report = sanitizer.parse("racecheck", RACE)
    report.findings = report.findings * 3  # three long reports of one kind: the hint once, at the top
    message = sanitizer.describe([report])
    assert message.startswith("hint: ") and message.index("cuda.syncthreads() is missing") < message.index("racecheck:")
    assert message.count("hint: ") == 1

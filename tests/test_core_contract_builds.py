"""The core: a check's other blocks built beside it (``utilities.contract_builds``), and each track's contract."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest

from utilities import beside_checks, checker, contract_builds
from utilities.checker import CheckFailure, CheckResult

EXERCISE = '''
def make_kernel(scale):
    """The toy exercise: its source goes into every script."""
    return scale * {value}
'''


class FakeProcess:
    """A build process that runs until ``finish`` (or a kill)."""

    def __init__(self, args, **kwargs):
        self.script = open(args[-1]).read()
        self.folder = Path(args[-1]).parent
        self.pid, self.returncode, self.waited = None, None, []

    def poll(self):
        return self.returncode

    def wait(self, timeout=None):
        self.waited.append(timeout)
        if self.returncode is None:
            self.returncode = 0  # it finished while the check waited
        return self.returncode

    def kill(self):
        self.returncode = -9


@pytest.fixture
def builds(monkeypatch):
    """Builds started through a fake Popen (their scripts kept), as on a GPU machine."""
    started: list[FakeProcess] = []

    def popen(args, **kwargs):
        started.append(FakeProcess(args, **kwargs))
        return started[-1]

    monkeypatch.setattr(contract_builds, "BUILDS", contract_builds.Builds(popen, spares=0))
    monkeypatch.setattr(contract_builds, "skipped", lambda environ=None, modules=None: "")
    return started


def toy(tmp_path, value: int = 2, fails: bool = False):
    """A checker whose contract has three blocks (the call's own among them), and an exercise function."""
    path = tmp_path / f"exercise_{value}.py"
    path.write_text(EXERCISE.format(value=value))
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)

    def driver(functions, *args, block=1, **kwargs):
        return f"make_kernel({block})\n"

    def contract(args, kwargs):
        return [(args, {**kwargs, "block": b}) for b in (1, 2, 3)]

    @checker.checker("toy", driver=driver, contract=contract)
    def check_toy(run, *, block=1) -> CheckResult:
        if fails:
            raise CheckFailure("C", "stage 'C': wrong")
        return checker.passed("toy", 1, 0)

    return check_toy, namespace["make_kernel"]


def test_the_first_check_of_new_code_builds_the_other_blocks_beside_it(tmp_path, builds):
    check, fn = toy(tmp_path)
    assert check(lambda: None, block=2, exercise=fn).status == "passed"
    assert len(builds) == 2, "blocks 1 and 3: the check builds its own"
    for process, block in zip(builds, (1, 3), strict=True):
        assert "def make_kernel(scale)" in process.script and f"make_kernel({block})" in process.script
        assert "buildcache.install(quiet=True)" in process.script
    check(lambda: None, block=1, exercise=fn)
    check(lambda: None, block=3, exercise=fn)
    assert len(builds) == 2, "the same code: nothing started again"


def test_a_later_check_waits_for_the_builds_of_its_code(tmp_path, builds, capsys):
    check, fn = toy(tmp_path)
    check(lambda: None, block=1, exercise=fn)
    assert all(p.poll() is None for p in builds) and not any(p.waited for p in builds)
    check(lambda: None, block=2, exercise=fn)
    assert all(p.waited and p.poll() == 0 for p in builds), "waited for, then found in the cache"


def test_a_failed_check_stops_the_builds_and_an_edit_stops_the_old_codes(tmp_path, builds):
    check, fn = toy(tmp_path, fails=True)
    with pytest.raises(CheckFailure):
        check(lambda: None, block=1, exercise=fn)
    assert len(builds) == 2 and all(p.returncode == -9 for p in builds)
    check, first = toy(tmp_path, value=3)
    check(lambda: None, block=1, exercise=first)
    check, edited = toy(tmp_path, value=4)
    check(lambda: None, block=1, exercise=edited)
    assert [p.returncode for p in builds[2:]] == [-9, -9, None, None], "the edit's builds run, the old ones stop"
    assert "* 4" in builds[-1].script


def test_nothing_is_built_ahead_for_a_skeleton_a_sanitized_run_or_off_the_gpu(tmp_path, builds, monkeypatch):
    check, fn = toy(tmp_path)
    check(lambda: None, block=1, exercise=fn, sanitize=False, races=False)
    assert len(builds) == 2
    builds.clear()
    monkeypatch.setattr(contract_builds, "BUILDS", contract_builds.Builds(lambda *a, **k: builds.append(a), spares=0))
    path = tmp_path / "skeleton.py"
    path.write_text(f"def make_kernel(scale):\n    return scale  {checker.PLACEHOLDER}\n")
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    check(lambda: None, block=1, exercise=namespace["make_kernel"])
    assert not builds, "code that still holds a placeholder is not built"
    monkeypatch.setattr(contract_builds, "skipped", lambda environ=None, modules=None: "no GPU")
    check(lambda: None, block=1, exercise=fn)
    assert not builds


def test_builds_run_where_the_checks_kernels_run_on_a_gpu(monkeypatch):
    """Where the race run runs (``beside_checks.kernels_off_gpu``), unless ``COURSE_BUILD_AHEAD=off``."""
    seen = []
    monkeypatch.setattr(beside_checks, "kernels_off_gpu", lambda environ, modules: seen.append(modules) or "no GPU")
    assert contract_builds.skipped({}, {"m": 1}) == "no GPU" and seen == [{"m": 1}]
    assert contract_builds.skipped({contract_builds.ENV: "off"}, {}) == "COURSE_BUILD_AHEAD=off"


def test_a_build_past_its_wait_is_stopped(tmp_path):
    process = subprocess.Popen(["sleep", "30"], start_new_session=True)
    builds = contract_builds.Builds()
    folder = tmp_path / "build"
    folder.mkdir()
    builds.by_code["code"] = [contract_builds.Build(process, folder)]
    assert builds.wait("code", limit=0.2) < 5 and process.wait(timeout=10) != 0
    assert not folder.exists(), "its folder removed"


def test_no_build_leaves_its_folder_behind(tmp_path, builds):
    check, fn = toy(tmp_path)
    check(lambda: None, block=1, exercise=fn)
    folders = [p.folder for p in builds]
    assert all(f.exists() for f in folders), "kept while they run"
    check(lambda: None, block=2, exercise=fn)  # waits for them
    assert not any(f.exists() for f in folders)
    check, edited = toy(tmp_path, value=5)
    check(lambda: None, block=1, exercise=edited)
    contract_builds.BUILDS.close()  # the kernel shuts down: the running builds stopped
    assert not any(p.folder.exists() for p in builds)


# ------------------------------------------------------------------------------------------------------------
# Each track's contract against the checks its notebook makes (the calls below are the solution notebooks')
# ------------------------------------------------------------------------------------------------------------


def _texts(check, calls):
    driver, contract = check.driver, check.contract
    return [textwrap.dedent(driver([], *a, **kw)) for a, kw in calls], [
        textwrap.dedent(driver([], *a, **kw)) for a, kw in contract(*calls[0])
    ]


def _notebook_calls():
    from utilities.conv import check as conv
    from utilities.fusion import check as fusion
    from utilities.multipass import check as multipass
    from utilities.ozaki import check as ozaki
    from utilities.primer import check as primer

    stages = {"stages": lambda: {}}
    other, shape = fusion.B2B_CONFIGS[0], fusion.B2B_CONFIGS[1]["shape"]
    tile = {dtype: (f.get("tile_m", 128), f.get("tile_n", 128)) for dtype, f in multipass.CONFIGS.items()}
    return {
        "0": (primer.check_tile_gemm, [((), {"shape": (256, 384, 64), "tile": (c["tile_m"], c["tile_n"]),
                                             "block": c}) for c in primer.CONFIGS]),  # fmt: skip
        "1": (multipass.check_pass_gemm, [((d,), {"phase_k": 64, "tile": tile[d]}) for d in multipass.CONFIGS]),
        "2a": (fusion.check_gemm_bias_relu, [((), {"shape": (384, 256, 192), "block": c})
                                             for c in fusion.GEMM_CONFIGS]),  # fmt: skip
        "2b": (fusion.check_back_to_back, [((), {"shape": other["shape"], "block": other["block"]}),
                                           ((), {"shape": shape, **stages})]),  # fmt: skip
        "2c": (conv.check_conv, [((), {"shape": conv.CONV_SHAPE, "block": c}) for c in conv.CONV_CONFIGS]),
        "2d": (conv.check_conv_b2b, [((), {"shape": conv.B2B_SHAPE, "block": c or None, **stages})
                                     for c in conv.CONV_B2B_CONFIGS]),  # fmt: skip
        "3d": (ozaki.check_ozaki_gemm, [((7,), {"shapes": [(256, 384, 384)], "block": None, **stages}),
                                        ((7,), {"shapes": [(300, 136, 392)], "block": ozaki.OTHER_TILE, **stages})]),
    }  # fmt: skip


@pytest.mark.parametrize("track", ["0", "1", "2a", "2b", "2c", "2d", "3d"])
def test_the_contract_builds_every_block_the_notebook_checks_and_not_the_first_one_twice(track):
    check, calls = _notebook_calls()[track]
    wanted, contract = _texts(check, calls)
    assert wanted[0] in contract, "the first check's own block is in the contract: it is not built beside it too"
    for text in wanted[1:]:
        assert text in contract, f"a later block of the notebook's is not built ahead:\n{text}"
    assert len(set(contract)) == len(contract) >= 2


@pytest.mark.parametrize("track", ["0", "1", "2a", "2b", "2c", "2d", "3d"])
def test_the_race_run_started_ahead_is_the_one_a_later_check_of_the_notebook_takes_over(track):
    check, calls = _notebook_calls()[track]
    small = [({**kw, "small": True}) for _, kw in calls]
    wanted, contract = _texts(check, [(a, kw) for (a, _), kw in zip(calls, small, strict=True)])
    ahead = [textwrap.dedent(check.driver([], *a, small=True, **kw)) for a, kw in check.contract(*calls[0])]
    for text in wanted[1:]:
        assert text in ahead, f"a later check's race run is not started ahead:\n{text}"


class FakeRun:
    """A race run under way: its reports are clean; a cancel is kept."""

    def __init__(self, text):
        self.text, self.cancelled, self.seconds = text, False, 1.0

    def reports(self, wait=None):
        return []

    def cancel(self):
        self.cancelled = True


def shared_toy(tmp_path, value: int = 2, fails: bool = False):
    """The toy checker with a race run (``shared=True``)."""
    path = tmp_path / f"shared_{value}.py"
    path.write_text(EXERCISE.format(value=value))
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)

    def driver(functions, *args, block=1, small=False, **kwargs):
        return f"make_kernel({block})  # small={small}\n"

    def contract(args, kwargs):
        return [(args, {**kwargs, "block": b}) for b in (1, 2, 3)]

    @checker.checker("toy", driver=driver, contract=contract, shared=True)
    def check_toy(run, *, block=1) -> CheckResult:
        if fails:
            raise CheckFailure("C", "stage 'C': wrong")
        return checker.passed("toy", 1, 0)

    return check_toy, namespace["make_kernel"]


@pytest.fixture
def races(monkeypatch, builds):
    """Race runs started through a stand-in of ``sanitizer.start``, as on a GPU with compute-sanitizer."""
    from utilities import sanitizer

    runs: list[FakeRun] = []

    def start(text, tools=()):
        runs.append(FakeRun(text))
        return runs[-1]

    monkeypatch.setattr(checker, "RACES_AHEAD", checker.RacesAhead(start))
    monkeypatch.setattr(checker, "RACE_VERDICTS", {})
    monkeypatch.setattr(sanitizer, "start", start)
    monkeypatch.setattr(checker, "race_check_skipped", lambda environ=None, modules=None: ("", False))
    return runs


def test_the_first_check_starts_the_other_blocks_race_runs_and_a_later_check_takes_its_own_over(tmp_path, races):
    check, fn = shared_toy(tmp_path)
    check(lambda: None, block=2, exercise=fn)
    assert len(races) == 3, "its own run and those of blocks 1 and 3, all at the first check"
    assert all("small=True" in r.text for r in races) and "make_kernel(2)" in races[-1].text
    check(lambda: None, block=1, exercise=fn)
    check(lambda: None, block=3, exercise=fn)
    assert len(races) == 3 and not checker.RACES_AHEAD.by_text, "taken over: nothing started after the first check"


def test_a_failed_check_or_an_edit_stops_the_race_runs_started_ahead(tmp_path, races):
    check, fn = shared_toy(tmp_path, fails=True)
    with pytest.raises(CheckFailure):
        check(lambda: None, block=1, exercise=fn)
    assert [r.cancelled for r in races] == [True, True, True]
    check, first = shared_toy(tmp_path, value=3)
    check(lambda: None, block=1, exercise=first)
    check, edited = shared_toy(tmp_path, value=4)
    check(lambda: None, block=1, exercise=edited)
    cancelled = [r.cancelled for r in races[3:]]
    assert cancelled == [True, True, False, False, False, False], "the old code's runs ahead stop, the new ones run"


# ------------------------------------------------------------------------------------------------------------
# Spare interpreters: an edit's builds start with their imports done
# ------------------------------------------------------------------------------------------------------------

LIGHT_SPARE = "import runpy, sys\npath = sys.stdin.readline().strip()\nif path:\n    runpy.run_path(path)\n"


def test_a_spare_runs_the_script_it_is_handed_and_a_new_one_waits_for_the_next_edit(tmp_path, monkeypatch):
    monkeypatch.setattr(contract_builds, "SPARE_CODE", LIGHT_SPARE)
    builds = contract_builds.Builds(spares=1)
    try:
        assert builds.warm() == 1 and builds.warm() == 0, "one spare, started once"
        spare = builds.spares[0].process
        out = tmp_path / "ran.txt"
        assert builds.start("code", [f"open({str(out)!r}, 'w').write('built')\n"]) == 1
        [build] = builds.by_code["code"]
        assert build.process is spare and build.process.wait(timeout=30) == 0 and out.read_text() == "built"
        assert not builds.spares and builds.warm() == 1, "a new spare for the next edit, after the check"
    finally:
        builds.close()


def test_a_spare_that_died_gives_way_to_a_fresh_interpreter(tmp_path, monkeypatch):
    monkeypatch.setattr(contract_builds, "SPARE_CODE", "raise SystemExit(3)  # an import failed\n")
    builds = contract_builds.Builds(spares=1)
    try:
        builds.warm()
        assert builds.spares[0].process.wait(timeout=30) == 3
        out = tmp_path / "ran.txt"
        builds.start("code", [f"open({str(out)!r}, 'w').write('built')\n"])
        [build] = builds.by_code["code"]
        assert build.process.wait(timeout=30) == 0 and out.read_text() == "built"
    finally:
        builds.close()


def test_the_skeletons_check_warms_the_spares_for_the_first_edit(tmp_path, monkeypatch):
    started = []
    monkeypatch.setattr(contract_builds, "BUILDS", contract_builds.Builds(lambda *a, **k: started.append(a) or
                                                                          FakeSpare(), spares=2))  # fmt: skip
    monkeypatch.setattr(contract_builds, "skipped", lambda environ=None, modules=None: "")
    check, _ = toy(tmp_path)
    path = tmp_path / "skeleton.py"
    path.write_text(f"def make_kernel(scale):\n    return scale  {checker.PLACEHOLDER}\n")
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    check(lambda: None, block=1, exercise=namespace["make_kernel"])
    assert len(started) == 2 and all(args[0][1] == "-c" for args in started), "two spares, nothing built"


class FakeSpare:
    """A spare that is still importing."""

    pid = None

    def poll(self):
        return None


HARD_CODED = """
def make_kernel(scale):
    total = 0
    for i in range(1, scale):  # a start of 1 is no size
        total += i
    for j in range(4):  # the four bytes of a word: the same at every block
        total += j
    for i in range(64):  # the fragment's size at one block
        total += i
    return total
"""


def test_a_loop_bound_written_as_a_number_fails_the_parameters_stage_at_once(tmp_path, builds):
    path = tmp_path / "hard_coded.py"
    path.write_text(HARD_CODED)
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    check, fine = toy(tmp_path)
    assert checker.hard_coded_bounds(fine) == [] and check(lambda: None, block=1, exercise=fine).status == "passed"
    assert checker.hard_coded_bounds(namespace["make_kernel"]) == ["make_kernel: for i in range(64):  # the " +
                                                                    "fragment's size at one block"]  # fmt: skip
    builds.clear()
    with pytest.raises(CheckFailure) as failure:
        check(lambda: None, block=1, exercise=namespace["make_kernel"])
    assert failure.value.stage == "parameters" and "range(64)" in str(failure.value) and not builds


def test_no_race_run_starts_ahead_where_race_runs_are_off(tmp_path, races, monkeypatch):
    monkeypatch.setattr(checker, "race_check_skipped", lambda environ=None, modules=None: ("COURSE_RACECHECK=off", 1))
    check, fn = shared_toy(tmp_path)
    check(lambda: None, block=2, exercise=fn)
    assert races == [] and not checker.RACES_AHEAD.by_text


def test_a_run_taken_over_gets_its_time_limit_from_the_take_and_only_for_its_own_tools():
    class Run:
        def __init__(self):
            self.now, self.started, self.timeout = 100.0, 100.0, 180.0

        def clock(self):
            return self.now

    run = Run()
    ahead = checker.RacesAhead(lambda text, tools=(): run)
    checker.RACE_VERDICTS.pop("script", None)
    ahead.by_text["script"] = ("code", run, ("racecheck", "synccheck"))
    assert ahead.take("script", ("racecheck", "synccheck", "memcheck")) is None, "another check's tools"
    run.now = 250.0  # taken 150 s after its start
    assert ahead.take("script", ("racecheck", "synccheck")) is run and run.timeout == 330.0
    assert ahead.take("script", ("racecheck", "synccheck")) is None, "taken once"

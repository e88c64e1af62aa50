"""The package's layout is a contract: every track has the same shape, the core needs only the base dependencies,
GPU modules stay out of CPU import paths, and the GPU stack's pins are written once."""

from __future__ import annotations

import ast
import io
import re
import subprocess
import sys
import tokenize
import tomllib
from pathlib import Path

import pytest

from utilities.execution import python_env

ROOT = Path(__file__).resolve().parent.parent
UTILITIES = ROOT / "utilities"
TRACKS = ("multipass", "fusion", "conv", "ozaki", "ozaki2")
ROLES = ("reference", "check", "model", "figures", "tensorcore", "benchmarks")  # every track has these files
# Notebook 0's package sits on the tracks' floor and keeps their file names, but holds only the roles it needs.
LESSONS = ("primer",)
CORE = (
    "checker",
    "guard",
    "sanitizer",
    "bench",
    "report",
    "plots",
    "peaks",
    "inputs",
    "exact",
    "errors",
    "smem",
    "operands",
    "cublas",
    "preflight",
    "rounding",
    "roofline",
    "precision",
    "plans",
    "machinery.versions",
)
# The house's floors, lowest first: a module imports from its own floor or below, never above; a track imports no
# other track. Course tooling (notebooks, run-throughs, the prebuild, reports) is the top floor.
TOOLING = (
    "notebooks",
    "mutants",
    "workshop",
    "gpu_suite",
    "gpu_proof",
    "bench_all",
    "prebuild",
    "emulations",
    "execution",
    "ledger",
)
FLOORS = ("machinery", "core", "track", "tooling")
GPU_ONLY = ("tensorcore", "tensorcore_persistent", "tensorcore_halo", "tensorcore_tma", "baselines", "benchmarks")

# Runs in a fresh interpreter in which only the standard library, NumPy and Matplotlib can be imported: the
# course's base dependencies (pyproject.toml's ``dependencies``).
ONLY_BASE = """
import importlib.abc, sys
ALLOWED = {"numpy", "matplotlib", "utilities"}
class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        top = name.split(".")[0]
        if top in ALLOWED or top in sys.stdlib_module_names or top.startswith("_"):
            return None
        if any(m.split(".")[0] == "matplotlib" for m in sys.modules) and top in MPL_DEPS:
            return None
        raise ImportError(f"{name} is not a base dependency")
MPL_DEPS = {"PIL", "cycler", "dateutil", "kiwisolver", "pyparsing", "packaging", "fontTools", "contourpy", "six"}
sys.meta_path.insert(0, Blocker())
import importlib
for name in sys.argv[1:]:
    importlib.import_module(name)
gpu = sorted(m for m in sys.modules if m.split(".")[0] in ("cupy", "numba", "nvmath", "cuda", "nbformat"))
assert not gpu, gpu
print("ok")
"""


# tests/test_<part>_<subject>[_gpu].py: the part is the floor or the track the file tests, ``course`` for what holds the
# whole checkout together (layout, README, launcher, notebooks); ``_gpu`` for a file whose tests all need a GPU.
TEST_PARTS = ("course", "machinery", "core", *LESSONS, *TRACKS, "tooling")


def test_every_test_file_says_which_floor_or_track_it_tests() -> None:
    files = sorted(p.name for p in (ROOT / "tests").glob("test_*.py"))
    rule = re.compile(rf"^test_({'|'.join(TEST_PARTS)})_[a-z0-9_]+\.py$")
    stray = [name for name in files if not rule.match(name)]
    assert not stray, f"test files outside the rule test_<part>_<subject>.py, part in {TEST_PARTS}: {stray}"
    parts = {part for part in TEST_PARTS if any(name.startswith(f"test_{part}_") for name in files)}
    assert parts == set(TEST_PARTS), f"parts without a test file: {sorted(set(TEST_PARTS) - parts)}"
    for name in (n for n in files if n.endswith("_gpu.py")):
        source = (ROOT / "tests" / name).read_text(encoding="utf-8")
        assert "pytestmark = pytest.mark.gpu" in source, f"{name}: a _gpu file marks all its tests gpu"


def test_every_track_has_the_same_roles() -> None:
    for track in TRACKS:
        missing = [role for role in ROLES if not (UTILITIES / track / f"{role}.py").is_file()]
        assert not missing, f"utilities/{track} lacks {missing}: every track keeps each role in the same file"
    assert not (UTILITIES / "gpu").exists(), "GPU modules live in their track (tensorcore.py, benchmarks.py)"


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """The ``utilities`` modules (or packages) that the file imports, absolute or relative, at any depth."""
    module = _module(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "utilities"}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join([*base, *([node.module] if node.module else [])])
            if target.split(".")[0] == "utilities":  # ``from utilities import prebuild`` imports a module
                found |= {f"{target}.{a.name}" if _is_module(f"{target}.{a.name}") else target for a in node.names}
    return found


def _is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def floor(module: str) -> tuple[int, str]:
    """The floor of a ``utilities`` module (an index into ``FLOORS``) and its track, if it is in one."""
    part = module.split(".")[1] if "." in module else ""
    if part == "machinery":
        return 0, ""
    if part in TRACKS or part in LESSONS:
        return 2, part
    if part in TOOLING:
        return 3, ""
    return 1, ""


def test_no_import_climbs_a_floor_and_no_track_imports_another() -> None:
    climbing, sideways = [], []
    for path in sorted(UTILITIES.rglob("*.py")):
        here, track = floor(_module(path))
        for target in sorted(_imports(path)):
            there, other = floor(target)
            if there > here:
                climbing.append(f"{_module(path)} ({FLOORS[here]}) -> {target} ({FLOORS[there]})")
            elif track and other and other != track:
                sideways.append(f"{_module(path)} -> {target}")
    assert not climbing, "imports that climb a floor (move the importer up, or what it needs down):\n" + "\n".join(
        climbing
    )
    assert not sideways, "a track imports another (move what they share to the core):\n" + "\n".join(sideways)


def test_the_package_imports_itself_in_one_style() -> None:
    """Inside ``utilities`` every import of the course's own modules is relative (``from ..bench import ...``)."""
    absolute = []
    for path in sorted(UTILITIES.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            if any(name.split(".")[0] == "utilities" for name in names):
                absolute.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert not absolute, "absolute imports of the course's modules (write them relative):\n" + "\n".join(absolute)


# A measured figure: a number with a unit of time or rate, or a speed ratio (the notebooks' prose rule, in code).
MEASURED = re.compile(
    r"(?<![\w.])\d[\d,]*(?:\.\d+)?(?:\s?-\s?\d[\d,]*(?:\.\d+)?)?\s(?:ms|us|µs|s|TOPS|TFLOP/s|GFLOP/s|GB/s|TB/s)(?![\w/])"
    r"|(?<![\w.])\d+\.\d+x(?=[\s,;.)])"
)


def _comments_and_docstrings(path: Path) -> list[tuple[int, str]]:
    source = path.read_text(encoding="utf-8")
    found = [
        (t.start[0], t.string)
        for t in tokenize.generate_tokens(io.StringIO(source).readline)
        if t.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                found.append((node.body[0].lineno, doc))
    return found


def test_no_measured_figure_sits_in_a_docstring_or_a_comment() -> None:
    """Measurements go stale with every run: they live in ``results/`` and ``instructor-notes/``, and the code's
    prose says why and where (a table the code needs as data may stay, with a comment that points to its report)."""
    frozen = [
        f"{path.relative_to(ROOT)}:{line}: {MEASURED.findall(text)}"
        for path in sorted(UTILITIES.rglob("*.py"))
        for line, text in _comments_and_docstrings(path)
        if MEASURED.search(text)
    ]
    assert not frozen, "measured figures in docstrings or comments (move them to a report or a note):\n" + "\n".join(
        frozen
    )


def test_the_measured_figure_pattern_sees_times_rates_and_ratios() -> None:
    seen = ["245 us", "took 1.4-1.8 s", "at 1294 TOPS", "34.19 ms", "3.35 TB/s", "0.64x DGEMM", "(1.38x)"]
    unseen = ["7-8s", "16 KiB", "2^17 rows", "sm_90", "0.30.4", "128x128x64", "a 3x3 conv", "2x faster"]
    assert all(MEASURED.search(s) for s in seen) and not any(MEASURED.search(s) for s in unseen)


def test_the_floor_check_sees_relative_and_absolute_imports(tmp_path: Path) -> None:
    """The scan above must not pass for want of seeing: it resolves both import forms to the same module."""
    shared = UTILITIES / "conv" / "model.py"
    assert "utilities.roofline" in _imports(shared)
    assert "utilities.machinery.buildcache" in _imports(UTILITIES / "bench_all.py")  # ``from . import <module>``
    assert floor("utilities.fusion.model") == (2, "fusion") and floor("utilities.prebuild")[0] == 3
    assert floor("utilities.machinery.versions")[0] == 0 and floor("utilities.rounding")[0] == 1
    assert floor("utilities.primer.check") == (2, "primer")


def test_the_core_and_the_cpu_modules_of_every_track_need_only_the_base_dependencies() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert {req.split(">")[0].split("<")[0].split("=")[0] for req in project["dependencies"]} == {"numpy", "matplotlib"}
    cpu = [f"utilities.{name}" for name in CORE]
    for track in TRACKS + LESSONS:
        cpu.append(f"utilities.{track}")
        cpu += [
            f"utilities.{track}.{p.stem}"
            for p in sorted((UTILITIES / track).glob("*.py"))
            if p.stem not in GPU_ONLY and p.stem not in ("__init__", "simt")
        ]
    done = subprocess.run([sys.executable, "-c", ONLY_BASE, *cpu], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


@pytest.mark.parametrize("track", TRACKS + LESSONS)
def test_importing_a_track_imports_no_gpu_module(track: str) -> None:
    code = (
        f"import sys, utilities.{track}\n"
        f"bad = [m for m in sys.modules if m.rsplit('.', 1)[-1] in {GPU_ONLY!r} "
        "or m.split('.')[0] in ('cupy', 'nvmath')]\n"
        "assert not bad, bad\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_package_and_the_project_describe_every_track_and_tool() -> None:
    import utilities

    doc = utilities.__doc__ or ""
    for name in (*TRACKS, *LESSONS, *TOOLING, *CORE, "machinery"):
        assert f"``{name}``" in doc, f"utilities/__init__.py does not name {name}"
    notebooks = ("(0)", "(1)", "(2a, 2b)", "(2c, 2d)", "(3a-3d)", "(4a, 4b)")
    assert all(n in doc for n in notebooks), "utilities/__init__.py names each track with its notebooks"
    description = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["description"]
    for part in ("0 a primer", "1 multi-pass", "2a/2b", "2c/2d", "3a-3d Ozaki-I", "4a/4b Ozaki-II"):
        assert part in description, f"pyproject.toml's description lacks {part!r}"


def test_the_stack_is_pinned_once() -> None:
    from utilities.machinery.versions import PINS

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    gpu = {req.split("==")[0].split("[")[0]: req.split("==")[1] for req in project["optional-dependencies"]["gpu"]}
    assert gpu == PINS
    readme = (ROOT / "README.md").read_text()
    for name, version in PINS.items():
        assert f"| {name} | {version} |" in readme, f"README's stack table lacks {name} {version}"
    literal = [
        str(path.relative_to(ROOT))
        for path in UTILITIES.rglob("*.py")
        if path.name != "versions.py" and any(f'"{v}"' in path.read_text() for v in ("0.30.4", "0.3.2.6", "14.2.0"))
    ]
    assert not literal, f"version literals outside utilities/machinery/versions.py: {literal}"


@pytest.mark.parametrize("tool", sorted(p.name for p in (ROOT / "tools").glob("*.py")))
def test_every_tool_answers_help_without_a_gpu(tool):
    env = python_env(simulator=False)
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / tool), "--help"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "usage" in done.stdout.lower(), done.stderr[-2000:]


def test_a_test_that_starts_python_keeps_the_path_it_found() -> None:
    """Tests start Python with ``execution.python_env``, which puts the course first on ``PYTHONPATH`` and keeps the
    rest: on the GPU machine nvmath lives there, and the two tests that set the path to the course alone failed on
    their first GPU run (2026-11-29, ``No module named 'nvmath'``)."""
    setting = re.compile(r"""\[["']PYTHONPATH["']\]\s*=[^=]|["']PYTHONPATH["']\s*:|\bPYTHONPATH\s*=[^=]""")
    offenders = [p.name for p in (ROOT / "tests").glob("*.py") if setting.search(p.read_text())]
    assert not offenders, f"set PYTHONPATH with utilities.execution.python_env: {offenders}"

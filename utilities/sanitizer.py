"""compute-sanitizer on the attendee's kernel: races, barriers and bad accesses, named from the tool's report.

A race (a shared-memory read of another warp's write with no barrier between) can pass every run of a check: the
warps happen to run in an order that hides it. ``compute-sanitizer`` watches every access instead. A GPU check run
with ``sanitize=True`` (``utilities.checker.checker``) then writes a small script: the imports its exercise
functions need (rebuilt from their globals, :func:`script`), their sources, and the track's driver, which builds the
plan with them and runs it once at the check's small shape; it runs that script in a subprocess under each tool of
:data:`TOOLS`, and reads the report (:func:`parse`):

- ``racecheck``: shared-memory hazards, "Race reported between Write access at ... and Read access at ...";
- ``synccheck``: barriers that not every thread reaches;
- ``memcheck``: reads and writes outside an allocation ("Invalid __global__ write of size 4 bytes"). CuPy's memory
  pool carves many arrays out of one allocation, so a write past one array into the next is inside an allocation:
  the script turns the pool off first (:data:`PREAMBLE`), and every array is then an allocation of its own.

The tool comes from the package index, the wheel ``nvidia-cuda-sanitizer-api`` (``nvidia/cu13/bin/
compute-sanitizer`` in site-packages, :func:`find_binary`); ``COMPUTE_SANITIZER`` names another binary. Without it
the check says so in one line and passes on. A sanitized run takes a minute or more (the kernel is built again in
the subprocess, unless the build cache has it, and runs many times slower under the tool): it is an option, apart
from the check's own time.

Races by default: a checker whose exercise is a kernel that shares memory between threads (``utilities.checker.
checker(..., shared=True)``) runs racecheck and synccheck on every check without being asked, on the check's
smallest case (one or two blocks, every K stage): :func:`start` launches both tools at once, in the background,
as soon as the check's first run has built the kernel (the subprocess then loads it from the build cache), so that
they run beside the rest of the check; :meth:`Pending.reports` waits for them when the check has passed, at most
:data:`RACE_WAIT` seconds. A run that does not finish by then (or within :data:`RACE_TIMEOUT` seconds of its start),
or a script that fails under the tool, is said in one line and the check passes; a race or a barrier error fails
the stage "sanitizer". ``COURSE_RACECHECK=off`` turns the default run off (``races=False`` for one call). A checker
whose kernel may read past an operand without any result showing it (a prefetch one phase too far, into a buffer
never used) runs memcheck beside them too (:data:`BOUNDS_TOOLS`); its driver names the operands (:func:`announce`),
and an access outside one is told as "reads past the end of A" (:func:`access_target`).
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import os
import re
import shutil
import signal
import subprocess
import symtable
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TOOLS = ("racecheck", "synccheck", "memcheck")
WHEEL = "nvidia-cuda-sanitizer-api"
IN_WHEEL = ("nvidia", "cu13", "bin", "compute-sanitizer")
ENV = "COMPUTE_SANITIZER"
ERROR_EXIT = 86  # the exit status the tool gives when it reported an error (--error-exitcode)
PRINT_LIMIT = 20  # reports the tool prints at most (--print-limit)
PADDING = 4096  # bytes of guard memcheck puts after each allocation (--padding): past a phase's K, say
MISSING = (
    f"compute-sanitizer not found: install the wheel with `pip install {WHEEL}` (it holds "
    f"{'/'.join(IN_WHEEL)} in site-packages), or set {ENV} to the binary; the sanitizer run is skipped"
)

_PREFIX = re.compile(r"^=========\s?")


def find_binary(search: Iterable[str] | None = None) -> Path | None:
    """The compute-sanitizer binary: ``$COMPUTE_SANITIZER``, else the wheel's in one of ``search`` (default:
    ``sys.path``), else one on ``PATH``; None when there is none."""
    named = os.environ.get(ENV)
    if named:
        return Path(named) if Path(named).is_file() else None
    for entry in sys.path if search is None else search:
        candidate = Path(entry or ".").joinpath(*IN_WHEEL)
        if candidate.is_file():
            return candidate
    found = shutil.which("compute-sanitizer") if search is None else None
    return Path(found) if found else None


def command(binary: Path | str, tool: str, script: Path | str, python: str = sys.executable) -> list[str]:
    """The command line that runs ``script`` with ``python`` under ``tool`` (one of :data:`TOOLS`)."""
    if tool not in TOOLS:
        raise ValueError(f"tool must be one of {TOOLS}, got {tool!r}")
    line = [str(binary), "--tool", tool, "--print-limit", str(PRINT_LIMIT), "--error-exitcode", str(ERROR_EXIT)]
    # No CUDA API errors: on an H200 (driver 580, 2026-11-28) memcheck counted 48 of them in the Ozaki-II plans, every
    # one a cuGetProcAddress_v2 that a library asked for a driver function this driver lacks. A kernel that faults
    # shows as an access error, and the script then fails with the error: neither needs the API's reports.
    line += ["--report-api-errors", "no"]
    if tool == "racecheck":
        line += ["--racecheck-report", "analysis"]  # one line per race between two instructions, not per thread
    if tool == "memcheck":  # guard bytes after each allocation: a read past one array into the next one is seen
        line += ["--padding", str(PADDING)]
    return [*line, python, str(script)]


# ------------------------------------------------------------------------------------------------------------
# The tool's report
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """One error the tool reported: ``kind`` is ``race``, ``barrier``, ``access`` or ``api``; ``lines`` the report's
    own lines (without the ``=========`` prefix)."""

    tool: str
    kind: str
    lines: tuple[str, ...]

    @property
    def headline(self) -> str:
        return " ".join(line.strip() for line in self.lines[:2] if line.strip())

    def places(self) -> list[str]:
        """The code locations the report names (``race_kernel+0x90 in file.py:12``), kernel names shortened."""
        out = []
        for line in self.lines:
            match = _AT.search(line)
            if match:
                where = f" in {short_name(match['where'])}" if match["where"] else ""
                out.append(short_name(match["pc"]) + where)
        return out

    def explain(self) -> str:
        return HINTS[self.kind]


HINTS = {
    "race": "two threads of a block used one shared-memory address with no barrier between the write and the read: "
    "a cuda.syncthreads() is missing (after a store to shared memory that another warp reads; before a store that "
    "overwrites what another warp may still read, such as an MMA's last operand tile); copy_wait() waits for this "
    "thread's copies only, not for the other warps",
    "barrier": "a barrier that not every thread of the block reaches, or reaches in a different place: a "
    "cuda.syncthreads() inside an if, or in a loop whose trip count differs between threads",
    "access": "a read or write outside an allocation: an index past the end (a missing `if row < m` check, a tile "
    "offset from the wrong block index, a loop bound that is not the array's own)",
    "api": "a CUDA call failed while the kernel ran (the line names the error): the kernel faulted",
}

_START = (
    ("race", re.compile(r"(Race reported between|Potential \w+ hazard detected)", re.I)),
    ("barrier", re.compile(r"(Barrier error detected|Invalid arguments? to barrier|divergent thread)", re.I)),
    ("access", re.compile(r"Invalid __(global|shared|local)__ (read|write|atomic)|Misaligned|out of bounds", re.I)),
    ("api", re.compile(r"Program hit \S+ ", re.I)),
)
_SUMMARY = re.compile(r"^(?P<tool>[A-Z]+ )?(ERROR |RACECHECK )?SUMMARY:\s*(?P<count>\d+) (hazards?|errors?)", re.I)
_HAZARDS = re.compile(
    r"RACECHECK SUMMARY: (?P<count>\d+) hazards? displayed \((?P<errors>\d+) errors?, (?P<warnings>\d+)"
)


_AT = re.compile(  # a code location: "at kernel(...)+0x1b0 in file.py:33", or "at 0x1b0 in ..."
    r"\bat (?P<pc>\S.*?\+0x[0-9a-fA-F]+|0x[0-9a-fA-F]+)(?: in (?P<where>.+?))?(?: \[\d+ hazards?\])?$"
)
_DEMANGLED = re.compile(r"cudapy::(?:\w+::)*(?P<name>\w+)(?:\[abi:[^\]]*\])?(?:\((?:[^()]|\([^()]*\))*\))?")
_MANGLED = re.compile(r"_ZN(?:\d+[A-Za-z_$][\w$]*?)+(?=[A-Z\d]|$)[\w$]*")


def _last_component(mangled: str) -> str:
    """The last name of an Itanium-mangled nested name (``_ZN6cudapy8__main__11race_kernelB2v1...``: race_kernel)."""
    i, names = 3, []
    while i < len(mangled) and mangled[i].isdigit():
        j = i
        while j < len(mangled) and mangled[j].isdigit():
            j += 1
        size = int(mangled[i:j])
        names.append(mangled[j : j + size])
        i = j + size
    return names[-1] if names else mangled


def short_name(text: str) -> str:
    """``text`` with numba's kernel names shortened to their Python names: ``cudapy::__main__::race_kernel[abi:..]
    (Array<float, 1, C, mutable, aligned>)`` and ``_ZN6cudapy8__main__11race_kernelB2v1...`` become
    ``race_kernel``; offsets, files and lines stay."""
    text = _DEMANGLED.sub(lambda m: m["name"], text)
    return _MANGLED.sub(lambda m: _last_component(m.group(0)), text)


ARRAY_TAG = "course-sanitizer array"  # a line of the script's own output: an operand's name, address and size
_ARRAY = re.compile(rf"^{ARRAY_TAG} (?P<name>\S+) (?P<start>0x[0-9a-fA-F]+) (?P<size>\d+)$")
_INVALID = re.compile(r"Invalid __(?P<space>\w+)__ (?P<how>read|write|atomic)", re.I)
_NEAREST = re.compile(
    r"and is (?P<bytes>[\d,]+) bytes (?P<side>after|before) the nearest allocation at (?P<start>0x[0-9a-fA-F]+)"
    r" of size (?P<size>[\d,]+) bytes"
)


def announce(**arrays: Any) -> None:
    """Print each device array's name, address and size (``A=a``), so that a memcheck report on an address outside
    it names it (:func:`access_target`). Arrays with ``__cuda_array_interface__`` (CuPy's, numba's)."""
    for name, array in arrays.items():
        start = array.__cuda_array_interface__["data"][0]
        print(f"{ARRAY_TAG} {name} {start:#x} {array.nbytes}", flush=True)


@dataclass
class Report:
    """What one tool said: its findings, the summary's count (None when the output has no summary), the script's
    own failure (a traceback) when it did not run to its end, and the arrays its driver named (:func:`announce`:
    name -> address of the first byte)."""

    tool: str
    findings: list[Finding] = field(default_factory=list)
    summary: int | None = None
    failed: str = ""
    arrays: dict[str, int] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        return not self.findings and not self.failed and not self.summary


def parse(tool: str, output: str) -> Report:
    """The findings of ``tool``'s ``output`` (the lines that start with ``=========``; others are the program's)."""
    report = Report(tool)
    current: list[str] | None = None
    kind = ""
    for raw in output.splitlines():
        if not raw.startswith("========="):
            named = _ARRAY.match(raw.strip())
            if named:
                report.arrays[named["name"]] = int(named["start"], 16)
            continue
        line = _PREFIX.sub("", raw).rstrip()
        hazards = _HAZARDS.search(line)
        summary = _SUMMARY.search(line)
        if hazards or summary:
            report.summary = int((hazards or summary)["errors" if hazards else "count"])
            current = None
            continue
        if not line.strip():
            current = None
            continue
        if line.strip().startswith(("COMPUTE-SANITIZER", "Saved host backtrace", "Host Frame")):
            continue
        started = next((k for k, pattern in _START if pattern.search(line)), "")
        continuation = raw.startswith("=========     ") or line.startswith((" ", "\t"))
        if started and not (continuation and current is not None and kind == started):
            kind, current = started, [line.strip()]
            report.findings.append(Finding(tool, kind, ()))
        elif current is not None and continuation:
            current.append(line.strip())
        else:
            continue
        report.findings[-1] = Finding(tool, kind, tuple(current))
    return report


def access_target(finding: Finding, arrays: dict[str, int]) -> str:
    """What an access finding did to an array the driver named (``arrays``: name -> first byte), from the report's
    "and is N bytes after the nearest allocation at 0x..." line: "reads past the end of A (64 bytes after its last
    byte)", "writes before the start of C (...)"; "" when the finding is no such access or names no such array."""
    if finding.kind != "access":
        return ""
    invalid = next((m for line in finding.lines if (m := _INVALID.search(line))), None)
    nearest = next((m for line in finding.lines if (m := _NEAREST.search(line))), None)
    if invalid is None or nearest is None:
        return ""
    name = next((n for n, start in arrays.items() if start == int(nearest["start"], 16)), "")
    if not name:
        return ""
    verb = {"read": "reads", "write": "writes"}.get(invalid["how"].lower(), "accesses")
    side = "past the end of" if nearest["side"] == "after" else "before the start of"
    where = "after its last byte" if nearest["side"] == "after" else "before its first"
    return f"{verb} {side} {name} ({nearest['bytes']} bytes {where})"


def describe(reports: Sequence[Report]) -> str:
    """The message of a failed sanitizer run: what causes each kind of finding first (a long report must not push the
    cause out of sight), then each tool's first findings and where they happened."""
    kinds = dict.fromkeys(finding.kind for report in reports for finding in report.findings[:3])
    parts = [f"hint: {HINTS[kind]}" for kind in kinds]
    for report in reports:
        if report.failed:
            parts.append(f"{report.tool}: the script did not run to its end:\n{report.failed}")
        for finding in report.findings[:3]:
            where = finding.places()
            target = access_target(finding, report.arrays)
            text = f"{report.tool}: " + (f"your kernel {target}: " if target else "") + finding.headline
            if where:
                text += f"\n  where: {'; '.join(dict.fromkeys(where))}"
            parts.append(text)
        if len(report.findings) > 3:
            parts.append(f"{report.tool}: ... and {len(report.findings) - 3} more reports")
        if not report.findings and report.summary:
            parts.append(f"{report.tool}: its summary counts {report.summary} errors (see its output)")
    return "\n".join(parts)


# ------------------------------------------------------------------------------------------------------------
# The script: the exercise functions with the imports they need, and a driver
# ------------------------------------------------------------------------------------------------------------


class NotRebuilt(ValueError):
    """A name an exercise function uses that the script cannot import or define."""


def source_of(fn: Any) -> str:
    """The source of an exercise function (a numba device function's Python body, decorators kept), dedented."""
    python = getattr(fn, "py_func", None) or inspect.unwrap(fn)
    return textwrap.dedent(inspect.getsource(python))


def def_name(fn: Any) -> str:
    """The name an exercise function's source defines (under numba's and functools' wrappers)."""
    return (getattr(fn, "py_func", None) or inspect.unwrap(fn)).__name__


def kernels_arguments(functions: Sequence[Any]) -> str:
    """``Kernels(...)``'s arguments for the exercise factories: ``make_residue`` is ``residue=make_residue``,
    ``make_conv_kernel`` ``conv=make_conv_kernel``, ``neighbor`` ``neighbor=neighbor`` (the course's names)."""
    out = []
    for fn in functions:
        name = def_name(fn)
        field = name.removeprefix("make_").removesuffix("_kernel")
        out.append(f"{field}={name}")
    return ", ".join(out)


def _used_names(source: str) -> list[str]:
    """The global names ``source`` reads (in first-use order): those its top level reads without binding them
    (decorators, defaults, annotations) and those its functions read as globals (``symtable``: a local, a parameter
    or a variable of an enclosing function is not one, whatever the notebook holds under that name)."""
    table = symtable.symtable(source, "<exercise>", "exec")
    seen: dict[str, None] = {}
    for symbol in table.get_symbols():
        if symbol.is_referenced() and not symbol.is_assigned() and not symbol.is_imported():
            seen.setdefault(symbol.get_name())
    pending = list(table.get_children())
    while pending:
        child = pending.pop(0)
        if isinstance(child, symtable.Function):
            for name in child.get_globals():
                seen.setdefault(name)
        pending += child.get_children()
    defined = {n.name for n in ast.parse(source).body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    return [name for name in seen if name not in defined and not hasattr(builtins, name)]


def _importable(module: str, qualname: str, obj: Any) -> bool:
    try:
        found: Any = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return False
    return found is obj


def _module_holding(name: str, obj: Any) -> str | None:
    """A loaded public module whose attribute ``name`` is ``obj`` (the shortest such name)."""
    found = [
        module_name
        for module_name, module in list(sys.modules.items())
        if module is not None
        and not any(part.startswith("_") for part in module_name.split("."))
        and getattr(module, name, None) is obj
    ]
    return min(found, key=lambda m: (m.count("."), len(m))) if found else None


def import_line(name: str, obj: Any) -> str | None:
    """A line that binds ``name`` to ``obj`` in a fresh interpreter, or None when none does (a notebook's own)."""
    if inspect.ismodule(obj):
        module = obj.__name__
        if "." in module:
            parent, leaf = module.rsplit(".", 1)
            return f"from {parent} import {leaf}" + (f" as {name}" if leaf != name else "")
        return f"import {module}" + (f" as {name}" if module != name else "")
    if isinstance(obj, bool | int | float | str | bytes | type(None)):
        return f"{name} = {obj!r}"
    if isinstance(obj, tuple) and all(isinstance(v, bool | int | float | str) for v in obj):
        return f"{name} = {obj!r}"
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if module and qualname and module != "__main__" and "<" not in qualname and _importable(module, qualname, obj):
        return f"from {module} import {qualname}" + (f" as {name}" if qualname != name else "")
    holder = _module_holding(name, obj)
    if holder and holder != "__main__":
        return f"from {holder} import {name}"
    return None


def script(functions: Sequence[Any], driver: str, preamble: str = "") -> str:
    """A script that defines ``functions`` (the attendee's, from their sources) with every name they use, then runs
    ``driver``. Names bound to the course's or a library's objects are imported; a function of the notebook itself
    that they call is defined from its source too; a name the script cannot rebuild raises :class:`NotRebuilt`."""
    imports: dict[str, None] = {}
    bodies: dict[str, str] = {}
    pending = [fn for fn in functions if fn is not None]
    defined = {getattr(getattr(fn, "py_func", fn), "__name__", "") for fn in pending}
    while pending:
        fn = pending.pop(0)
        python = getattr(fn, "py_func", None) or inspect.unwrap(fn)
        name = python.__name__
        if name in bodies:
            continue
        text = source_of(fn)
        bodies[name] = text
        namespace = python.__globals__
        for used in _used_names(text):
            if used in defined or used in bodies:
                continue
            if used not in namespace:
                continue  # a local of a nested function, or a name only the driver provides
            value = namespace[used]
            line = import_line(used, value)
            if line is not None:
                imports.setdefault(line)
            elif inspect.isfunction(value) or hasattr(value, "py_func"):
                defined.add(used)
                pending.append(value)
            else:
                raise NotRebuilt(f"{name} uses {used!r} ({type(value).__name__}), which a fresh process cannot rebuild")
    parts = ["# Written by utilities.sanitizer: the attendee's kernels, run once under compute-sanitizer."]
    parts += [preamble.strip()] if preamble.strip() else []
    parts.append("\n".join(imports))
    parts += list(reversed(bodies.values()))  # helpers first: a factory's default argument may name one
    parts.append(textwrap.dedent(driver).strip())
    return "\n\n\n".join(p for p in parts if p) + "\n"


PREAMBLE = """
import cupy

from utilities.machinery import buildcache

cupy.cuda.set_allocator(None)  # every buffer its own allocation: CuPy's pool hides a write past one from memcheck
buildcache.install(quiet=True)  # the kernel the check just built loads from the cache where it can
"""


# ------------------------------------------------------------------------------------------------------------
# Running it
# ------------------------------------------------------------------------------------------------------------


def run(
    text: str,
    tools: Sequence[str] = TOOLS,
    *,
    binary: Path | None = None,
    timeout: float = 900.0,
    runner: Callable[..., Any] | None = None,
) -> list[Report] | None:
    """Run the script ``text`` under each of ``tools`` (``runner``: ``subprocess.run``'s form); None when there is no
    compute-sanitizer. A script that fails (a Python traceback, a time-out) gives a report whose ``failed`` holds the
    end of its output."""
    binary = binary or find_binary()
    if binary is None:
        return None
    runner = runner or subprocess.run  # looked up at the call: a test replaces it
    reports = []
    with tempfile.TemporaryDirectory(prefix="sanitize-") as folder:
        path = Path(folder) / "sanitized_kernel.py"
        path.write_text(text)
        env = script_environment()
        for tool in tools:
            try:
                done = runner(command(binary, tool, path), capture_output=True, text=True, timeout=timeout, env=env)
            except subprocess.TimeoutExpired:
                reports.append(Report(tool, failed=f"it ran past {timeout:.0f} s"))
                continue
            except OSError as error:  # a binary without its executable bit (a wheel unpacked by hand), say
                reports.append(Report(tool, failed=f"{binary} could not start: {error} (chmod +x it?)"))
                break
            output = (done.stdout or "") + "\n" + (done.stderr or "")
            report = parse(tool, output)
            if done.returncode not in (0, ERROR_EXIT) or ("Traceback" in output and not report.findings):
                tail = [line for line in output.splitlines() if not line.startswith("=========")][-15:]
                report.failed = "\n".join(tail) or f"exit status {done.returncode}"
            reports.append(report)
    return reports


# ------------------------------------------------------------------------------------------------------------
# Races by default: racecheck and synccheck at once, in the background, beside the rest of the check
# ------------------------------------------------------------------------------------------------------------

RACE_TOOLS = ("racecheck", "synccheck")  # a missing barrier (a race), a misplaced one (a barrier some threads skip)
BOUNDS_TOOLS = (*RACE_TOOLS, "memcheck")  # and an access outside an operand (a read whose data no result shows)
RACE_TIMEOUT = 180.0  # seconds from the start: past them the run is given up, and the check passes saying so
RACE_WAIT = 60.0  # seconds a passed check waits for it at most (COURSE_RACECHECK_WAIT); issue 41 sets what it may add
RACE_ENV = "COURSE_RACECHECK"  # "off" turns the default race run off


def package_root() -> str:
    """The folder that holds the ``utilities`` package (a script run elsewhere imports the course from it)."""
    return str(Path(__file__).resolve().parents[1])


def script_environment() -> dict[str, str]:
    """The environment of a sanitized script: this one, with the course and the working directory importable."""
    paths = [package_root(), os.getcwd(), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys(p for p in paths if p))}


class Pending:
    """Sanitizer runs under way in the background, one process per tool (:func:`start`)."""

    def __init__(
        self,
        runs: list[tuple[str, Any, Path]],
        folder: tempfile.TemporaryDirectory,
        timeout: float,
        clock: Callable[[], float],
    ) -> None:
        self.runs, self.folder, self.timeout, self.clock = runs, folder, timeout, clock
        self.started = clock()
        self.seconds = 0.0  # from the start to the last process's end (or the time-out)

    def finished(self) -> bool:
        return all(process.poll() is not None for _, process, _ in self.runs)

    def reports(self, wait: float | None = None) -> list[Report]:
        """Wait for every tool (up to :attr:`timeout` seconds from the start, and at most ``wait`` seconds from now),
        stop those past it, and read what each said. A tool stopped so, or whose script failed, gives a report whose
        ``failed`` says so."""
        out = []
        end = self.started + self.timeout
        if wait is not None:
            end = min(end, self.clock() + wait)
        for tool, process, path in self.runs:
            try:
                code = process.wait(timeout=max(0.0, end - self.clock()))
            except subprocess.TimeoutExpired:
                stop_process(process)
                took = self.clock() - self.started
                out.append(Report(tool, failed=f"it ran past {took:.0f} s (stopped {wait or 0:.0f} s after the check)"
                                  if wait is not None and end < self.started + self.timeout
                                  else f"it ran past {self.timeout:.0f} s"))  # fmt: skip
                continue
            output = path.read_text(errors="replace") if path.exists() else ""
            report = parse(tool, output)
            if code not in (0, ERROR_EXIT) or ("Traceback" in output and not report.findings):
                tail = [line for line in output.splitlines() if not line.startswith("=========")][-15:]
                report.failed = "\n".join(tail) or f"exit status {code}"
            out.append(report)
        self.seconds = self.clock() - self.started
        self.folder.cleanup()
        return out

    def cancel(self) -> None:
        """Stop every process (the check failed, or was not finished: there is nothing to sanitize)."""
        for _, process, _ in self.runs:
            stop_process(process)
        self.folder.cleanup()


def stop_process(process: Any) -> None:
    """Kill ``process`` and what it started (compute-sanitizer starts the Python that runs the kernel)."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (OSError, TypeError, AttributeError):  # not a process group of its own (a stand-in in a test)
        process.kill()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def start(
    text: str,
    tools: Sequence[str] = RACE_TOOLS,
    *,
    binary: Path | None = None,
    timeout: float = RACE_TIMEOUT,
    popen: Callable[..., Any] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Pending | None:
    """Start the script ``text`` under every tool of ``tools`` at once, each in a process of its own (``popen``:
    ``subprocess.Popen``'s form) that writes its output to a file; None when there is no compute-sanitizer."""
    binary = binary or find_binary()
    if binary is None:
        return None
    popen = popen or subprocess.Popen
    folder = tempfile.TemporaryDirectory(prefix="races-")
    path = Path(folder.name) / "sanitized_kernel.py"
    path.write_text(text)
    runs = []
    env = script_environment()
    for tool in tools:
        log = Path(folder.name) / f"{tool}.txt"
        with log.open("w") as handle:
            try:
                process = popen(
                    command(binary, tool, path), stdout=handle, stderr=subprocess.STDOUT, env=env,
                    start_new_session=True,
                )  # fmt: skip
            except OSError as error:
                handle.write(f"{binary} could not start: {error} (chmod +x it?)\n")
                process = _Failed()
        runs.append((tool, process, log))
    return Pending(runs, folder, timeout, clock)


class _Failed:
    """A process that could not start: finished, with a failing status."""

    returncode = 127
    pid = None

    def poll(self) -> int:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        return self.returncode

    def kill(self) -> None:
        pass


def race_outcome(reports: Sequence[Report]) -> tuple[str, str]:
    """``("found", message)`` when a tool reported a race or a barrier error, ``("not checked", why)`` when a run
    gave no verdict (a time-out, a script that failed under the tool), else ``("clean", "")``."""
    found = [r for r in reports if r.findings or (r.summary and not r.failed)]
    if found:
        return "found", describe(found)
    failed = [r for r in reports if r.failed]
    if failed:
        why = "; ".join(
            f"{r.tool}: {r.failed.strip().splitlines()[-1] if r.failed.strip() else 'failed'}" for r in failed
        )
        return "not checked", why
    return "clean", ""


def sanitize(
    name: str,
    functions: Sequence[Any],
    driver: str,
    *,
    tools: Sequence[str] = TOOLS,
    runner: Callable[..., Any] | None = None,
    binary: Path | None = None,
) -> tuple[bool, str]:
    """Run ``functions`` through ``driver`` under ``tools``: (clean, message). Without the tool the message says so
    and the run counts as clean (nothing was found, nothing could be)."""
    started = time.perf_counter()
    try:
        text = script(functions, driver, PREAMBLE)
    except (NotRebuilt, OSError, TypeError) as error:
        return True, f"… {name}: the sanitizer run is skipped: {error}"
    reports = run(text, tools, binary=binary, runner=runner)
    if reports is None:
        return True, f"… {name}: {MISSING}"
    seconds = time.perf_counter() - started
    if all(r.clean for r in reports):
        return True, f"✓ {name}: compute-sanitizer {', '.join(tools)} found nothing ({seconds:.0f} s)"
    return False, describe(reports)

"""The kernels of a check's other blocks, built beside it: one build's wait after an edit, not one per block.

A kernel exercise is checked at every block of its contract (two tile shapes, say: no size of one may sit in an
index), and each block is a kernel of its own, so an edit used to cost one build after another. A checker declared
with a ``contract`` (``checker.checker``) hands this module, on the first check of an edit, the code that builds and
runs the attendee's kernel at each other block (its driver's script, ``utilities.sanitizer.script``); each runs in a
process of its own while the check of the first block builds in the notebook's. A later check of the same code waits
for those processes, then finds its kernel in the build cache: served by its fingerprint
(``machinery.buildcache.dispatch``), neither typed nor linked.

A build process starts warm: a spare interpreter that has imported CuPy, numba-cuda and nvmath-python waits for
its script (:class:`Spare`), started when a check first runs (the untouched skeleton's check, say) and again after
each use, so an edit's builds begin at once instead of after seconds of imports.

A build that fails or is stopped costs nothing but its time: the check then builds the kernel itself, as without
this module. A failed check stops the builds of its code (the attendee edits again). It runs where the check's
kernels run on a GPU; ``COURSE_BUILD_AHEAD=off`` turns it off.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENV = "COURSE_BUILD_AHEAD"
WAIT_S = 180.0  # seconds a check waits at most for the builds of its code started beside an earlier check (then
# stops them and builds its own: a build that hangs never holds an attendee longer)
PREAMBLE = """
from utilities.machinery import buildcache

buildcache.install(quiet=True)  # the kernel built here is stored where the notebook's check will look it up
"""


def skipped(environ: Mapping[str, str] | None = None, modules: Mapping[str, Any] | None = None) -> str:
    """Why nothing is built ahead here ("" when it is): ``COURSE_BUILD_AHEAD=off``, or the check's kernels did not
    run on a GPU (``beside_checks.kernels_off_gpu``)."""
    from .beside_checks import kernels_off_gpu, switched_off

    environ = os.environ if environ is None else environ
    if switched_off(ENV, environ):
        return f"{ENV}={environ[ENV]}"
    return kernels_off_gpu(environ, modules)


@dataclass
class Build:
    """One block's build in a process of its own, its output in ``folder/log.txt`` (removed once it ended: the
    build's product is the build cache's entry, and a failed build is built again by the check, which shows why)."""

    process: Any
    folder: Path

    def remove_folder(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def stop(self) -> None:
        from .sanitizer import stop_process

        stop_process(self.process)


# What a spare imports before its script comes: what every build script imports first, and the slowest to import.
SPARE_IMPORTS = "import cupy, numba.cuda, nvmath.device; from utilities.machinery import buildcache"
# A spare's loop: one line on its standard input names the script to run (an empty line, or none: it exits).
SPARE_CODE = (
    SPARE_IMPORTS + "\nimport runpy, sys\npath = sys.stdin.readline().strip()\n"
    "if path:\n    sys.argv = [path]\n    runpy.run_path(path, run_name='__main__')\n"
)
SPARES = 2  # spare interpreters kept ready: the most other blocks a contract has


@dataclass
class Spare:
    """An interpreter that has done its imports and waits for a script (its output in ``folder/log.txt``)."""

    process: Any
    folder: Path

    def run(self, script: str) -> Build | None:
        """Hand it ``script``; None when it is gone (it died, or was stopped)."""
        path = self.folder / "built_ahead.py"
        path.write_text(script)
        try:
            if self.process.poll() is not None:
                return None
            self.process.stdin.write(f"{path}\n")
            self.process.stdin.close()
        except (OSError, ValueError, AttributeError):
            return None
        return Build(self.process, self.folder)

    def stop(self) -> None:
        from .sanitizer import stop_process

        stop_process(self.process)


class Builds:
    """The builds under way, by the attendee's code (the sources of the exercise's functions): an edit is new code."""

    def __init__(self, popen: Any = None, spares: int = SPARES) -> None:
        self.popen = popen or subprocess.Popen
        self.by_code: dict[str, list[Build]] = {}
        self.spares: list[Spare] = []
        self.want_spares = spares

    def warm(self) -> int:
        """Start spare interpreters until :attr:`want_spares` wait (gone ones replaced); returns those started."""
        self.spares = [spare for spare in self.spares if spare.process.poll() is None]
        started = 0
        while len(self.spares) < self.want_spares:
            spawned = self._spawn(["-c", SPARE_CODE], stdin=subprocess.PIPE, text=True)
            if spawned is None:
                return started
            self.spares.append(Spare(*spawned))
            started += 1
        return started

    def _spawn(self, args: list[str], script: str | None = None, **options: Any) -> tuple[Any, Path] | None:
        """An interpreter (``python *args``; with ``script``, written to ``folder/built_ahead.py``, that file's path
        last) in a session of its own, its output in a fresh ``folder/log.txt``: (process, folder), or None when it
        could not start."""
        from .sanitizer import script_environment

        folder = Path(tempfile.mkdtemp(prefix="course-build-ahead-"))
        if script is not None:
            path = folder / "built_ahead.py"
            path.write_text(script)
            args = [*args, str(path)]
        with (folder / "log.txt").open("w") as log:
            try:
                process = self.popen(
                    [sys.executable, *args], stdout=log, stderr=subprocess.STDOUT, env=script_environment(),
                    start_new_session=True, **options,
                )  # fmt: skip
            except OSError:
                return None
        return process, folder

    def _launch(self, script: str) -> Build | None:
        """``script`` in a spare when one waits, else in a fresh interpreter."""
        while self.spares:
            build = self.spares.pop(0).run(script)
            if build is not None:
                return build
        spawned = self._spawn([], script)
        if spawned is None:
            return None
        process, folder = spawned
        return Build(process, folder)

    def close(self) -> None:
        """Stop the spares and the builds still running (the notebook's kernel is shutting down), and remove their
        folders."""
        for spare in self.spares:
            spare.stop()
            shutil.rmtree(spare.folder, ignore_errors=True)
        self.spares = []
        for code in list(self.by_code):
            self.cancel(code)

    def start(self, code: str, scripts: Sequence[str]) -> int:
        """Start one process per script, once per ``code`` (a second call for the same code starts nothing);
        builds of any other code are stopped (an edit made them useless). Returns the processes started."""
        if code in self.by_code:
            return 0
        for other in [c for c in self.by_code if c != code]:
            self.cancel(other)
        started = [build for build in map(self._launch, dict.fromkeys(scripts)) if build is not None]
        self.by_code[code] = started
        return len(started)

    def wait(self, code: str, limit: float = WAIT_S) -> float:
        """Wait for the builds of ``code`` (at most ``limit`` seconds from now, then stop them); the seconds waited."""
        begun = time.monotonic()
        for build in self.by_code.get(code, []):
            try:
                build.process.wait(timeout=max(0.0, begun + limit - time.monotonic()))
            except subprocess.TimeoutExpired:
                build.stop()
            build.remove_folder()
        return time.monotonic() - begun

    def running(self, code: str) -> int:
        return sum(build.process.poll() is None for build in self.by_code.get(code, []))

    def cancel(self, code: str) -> None:
        """Stop the builds of ``code`` (its check failed: the attendee edits again)."""
        for build in self.by_code.pop(code, []):
            build.stop()
            build.remove_folder()


BUILDS = Builds()
atexit.register(BUILDS.close)  # the spares end with the notebook's kernel (they would at the end of their stdin too)


def scripts_for(functions: Sequence[Any], driver_texts: Sequence[str], own: str) -> tuple[str, list[str]]:
    """(the attendee's code, the scripts that build the other blocks): ``driver_texts`` are the driver's code for
    every block of the contract; the one equal to this check's own (``own``) is built by the check itself."""
    from .sanitizer import script

    code = script(functions, "")
    return code, [script(functions, text, PREAMBLE) for text in driver_texts if text != own]

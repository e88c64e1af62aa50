"""What a long build shows while it runs: the kernel, the seconds so far, and the stage it is in.

:func:`patch_compile` wraps numba-cuda's ``CUDADispatcher.compile`` so that every build longer than a few seconds
shows a :class:`BuildProgress` line (updated in place in a notebook) and links inside it.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from .. import cpu_build

BUILDS: list[tuple[str, float]] = []  # (kernel, seconds) of every build in this process, for utilities.workshop


class BuildProgress:
    """Shows what is being built once a build passes ``after`` seconds, then how long it took.

    In a notebook it updates one line in place; elsewhere it prints a line every ``every`` seconds.
    """

    def __init__(
        self,
        what: str,
        stage: Callable[[], str] = lambda: "",
        after: float = 3.0,
        every: float = 5.0,
        note: Callable[[], str] = lambda: "",
    ):
        self.what, self.stage, self.after, self.every, self.note = what, stage, after, every, note
        self._done = threading.Event()
        self._shown = False
        self._handle: Any = None
        self.start = 0.0

    def _line(self) -> str:
        stage = self.stage()
        return f"[build] {self.what}: {time.perf_counter() - self.start:.0f} s" + (f" ({stage})" if stage else "")

    def _show(self, text: str) -> None:
        if self._handle is None and _in_notebook():
            from IPython.display import display

            self._handle = display({"text/plain": text}, raw=True, display_id=True)
        elif self._handle is not None:
            self._handle.update({"text/plain": text}, raw=True)
        else:
            print(text, file=sys.stderr, flush=True)
        self._shown = True

    def _run(self) -> None:
        if self._done.wait(self.after):
            return
        while True:
            self._show(self._line())
            if self._done.wait(1.0 if self._handle is not None else self.every):
                return

    def __enter__(self) -> BuildProgress:
        self.start = time.perf_counter()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._done.set()
        self._thread.join()
        self.seconds = time.perf_counter() - self.start
        BUILDS.append((self.what, self.seconds))
        if self._shown:
            self._show(f"[build] {self.what}: built in {self.seconds:.1f} s" + self.note())


def _in_notebook() -> bool:
    shell = sys.modules.get("IPython") and getattr(sys.modules["IPython"], "get_ipython", lambda: None)()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def patch_compile(dispatcher_class: Any, lazy: Any, sigutils: Any, note: Callable[[], str] = lambda: "") -> None:
    """Show a :class:`BuildProgress` (with ``lazy.stage``) around every new compilation, and link inside it."""
    original = dispatcher_class.compile

    def compile(self: Any, sig: Any) -> Any:
        argtypes, _ = sigutils.normalize_signature(sig)
        if self.specialized or argtypes in self.overloads:  # already built in this process
            return original(self, sig)
        name = getattr(self.py_func, "__name__", "kernel")
        with BuildProgress(name, stage=lambda: lazy.stage, note=note):
            kernel = original(self, sig)
            lazy.stage = "linking"
            if cpu_build.linking():  # (a CPU build that only types kernels links nothing: cpu_build)
                kernel._codelibrary.get_cubin()  # link inside the progress display, not at the first launch
            return kernel

    dispatcher_class.compile = compile

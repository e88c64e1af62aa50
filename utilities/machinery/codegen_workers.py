"""Generate libmathdx LTO-IR in worker processes, so that a kernel's dozen device functions compile at once.

A cuBLASDx kernel asks libmathdx for its device functions one at a time, as numba lowers each call, and each
takes NVRTC seconds; nothing needs their LTO-IR until the final link. So the build cache
(:mod:`utilities.machinery.buildcache`) hands numba a placeholder at once and sends the work to a pool of
processes; the link waits for the real code. Each worker rebuilds the descriptors from their recorded recipes (a
:class:`Job`: every creating call and option in order, dependencies first) with its own libmathdx, generates
the code and returns it, after checking that libmathdx gave each function the symbol numba was given.

Workers: ``$COURSE_BUILD_JOBS`` processes (``0`` or ``1`` generates in the calling process, one at a time),
by default one per core, at most 16 and one per 3 GiB of memory. Processes that build side by side (the prebuild's
jobs) share the machine's cores through ``$COURSE_BUILD_SLOTS``, a folder of lock files, one per core: a worker
generates only while it holds one (:class:`Slots`), so each job may have several workers and a long job gets the
cores the finished ones left.
"""

from __future__ import annotations

import functools
import os
import pickle
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PENDING = b"TCFC-PENDING-LTOIR:"  # a placeholder's prefix; the rest is the cache key of the code it stands for
MAX_WORKERS = 16
WORKER_MEMORY = 3 * 2**30  # bytes a worker may need
SLOTS_ENV = "COURSE_BUILD_SLOTS"  # a folder of slot files shared by processes that build side by side (Slots)
SLOT_POLL_S = 0.1  # seconds between two tries for a free slot

# How each kind of descriptor is destroyed (by its creating call).
DESTROYERS = {
    "cublasdx_create_descriptor": "cublasdx_destroy_descriptor",
    "cublasdx_create_tensor": "cublasdx_destroy_tensor",
    "cublasdx_create_tensor_strided": "cublasdx_destroy_tensor",
    "cublasdx_make_tensor_like": "cublasdx_destroy_tensor",
    "cublasdx_create_device_pipeline": "cublasdx_destroy_pipeline",
    "cublasdx_create_tile_pipeline": "cublasdx_destroy_pipeline",
    "cublasdx_create_device_function": "cublasdx_destroy_device_function",
    "cublasdx_create_device_function_with_pipelines": "cublasdx_destroy_device_function",
    "commondx_create_code": "commondx_destroy_code",
}


@dataclass(frozen=True)
class Step:
    """One descriptor: its calls, the creating call first, then its options.

    Arguments that are descriptors read ``{"$": handle}`` or ``{"$s": [handles]}``, handles of the recording
    process, which the replay maps to its own.
    """

    handle: int
    calls: tuple[tuple[str, tuple[Any, ...]], ...]


@dataclass(frozen=True)
class Job:
    """What a worker needs to generate one code descriptor's LTO-IR."""

    steps: tuple[Step, ...]  # the descriptors the targets depend on, dependencies first
    code: Step  # the code descriptor (target SM, NVRTC options)
    generate: str  # cublasdx_finalize_device_functions or cublasdx_finalize_code
    targets: tuple[int, ...]
    isa_option: int
    symbols: tuple[bytes | None, ...] = ()  # the symbol each target was given in the recording process
    symbol_trait: int = 1  # CublasdxDeviceFunctionTrait.SYMBOL


@dataclass(frozen=True)
class Result:
    isa: int
    ltoir: bytes
    seconds: float


def is_placeholder(data: bytes | bytearray) -> bool:
    return bytes(data[: len(PENDING)]) == PENDING


def replay(job: Job, fn: Callable[[str], Callable[..., Any]]) -> Result:
    """Rebuild the job's descriptors through the binding functions ``fn(name)`` and generate its code.

    The descriptors are not finalized first: libmathdx 0.3.2 generates the same LTO-IR
    without (byte for byte, on a CPU machine, for an execute function on three tensors and for destroy functions
    on a device and a tile pipeline), and their finalizations cost more than the generation
    (``instructor-notes/machinery.md``).
    """
    made: dict[int, int] = {}
    created: list[tuple[str, int]] = []

    def value(arg: Any) -> Any:
        if isinstance(arg, dict) and "$" in arg:
            return made[arg["$"]]
        if isinstance(arg, dict) and "$s" in arg:
            return [made[h] for h in arg["$s"]]
        return list(arg) if isinstance(arg, tuple | list) else arg

    def build(step: Step) -> int:
        (create, args), *options = step.calls
        handle = int(fn(create)(*(value(a) for a in args)))
        made[step.handle] = handle
        created.append((create, handle))
        for name, rest in options:
            fn(name)(handle, *(value(a) for a in rest))
        return handle

    try:
        for step in job.steps:
            build(step)
        code = build(job.code)
        targets = [made[t] for t in job.targets]
        for target, want in zip(targets, job.symbols, strict=False):
            if want is not None and _symbol(fn, target, job.symbol_trait) != want:
                raise RuntimeError("libmathdx named a replayed device function differently; generating in place")
        start = time.perf_counter()
        if job.generate == "cublasdx_finalize_code":
            fn(job.generate)(code, targets[0])
        else:
            fn(job.generate)(code, len(targets), targets)
        seconds = time.perf_counter() - start
        size = int(fn("commondx_get_code_ltoir_size")(code))
        ltoir = bytearray(size)
        fn("commondx_get_code_ltoir")(code, size, ltoir)
        isa = int(fn("commondx_get_code_option_int64")(code, job.isa_option))
        return Result(isa, bytes(ltoir), seconds)
    finally:
        for create, handle in reversed(created):
            try:
                fn(DESTROYERS[create])(handle)
            except Exception:  # a worker that cannot free a descriptor leaks it; the result stands
                pass


def _symbol(fn: Callable[[str], Callable[..., Any]], handle: int, trait: int) -> bytes:
    size = int(fn("cublasdx_get_device_function_trait_str_size")(handle, trait))
    buf = bytearray(size)
    fn("cublasdx_get_device_function_trait_str")(handle, trait, size, buf)
    return bytes(buf)


def _in_worker(job: Job) -> Result:
    """A worker process's work: the real binding, unwrapped (workers never install the build cache)."""
    from nvmath.bindings import mathdx

    return replay(job, lambda name: getattr(mathdx, name))


def _in_subprocess(job: Job) -> Result:
    """Run one job in a fresh ``python -m utilities.machinery.codegen_workers``: the job in on stdin, the result
    out on stdout.

    A plain subprocess, not multiprocessing: a spawned multiprocessing worker imports the caller's main script
    again, and a script without an ``if __name__ == "__main__"`` guard would then build its kernels in every worker.
    """
    root = str(Path(__file__).resolve().parents[2])  # the checkout that holds ``utilities``
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, "-m", "utilities.machinery.codegen_workers"]
    proc = subprocess.run(cmd, input=pickle.dumps(job), capture_output=True, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"code generation worker exited with {proc.returncode}: {proc.stderr.decode()[-2000:]}")
    return pickle.loads(proc.stdout)


def usable_cores() -> int:
    """The cores this process may run on (its affinity, which a container may narrow), else the machine's."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def machine_slots() -> int:
    """Workers the machine holds at once: one per usable core and per 3 GiB of memory."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return usable_cores()
    return max(1, min(usable_cores(), memory // WORKER_MEMORY))


def workers_from_env() -> int:
    """``$COURSE_BUILD_JOBS``, else one worker per core, at most 16 and one per 3 GiB of memory.

    (A process generating cuBLASDx code peaked at 2.8 GB resident on a CPU machine.)
    """
    text = os.environ.get("COURSE_BUILD_JOBS", "").strip()
    if text:
        try:
            return max(0, int(text))
        except ValueError:
            raise ValueError(f"COURSE_BUILD_JOBS must be a whole number of processes, got {text!r}") from None
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        memory = MAX_WORKERS * WORKER_MEMORY
    return max(1, min(os.cpu_count() or 1, MAX_WORKERS, memory // WORKER_MEMORY))


class Slots:
    """The cores that processes building side by side share: ``count`` files in ``folder``, each held by at most one
    worker at a time (an exclusive ``flock``, which the system drops when its holder dies)."""

    def __init__(self, folder: Path | str, count: int | None = None):
        self.folder = Path(folder)
        if count is not None:
            self.folder.mkdir(parents=True, exist_ok=True)
            for index in range(count):
                (self.folder / f"slot-{index}").touch()
        self.files = sorted(self.folder.glob("slot-*"))
        if not self.files:
            raise ValueError(f"{SLOTS_ENV}={self.folder}: no slot files in it (the prebuild makes them)")
        self._turn = threading.Lock()  # one thread of a process looks for a slot; the others wait here, idle

    @classmethod
    def from_env(cls) -> Slots | None:
        """The slots ``$COURSE_BUILD_SLOTS`` names, or None (each process then has its own workers' worth)."""
        folder = os.environ.get(SLOTS_ENV, "").strip()
        return cls(folder) if folder else None

    def hold(self, run: Callable[[Job], Result], job: Job, stop: threading.Event | None = None) -> Result:
        """``run(job)`` while holding a free slot, waiting for one first (RuntimeError once ``stop`` is set)."""
        with self._turn:
            handle = self._take(stop)
        try:
            return run(job)
        finally:
            handle.close()  # the slot is free again

    def _take(self, stop: threading.Event | None) -> Any:
        import fcntl

        while stop is None or not stop.is_set():
            for path in random.sample(self.files, len(self.files)):  # no slot is everyone's first try
                handle = open(path, "rb")  # noqa: SIM115  (held open while the slot is in use)
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return handle
                except BlockingIOError:
                    handle.close()
            time.sleep(SLOT_POLL_S)
        raise RuntimeError("the code generation pool was shut down while this job waited for a slot")


class Pool:
    """Up to ``workers`` jobs at a time, each in a worker process of its own (threads here wait for them); with
    ``slots`` (default: :meth:`Slots.from_env`), each also waits for a slot of the machine's."""

    def __init__(
        self,
        workers: int,
        run: Callable[[Job], Result] = _in_subprocess,
        executor: Any = None,
        slots: Slots | None = None,
    ):
        self.workers = workers
        slots = slots if slots is not None else Slots.from_env()
        self._stop = threading.Event()  # set by shutdown: a job still waiting for a slot gives up
        self._run = run if slots is None else functools.partial(slots.hold, run, stop=self._stop)
        self._executor = executor

    def submit(self, job: Job) -> Future[Result] | None:
        """The job's future, or None when no new work can start (the interpreter is exiting)."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="libmathdx")
        try:
            return self._executor.submit(self._run, job)
        except RuntimeError:  # "cannot schedule new futures after (interpreter) shutdown": nvmath frees pipelines
            return None  # at exit, and freeing one can need code that was never generated

    def shutdown(self) -> None:
        self._stop.set()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None


if __name__ == "__main__":  # a worker: one pickled Job on stdin, its pickled Result on stdout
    # the importable module, not __main__: the pickle must name classes a worker can import
    from . import codegen_workers as worker

    sys.stdout.buffer.write(pickle.dumps(worker._in_worker(pickle.load(sys.stdin.buffer))))

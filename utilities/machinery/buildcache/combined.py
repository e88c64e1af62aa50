"""A kernel's libmathdx functions linked as one module: nvJitLink's time per module, paid once instead of per function.

nvmath asks libmathdx for each device function of a kernel on its own (execute, copy, the accumulator's calls, the
pipeline's...), and each answer is a module of its own, with every cuBLASDx header instantiated in it. nvJitLink
spends about a second on each such module whatever the kernel uses of it (``instructor-notes/machinery.md``), so a
kernel of eight functions took eight seconds to link on a 2-core CPU, and more than twenty on a busy GPU host: most of
the wait for a check after an edit. One libmathdx code may hold many functions
(``cublasdx_finalize_device_functions`` takes a list): generated once per set of functions and stored, it links in a
third of the time, and the kernel's machine code is byte for byte the one linked from the separate modules.

:class:`Combiner` keeps, for the functions that share a code descriptor's options, one code of all of them in the
build cache (keyed by the sorted keys of the separate codes). A link uses it when the cache holds it (:func:`swap`),
else links the separate modules as before and has the pool generate it for the next link; a prebuild job that keeps
code (``LazyMathdx.keep_code``) waits for it, so that an attendee's first edit finds it. ``COURSE_COMBINED_LINK=off``
links the separate modules always, ``on`` uses combined codes in a CPU build too (``tools/combined_link.py`` compares
the two there).
"""

from __future__ import annotations

import copy
import itertools
import os
from collections.abc import Collection, Iterable, Sequence
from concurrent.futures import Future
from typing import Any

from ..codegen_workers import Job, Result, Step, replay
from .store import make_key

ENV = "COURSE_COMBINED_LINK"
DEVICE_FUNCTIONS = "cublasdx_finalize_device_functions"
HANDLES = 1 << 40  # renumbered handles start here: no recorded handle is that large


def enabled(cpu_build: bool, environ: Any = None) -> bool:
    """Whether links use combined codes: ``$COURSE_COMBINED_LINK`` says (``on``, ``off``); by default yes, but not
    in a CPU build (its bundle carries no LTO-IR, so its combined codes would never be linked)."""
    said = (environ if environ is not None else os.environ).get(ENV, "").strip().lower()
    if said in ("off", "0", "no"):
        return False
    return said in ("on", "1", "yes") or not cpu_build


def merge(jobs: Sequence[Job]) -> Job:
    """One job that generates every target of ``jobs`` (device functions of one code descriptor's options) in one
    code. Each job's descriptors are renumbered apart: a handle number may have been reused by libmathdx between two
    recordings, and an identical descriptor made twice costs nothing next to the generation."""
    if not jobs or any(j.generate != DEVICE_FUNCTIONS for j in jobs):
        raise ValueError("only device functions merge into one code")
    if len({repr(j.code.calls) for j in jobs}) != 1:
        raise ValueError("device functions of different code options cannot share one code")
    fresh = itertools.count(HANDLES)
    steps: list[Step] = []
    targets: list[int] = []
    symbols: list[bytes | None] = []
    for job in jobs:
        number: dict[int, int] = {}

        def renumbered(arg: Any, number: dict[int, int] = number) -> Any:
            if isinstance(arg, dict) and "$" in arg:
                return {"$": number[arg["$"]]}
            if isinstance(arg, dict) and "$s" in arg:
                return {"$s": [number[h] for h in arg["$s"]]}
            return arg

        for step in job.steps:
            number[step.handle] = next(fresh)
            calls = tuple((name, tuple(renumbered(a) for a in args)) for name, args in step.calls)
            steps.append(Step(number[step.handle], calls))
        targets.extend(number[t] for t in job.targets)
        symbols.extend(job.symbols or (None,) * len(job.targets))
    first = jobs[0]
    code = Step(next(fresh), first.code.calls)
    symbol_trait = first.symbol_trait
    return Job(tuple(steps), code, DEVICE_FUNCTIONS, tuple(targets), first.isa_option, tuple(symbols), symbol_trait)


def groups(keys: Iterable[str], jobs: dict[str, Job]) -> list[tuple[str, ...]]:
    """``keys`` (separate codes of one kernel) that one code can hold together: device functions whose code
    descriptors were made alike, two or more, each group sorted."""
    by_code: dict[str, set[str]] = {}
    for key in keys:
        job = jobs.get(key)
        if job is not None and job.generate == DEVICE_FUNCTIONS:
            by_code.setdefault(repr((job.code.calls, job.isa_option, job.symbol_trait)), set()).add(key)
    return [tuple(sorted(found)) for found in by_code.values() if len(found) > 1]


def group_key(group: Sequence[str], environment: dict[str, str]) -> str:
    return make_key("ltoir-combined", sorted(group), environment)


class Combiner:
    """One process's combined codes: served from the cache, or generated in the background (``lazy.pool``) for the
    next link. ``lazy`` is the process's ``LazyMathdx`` (its cache, pool, environment and recorded jobs)."""

    def __init__(self, lazy: Any) -> None:
        self.lazy = lazy
        self.futures: dict[str, Future[Result]] = {}
        self.failed: set[str] = set()  # generations that failed here: not tried again by this process

    def codes(self, keys: Sequence[str], start: bool = True) -> dict[tuple[str, ...], bytes]:
        """The combined code of each group of ``keys`` that the cache holds; with ``start``, each other group is
        started (the pool, or here in a job that keeps code) unless another process is generating it."""
        lazy, found = self.lazy, {}
        for group in groups(keys, lazy.jobs):
            key = group_key(group, lazy.environment)
            blob = lazy.cache.get(key, count=False)
            if blob is not None:
                found[group] = blob[8:]
            elif start and key not in self.futures and key not in self.failed and lazy.cache.claim(key):
                self._start(key, merge([lazy.jobs[k] for k in group]))
        return found

    def _start(self, key: str, job: Job) -> None:
        lazy = self.lazy
        lazy.claims.add(key)
        future = lazy.pool.submit(job) if lazy.pool is not None else None
        if future is None:
            if not lazy.keep_code:  # nothing to wait for it: leave it to a process with a pool
                lazy._release(key)
                return
            future = Future()
            try:
                future.set_result(replay(job, lambda fn: lazy.real[fn]))
            except Exception as error:
                future.set_exception(error)
        stored: Future[Result] = Future()  # done once the code is in the cache (or failed), not when generated
        self.futures[key] = stored
        future.add_done_callback(lambda done: self._stored(key, done, stored))

    def _stored(self, key: str, done: Future[Result], stored: Future[Result]) -> None:
        lazy, error = self.lazy, None
        try:
            error = done.exception()
            if error is None:
                result = done.result()
                lazy.cache.put(key, result.isa.to_bytes(8, "little", signed=True) + result.ltoir)
        except Exception as exc:
            error = exc
        if error is not None:
            self.failed.add(key)  # before the claim goes: no other link of this process starts it again
        lazy._release(key)
        if error is None:
            stored.set_result(result)
        else:
            stored.set_exception(error)

    def keep(self) -> None:
        """Wait for the codes being generated to be stored (a failed one is left to a later link: the separate
        modules serve)."""
        for future in list(self.futures.values()):
            try:
                future.result()
            except Exception:
                pass


def _keyed(files: Sequence[Any], lazy: Any) -> dict[int, str]:
    """Positions in ``files`` of libmathdx code this process recorded how to generate, and its cache key. A module
    with a setup or teardown callback (or NRT) stays apart: merged, its callback would be lost."""
    out = {}
    for i, item in enumerate(files):
        data = getattr(item, "_data", None)
        if not isinstance(data, bytes | bytearray):
            continue
        if getattr(item, "setup_callback", None) or getattr(item, "teardown_callback", None) or getattr(item, "nrt", 0):
            continue
        key = lazy.key_of(bytes(data))
        if key is not None and key in lazy.jobs:
            out[i] = key
    return out


def swap(files: Collection[Any], lazy: Any, combiner: Combiner, start: bool) -> Collection[Any] | None:
    """``files`` (a kernel's linked modules) with each group of libmathdx functions whose combined code the cache
    holds replaced by one module of it; None when there is none. With ``start`` (a kernel an attendee may edit
    again), the missing ones are started for the next link. A set (numba's) gives a set, a list a list."""
    items = list(files)
    keyed = _keyed(items, lazy)
    codes = combiner.codes(list(keyed.values()), start)
    if not codes:
        return None
    merged = {k for group in codes for k in group}
    out = [item for i, item in enumerate(items) if keyed.get(i) not in merged]
    for group, ltoir in codes.items():
        first = next(i for i, k in keyed.items() if k == group[0])
        item = copy.copy(items[first])  # numba's LTOIR, as the module it stands in for
        item._data = ltoir
        if hasattr(item, "_name"):
            item._name = f"<libmathdx: {len(group)} functions>"
        out.append(item)
    return set(out) if isinstance(files, set | frozenset) else out


def want(files: Collection[Any], lazy: Any, combiner: Combiner) -> None:
    """Start the combined codes of ``files`` that the cache lacks (a job that keeps code, whose kernel was served)."""
    combiner.codes(list(_keyed(list(files), lazy).values()))

"""The libmathdx interposer: nvmath's calls into libmathdx recorded as recipes, finalizations deferred, and
generated code and trait values served from the store.

:class:`LazyMathdx` sits between nvmath and its libmathdx binding. It records how every descriptor was built (its
*recipe*: the creating call and every option set on it, with the recipes of the descriptors it refers to),
defers the expensive finalizations, and serves LTO-IR and trait values keyed by the recipe plus the versions of
everything that generates code. Only on a miss does it finalize for real (dependencies first) and store the
result. Code that misses is generated in worker processes (``utilities.machinery.codegen_workers``) while numba
goes on lowering the kernel: numba gets a placeholder, which :meth:`LazyMathdx.resolve` turns into the real
LTO-IR at link time.

A linked kernel's key names each piece of libmathdx code by its recipe's key (:meth:`LazyMathdx.digest`), not by
its bytes: libmathdx's LTO-IR differs byte for byte each time it is generated (NVVM's container is written anew:
the same recipe, generated twice on one CPU, gave two blobs of one size that differ in nearly every byte). Keyed by
the bytes, a kernel built after code it shares was generated again (an attendee's kernel, linked from a launch-only
bundle, regenerates the pieces it shares with the course's) got a new key and was linked again.

A cache imported from a launch-only bundle holds the LTO-IR's digests but not the LTO-IR: numba gets a placeholder
too, the linked kernel's key names the recipe, and the code is generated only if that kernel was not linked before
(:meth:`LazyMathdx.resolve`).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from .. import codegen_workers
from ..codegen_workers import PENDING, Job, Pool, Result, Step, is_placeholder
from .combined import DEVICE_FUNCTIONS, Combiner
from .store import CodeDigest, DiskCache, digest_key, make_key

# Calls that create a descriptor: name -> (argument positions holding one handle, positions holding handle lists).
_CREATORS: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "cublasdx_create_descriptor": ((), ()),
    "cublasdx_create_tensor": ((0,), ()),
    "cublasdx_create_tensor_strided": ((), ()),
    "cublasdx_make_tensor_like": ((0,), ()),
    "cublasdx_create_device_pipeline": ((0, 4, 5), ()),
    "cublasdx_create_tile_pipeline": ((0, 2), ()),
    "cublasdx_create_device_function": ((0,), (3,)),
    "cublasdx_create_device_function_with_pipelines": ((0,), (3, 5)),
    "commondx_create_code": ((), ()),
}
# Calls that change a descriptor: appended to its recipe (first argument is the handle).
_SETTERS = (
    "cublasdx_set_operator_int64",
    "cublasdx_set_operator_int64s",
    "cublasdx_set_option_str",
    "cublasdx_set_tensor_option_int64",
    "commondx_set_code_option_int64",
    "commondx_set_code_option_int64s",
    "commondx_set_code_option_str",
)
# Finalizations that are deferred until something needs them: name -> count/list argument positions.
_DEFERRED = {"cublasdx_finalize_tensors": (0, 1), "cublasdx_finalize_pipelines": (0, 1)}
# Trait queries served from the cache: name -> how results come back.
#   "ret": returned value; "ptr": (handle, trait, count, address) fills int64s; "buf": (handle, trait, size, buffer).
_TRAITS = {
    "cublasdx_get_trait_int64": "ret",
    "cublasdx_get_trait_str_size": "ret",
    "cublasdx_get_tensor_trait_int64": "ret",
    "cublasdx_get_tensor_trait_str_size": "ret",
    "cublasdx_get_pipeline_trait_int64": "ret",
    "cublasdx_get_pipeline_trait_str_size": "ret",
    "cublasdx_get_device_function_trait_str_size": "ret",
    "cublasdx_get_trait_int64s": "ptr",
    "cublasdx_get_pipeline_trait_int64s": "ptr",
    "cublasdx_get_trait_str": "buf",
    "cublasdx_get_tensor_trait_str": "buf",
    "cublasdx_get_pipeline_trait_str": "buf",
    "cublasdx_get_device_function_trait_str": "buf",
}
_CODE_GEN = ("cublasdx_finalize_device_functions", "cublasdx_finalize_code")
_CODE_READ = ("commondx_get_code_ltoir_size", "commondx_get_code_ltoir", "commondx_get_code_option_int64")
_DESTROY = (
    "cublasdx_destroy_descriptor",
    "cublasdx_destroy_tensor",
    "cublasdx_destroy_pipeline",
    "cublasdx_destroy_device_function",
    "commondx_destroy_code",
)
_PREFIXES = ("cublasdx_", "commondx_")
_POLL_S = 0.25  # how often a process waiting for another's code looks for it


def _plain(value: Any) -> Any:
    """A JSON-able, canonical form of a non-handle argument (enums become ints, sequences tuples)."""
    if isinstance(value, bool | int | float | str) or value is None:
        return int(value) if isinstance(value, int) else value
    if isinstance(value, bytes | bytearray):
        return value.decode(errors="replace")
    if hasattr(value, "tolist"):
        return _plain(value.tolist())
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    raise TypeError(f"build cache: cannot key an argument of type {type(value).__name__}")


def recipe_digest(key: str) -> str:
    """A piece of libmathdx code in a linked kernel's key: the cache key of its recipe (which holds the versions of
    everything that generates code), marked as such."""
    return "recipe:" + key


@dataclass
class _Code:
    """What a served code descriptor would have returned: its LTO-IR and ISA version."""

    ltoir: bytes
    isa: int
    regenerate: Callable[[], None] = field(repr=False)


class LazyMathdx:
    """Wraps the functions of a libmathdx binding module in place (see the module docstring).

    ``module`` is ``nvmath.bindings.mathdx`` in the course, or a fake in the tests. With a ``pool``, code that
    the cache does not hold is generated in its worker processes while numba goes on: numba is handed a
    placeholder, which :meth:`resolve` turns into the real LTO-IR at link time (see ``codegen_workers``).
    """

    def __init__(
        self,
        module: Any,
        cache: DiskCache,
        environment: dict[str, str],
        isa_option: int,
        pool: Pool | None = None,
        symbol_trait: int = 1,
        uid_trait: int | None = None,
    ):
        self.m = module
        self.cache = cache
        self.environment = dict(environment)
        self.isa_option = int(isa_option)
        self.pool = pool
        self.symbol_trait = int(symbol_trait)
        self.uid_trait = None if uid_trait is None else int(uid_trait)
        self.calls: dict[int, list[tuple[str, tuple[Any, ...]]]] = {}  # how to build each descriptor again
        self.symbols: dict[int, bytes] = {}
        self.futures: dict[str, Any] = {}  # cache key -> Future[Result] of code being generated by the pool
        self.fallbacks: dict[str, Callable[[], Result]] = {}
        self.claims: set[str] = set()  # keys of code this process claimed (store.DiskCache.claim) and owes
        self.absent: dict[str, Job] = {}  # cache key -> how to generate code whose digest alone the cache holds
        self.jobs: dict[str, Job] = {}  # cache key -> how to generate a device function's code (``combined``)
        self.recipes: dict[int, list[Any]] = {}
        self.deps: dict[int, list[int]] = {}
        self.kinds: dict[int, str] = {}
        self.pending: dict[int, str] = {}
        self.served: dict[int, _Code] = {}
        self.recipe_of: dict[str, str] = {}  # SHA-256 of LTO-IR this process was handed -> its recipe's cache key
        self.real: dict[str, Callable[..., Any]] = {}
        self.stage = ""
        # False: code that the cache does not hold is never generated; numba is handed a placeholder that nothing
        # resolves (a CPU build that only types kernels to compare their keys: ``utilities.machinery.cpu_build``)
        self.generate_code = True
        # True: code that a launch-only cache holds the digest of is generated and stored now, not left for a link
        # that may never come (a prebuild job of a check's twin: an attendee's edit then only links; :meth:`keep`)
        self.keep_code = False
        # seconds this process spent blocked in each kind of build work (the build report's breakdown)
        self.seconds: Counter[str] = Counter()
        self._lock = threading.RLock()
        self.combiner = Combiner(self)  # a kernel's device functions in one code (``combined``)

    @contextlib.contextmanager
    def timed(self, activity: str) -> Iterator[None]:
        """Add the block's wall time to ``seconds[activity]``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[activity] += time.perf_counter() - start

    # -- installation ------------------------------------------------------------------------------------------
    def install(self) -> None:
        for name in dir(self.m):
            if name.startswith(_PREFIXES) and callable(getattr(self.m, name)) and name not in self.real:
                self.real[name] = getattr(self.m, name)
                setattr(self.m, name, self._wrapper(name))

    def uninstall(self) -> None:
        for name, fn in self.real.items():
            setattr(self.m, name, fn)
        self.real.clear()

    def _wrapper(self, name: str) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            with self._lock:
                return self._dispatch(name, args)

        call.__name__ = name
        return call

    # -- recipes -----------------------------------------------------------------------------------------------
    def recipe(self, handle: int) -> list[Any]:
        try:
            return self.recipes[int(handle)]
        except KeyError:
            raise KeyError(f"build cache: descriptor {handle} was not created through the cache") from None

    def _snapshot(self, handle: int) -> Any:
        return json.loads(json.dumps(self.recipe(handle), default=str))

    def _dispatch(self, name: str, args: tuple[Any, ...]) -> Any:
        real = self.real[name]
        if name in _CREATORS:
            one, many = _CREATORS[name]
            handle = int(real(*args))
            recipe: list[Any] = [name]
            deps: list[int] = []
            refs_known = all(
                int(h) in self.recipes
                for i, arg in enumerate(args)
                for h in ([arg] if i in one else list(arg)[: int(args[i - 1])] if i in many else [])
            )
            if not refs_known:  # built from a descriptor made before install(): not keyable, never cached
                self.recipes.pop(handle, None)
                return handle
            template: list[Any] = []
            for i, arg in enumerate(args):
                if i in one:
                    recipe.append({"ref": self._snapshot(arg)})
                    deps.append(int(arg))
                    template.append({"$": int(arg)})
                elif i in many:
                    count = int(args[i - 1])
                    refs = [int(h) for h in list(arg)[:count]]
                    recipe.append({"refs": [self._snapshot(h) for h in refs]})
                    deps.extend(refs)
                    template.append({"$s": refs})
                else:
                    recipe.append(_plain(arg))
                    template.append(_plain(arg))
            self.recipes[handle], self.deps[handle], self.kinds[handle] = recipe, deps, name
            self.calls[handle] = [(name, tuple(template))]
            return handle
        if name in _SETTERS:
            handle, rest = int(args[0]), list(args[1:])
            if name.endswith("int64s"):  # (handle, option, count, values)
                rest = [rest[0], list(rest[2])[: int(rest[1])]]
            real(*args)
            if handle in self.recipes:
                self.recipes[handle].append([name, *(_plain(v) for v in rest)])
                self.calls[handle].append((name, tuple(_plain(v) for v in args[1:])))
            return None
        if name in _DEFERRED:
            count_at, list_at = _DEFERRED[name]
            handles = [int(h) for h in list(args[list_at])[: int(args[count_at])]]
            unknown = [h for h in handles if h not in self.recipes]
            if unknown:  # not keyable, so never served from the cache: finalize for real now
                real(len(unknown), unknown)
            for handle in handles:
                if handle in self.recipes:
                    self.pending[handle] = name
            return None
        if name in _TRAITS:
            return self._trait(name, args)
        if name in _CODE_GEN:
            return self._generate(name, args)
        if name in _CODE_READ and int(args[0]) in self.served:
            return self._read_served(name, args)
        if name in _DESTROY:
            handle = int(args[0])
            if handle in self.served:
                self.served.pop(handle)
            for table in (self.recipes, self.deps, self.kinds, self.calls, self.symbols):
                table.pop(handle, None)
            self.pending.pop(handle, None)
            return real(*args)
        # Anything else works on real descriptors: finalize whatever it refers to first.
        for arg in args:
            if isinstance(arg, int) and arg in self.recipes:
                self.realize(arg)
        return real(*args)

    # -- deferred finalization ---------------------------------------------------------------------------------
    def realize(self, handle: int) -> None:
        """Finalize ``handle`` and everything it refers to, dependencies first, if still pending."""
        handle = int(handle)
        for dep in self.deps.get(handle, ()):
            self.realize(dep)
        if handle in self.served:
            self.served.pop(handle).regenerate()
        if handle in self.pending:
            finalize = self.pending.pop(handle)
            self.stage = f"finalizing {finalize.removeprefix('cublasdx_finalize_')} (libmathdx)"
            with self.timed("finalizing descriptors here"):
                self.real[finalize](1, [handle])

    # -- traits ------------------------------------------------------------------------------------------------
    def _trait(self, name: str, args: tuple[Any, ...]) -> Any:
        style = _TRAITS[name]
        handle, trait = int(args[0]), int(args[1])
        if handle not in self.recipes:
            self.realize(handle)
            return self.real[name](*args)
        if name == "cublasdx_get_tensor_trait_int64" and trait == self.uid_trait:
            return self.tensor_uid(handle)
        size = int(args[2]) if style != "ret" else 0
        key = make_key("trait", [name, self._snapshot(handle), trait, size], self.environment)
        symbol = name.startswith("cublasdx_get_device_function_trait_str") and trait == self.symbol_trait
        blob = self.cache.get(key)
        if blob is None:
            # A device function's symbol needs no finalized tensors (libmathdx 0.3.2: the same name before and
            # after; the workers check it again), and the workers generate code without them.
            if not symbol:
                self.realize(handle)
            with self.timed("trait queries here"):
                value = self._trait_real(name, style, args)
            self.cache.put(key, json.dumps(value).encode())
        else:
            value = json.loads(blob)
        if style == "ptr":
            (ctypes.c_int64 * size).from_address(int(args[3]))[:] = value
            return None
        if style == "buf":
            args[3][:size] = bytes(value)
            if symbol:
                self.symbols[handle] = bytes(value)
            return None
        return value

    def tensor_uid(self, handle: int) -> int:
        """A recorded tensor's UID, made from its recipe: the same in every process for the same tensor, and apart for
        tensors made otherwise.

        libmathdx numbers its tensors from a counter per process, nvmath writes that number into the tensor's numba
        type (``BlasLayout(uid=<n>, ...)``), so a kernel's IR, and its key, would depend on how many tensors the
        process had made; and a value kept in the cache per recipe would depend on which process stored it last
        (parallel prebuild jobs share tensors). Nothing reads the UID but nvmath's type names, which need it only to
        tell tensors apart.
        """
        digest = make_key("tensor-uid", self._snapshot(handle), {})
        return int(digest[:12], 16)  # 48 bits: apart from libmathdx's own small numbers

    def _trait_real(self, name: str, style: str, args: tuple[Any, ...]) -> Any:
        real = self.real[name]
        if style == "ret":
            return int(real(*args))
        if style == "ptr":
            real(*args)
            return list((ctypes.c_int64 * int(args[2])).from_address(int(args[3])))
        real(*args)
        return list(bytes(args[3][: int(args[2])]))

    # -- code generation ---------------------------------------------------------------------------------------
    def _generate(self, name: str, args: tuple[Any, ...]) -> None:
        code = int(args[0])
        if name == "cublasdx_finalize_device_functions":
            targets = [int(h) for h in list(args[2])[: int(args[1])]]
        else:
            targets = [int(args[1])]
        if code not in self.recipes or any(h not in self.recipes for h in targets):
            for h in targets:
                self.realize(h)
            return self.real[name](*args)
        key = make_key("ltoir", [name, self._snapshot(code), [self._snapshot(h) for h in targets]], self.environment)
        fallback = (name, args, code, targets)
        if name == DEVICE_FUNCTIONS and key not in self.jobs:  # to merge with its kernel's other functions
            recorded = self._job(name, code, targets)
            if recorded is not None:
                self.jobs[key] = recorded

        def regenerate() -> None:  # a served descriptor asked for something the cache does not hold
            for h in targets:
                self.realize(h)
            self.real[name](*args)

        if not self.generate_code:  # typing only: the recipe's key stands for the code, generated or not
            isa = self.cache.get(make_key("isa", self._snapshot(code), self.environment), count=False)
            self.served[code] = _Code(PENDING + key.encode(), int(isa or 0), regenerate)
            return None
        blob = self.cache.get(key, count=False)
        if blob is not None:
            self.cache.stats.hits += 1
            isa, ltoir = int.from_bytes(blob[:8], "little", signed=True), blob[8:]
            self.remember(key, ltoir)
            self.served[code] = _Code(ltoir, isa, regenerate)
            return None
        known = CodeDigest.unpack(self.cache.get(digest_key(key), count=False))
        job = self._recorded(key, name, code, targets) if known is not None else None
        if known is not None and job is not None and not self.keep_code:  # launch-only: the code if a link needs it
            self.cache.stats.hits += 1
            self.absent[key] = job
            self.served[code] = _Code(PENDING + key.encode(), known.isa, regenerate)
            return None
        self.cache.stats.misses += 1
        self.stage = f"generating {self._label(targets)} (libmathdx, NVRTC)"
        isa_key = make_key("isa", self._snapshot(code), self.environment)
        isa = self.cache.get(isa_key, count=False)
        if isa is not None:
            if key in self.futures:  # this process is generating it already (another descriptor, the same recipe)
                self.served[code] = _Code(PENDING + key.encode(), int(isa), regenerate)
                return None
            if not self.cache.claim(key):  # another process is generating it: wait for it, not generate it twice
                job = self._recorded(key, name, code, targets)  # (now: the descriptors may be gone later)
                self._await_other(key, lambda: self._fallback(job, *fallback))
                self.served[code] = _Code(PENDING + key.encode(), int(isa), regenerate)
                return None
            self.claims.add(key)
        job = self._recorded(key, name, code, targets) if self.pool is not None and isa is not None else None
        future = self.pool.submit(job) if job is not None else None
        if future is None:  # no pool, the first code for this target (which tells its ISA version), or at exit
            try:
                result = self._generate_here(name, args, code, targets)
            except BaseException:
                self._release(key)
                raise
            self._store(key, result)
            self.cache.put(isa_key, str(result.isa).encode())
            return None
        self.futures[key] = future
        self.fallbacks[key] = lambda: self._fallback(job, name, args, code, targets)
        future.add_done_callback(lambda done: done.exception() or self._store(key, done.result()))
        self.served[code] = _Code(PENDING + key.encode(), int(isa), regenerate)
        return None

    def _release(self, key: str) -> None:
        if key in self.claims:
            self.claims.discard(key)
            self.cache.release(key)

    def _await_other(self, key: str, fallback: Callable[[], Result]) -> None:
        """The code of ``key``, which another process claimed, as a future: its entry once stored, or generated here
        (``fallback``) if that process lets go of its claim without storing it."""

        def wait() -> Result:
            with self.timed("waiting for another process's code"):
                while True:
                    blob = self.cache.get(key, count=False)
                    if blob is not None:
                        return Result(int.from_bytes(blob[:8], "little", signed=True), blob[8:], 0.0)
                    if not self.cache.claimed(key):
                        blob = self.cache.get(key, count=False)
                        if blob is not None:
                            return Result(int.from_bytes(blob[:8], "little", signed=True), blob[8:], 0.0)
                        raise RuntimeError("the process that claimed it stopped without it")
                    time.sleep(_POLL_S)

        future: Future[Result] = Future()

        def run() -> None:
            try:
                future.set_result(wait())
            except Exception as exc:
                future.set_exception(exc)

        threading.Thread(target=run, name="libmathdx-wait", daemon=True).start()
        self.futures[key] = future
        self.fallbacks[key] = fallback
        self.cache.stats.shared += 1

    def _generate_here(self, name: str, args: tuple[Any, ...], code: int, targets: list[int]) -> Result:
        for h in targets:
            self.realize(h)
        start = time.perf_counter()
        with self.timed("generating code here"):
            self.real[name](*args)
        seconds = time.perf_counter() - start
        size = int(self.real["commondx_get_code_ltoir_size"](code))
        ltoir = bytearray(size)
        self.real["commondx_get_code_ltoir"](code, size, ltoir)
        isa = int(self.real["commondx_get_code_option_int64"](code, self.isa_option))
        return Result(isa, bytes(ltoir), seconds)

    def _fallback(self, job: Job, name: str, args: tuple[Any, ...], code: int, targets: list[int]) -> Result:
        """A pool job's code generated here: replayed on fresh descriptors, else on the recorded ones if alive."""
        try:
            return codegen_workers.replay(job, lambda fn: self.real[fn])
        except Exception:
            if code not in self.recipes or any(h not in self.recipes for h in targets):
                raise RuntimeError(
                    "build cache: libmathdx could not generate a device function from its recipe; "
                    "set COURSE_BUILD_JOBS=1 to generate code in place, and report the versions you use"
                ) from None
            return self._generate_here(name, args, code, targets)

    def remember(self, key: str, ltoir: bytes) -> None:
        """Note that ``ltoir`` is the code of recipe ``key``: :meth:`digest` names it by the recipe."""
        self.recipe_of[hashlib.sha256(ltoir).hexdigest()] = key

    def _store(self, key: str, result: Result) -> None:
        self.remember(key, result.ltoir)
        self.cache.stats.seconds_generating += result.seconds
        self.cache.put(key, result.isa.to_bytes(8, "little", signed=True) + result.ltoir)
        self.cache.put(digest_key(key), CodeDigest.of(result.isa, result.ltoir).pack())
        self._release(key)

    def _recorded(self, key: str, name: str, code: int, targets: list[int]) -> Job | None:
        """The job of ``key`` as recorded for ``combined`` (device functions), else made now."""
        return self.jobs.get(key) or self._job(name, code, targets)

    def _job(self, name: str, code: int, targets: list[int]) -> Job | None:
        """The worker's recipe for this code, or None if some descriptor in it was not recorded."""
        steps: list[Step] = []
        seen: set[int] = set()

        def visit(handle: int) -> bool:
            if handle in seen:
                return True
            seen.add(handle)
            if handle not in self.calls or not all(visit(d) for d in self.deps.get(handle, ())):
                return False
            steps.append(Step(handle, tuple(self.calls[handle])))
            return True

        if not all(visit(h) for h in targets) or code not in self.calls:
            return None
        symbols = tuple(self.symbols.get(h) for h in targets)
        code_step = Step(code, tuple(self.calls[code]))
        return Job(tuple(steps), code_step, name, tuple(targets), self.isa_option, symbols, self.symbol_trait)

    def keep(self) -> None:
        """Every piece of code this process's workers (or another process) are generating, waited for and stored:
        the end of a job run with :attr:`keep_code`, whose kernels may all have been served without a link; and
        the codes that hold a kernel's functions together (``combined``)."""
        for key in list(self.futures):
            result = self._result(key)
            if self.cache.get(key, count=False) is None:  # its worker's callback may not have stored it yet
                self._store(key, result)
        self.combiner.keep()

    def key_of(self, data: bytes) -> str | None:
        """The cache key of the recipe whose code ``data`` is (a placeholder, or code this process was handed), else
        None."""
        if is_placeholder(data):
            return bytes(data[len(PENDING) :]).decode()
        return self.recipe_of.get(hashlib.sha256(data).hexdigest())

    def _result(self, key: str) -> Result:
        """The generated code of a pool job: waited for, or generated here if the worker failed."""
        try:
            return self.futures[key].result()
        except Exception as exc:
            warnings.warn(f"build cache: a worker could not generate code ({exc}); generating it here", stacklevel=2)
            result = self.fallbacks[key]()
            self._store(key, result)
            future: Future[Result] = Future()
            future.set_result(result)
            self.futures[key] = future
            return result

    def resolve(self, data: bytes) -> bytes:
        """The LTO-IR a placeholder stands for (waiting for its worker if need be); real LTO-IR unchanged."""
        if not is_placeholder(data):
            return data
        key = bytes(data[len(PENDING) :]).decode()
        if key in self.futures:
            waiting = sum(not f.done() for f in self.futures.values())
            if waiting:  # from this process's workers, or from another process that claimed them (no pool needed)
                where = f"{self.pool.workers} worker processes" if self.pool is not None else "another build"
                self.stage = f"waiting for {waiting} libmathdx functions from {where}"
            with self.timed("waiting for worker processes"):
                return self._result(key).ltoir
        blob = self.cache.get(key)
        if blob is not None:
            self.remember(key, blob[8:])
            return blob[8:]
        if key in self.absent:
            return self._generate_absent(key).ltoir
        raise RuntimeError(
            "build cache: a kernel refers to code that was being generated in another process and is gone; "
            "restart the kernel (or set COURSE_BUILD_JOBS=1 to generate in place)"
        )

    def _generate_absent(self, key: str) -> Result:
        """Code that a launch-only cache holds the digest of, generated now: a kernel that uses it is being linked
        anew (in the pool when there is one, else here)."""
        job = self.absent.pop(key)
        self.stage = "generating code that the launch-only bundle leaves out (libmathdx, NVRTC)"
        future = self.pool.submit(job) if self.pool is not None else None
        if future is None:
            with self.timed("generating code here"):
                result = codegen_workers.replay(job, lambda fn: self.real[fn])
            self._store(key, result)
            return result
        self.futures[key] = future
        self.fallbacks[key] = lambda: codegen_workers.replay(job, lambda fn: self.real[fn])
        future.add_done_callback(lambda done: done.exception() or self._store(key, done.result()))
        with self.timed("waiting for worker processes"):
            return self._result(key)

    def digest(self, data: bytes) -> str:
        """What stands for a piece of LTO-IR in a linked kernel's key: :func:`recipe_digest` of its recipe's cache key
        (a placeholder names it; real bytes are looked up among the code this process was handed), never the
        bytes' digest, which changes each time libmathdx generates the code again (the module docstring). Bytes
        that no recipe of this process made (not libmathdx's code): their SHA-256."""
        key = self.key_of(data)
        return recipe_digest(key) if key is not None else hashlib.sha256(data).hexdigest()

    def _label(self, handles: Iterable[int]) -> str:
        names = []
        for h in handles:
            recipe = self.recipes.get(h, ["?"])
            try:  # device functions: name their type (execute, copy, ...)
                names.append(self.m.CublasdxDeviceFunctionType(recipe[2]).name.lower())
            except Exception:
                names.append(str(recipe[0]).removeprefix("cublasdx_"))
        return ", ".join(names) or "code"

    def _read_served(self, name: str, args: tuple[Any, ...]) -> Any:
        code = self.served[int(args[0])]
        if name == "commondx_get_code_ltoir_size":
            return len(code.ltoir)
        if name == "commondx_get_code_ltoir":
            args[2][: int(args[1])] = code.ltoir[: int(args[1])]
            return None
        if int(args[1]) == self.isa_option:
            return code.isa
        self.served.pop(int(args[0])).regenerate()  # some other option: ask libmathdx for real
        return self.real[name](*args)


def rebind_trait_helpers(backend: Any, modules: Iterable[Any], mathdx: Any, common: Any) -> None:
    """Point nvmath's trait helpers at the (wrapped) binding functions.

    nvmath builds ``get_int_traits``, ``get_str_trait`` and ``get_str_device_trait`` at import, around the binding
    functions of that moment, so their queries would bypass the cache: the four ``get_int_traits`` calls of a
    pipeline kernel then took most of a warm restart, in libmathdx, every process (``instructor-notes/machinery.md``).
    """
    helpers = {
        "get_int_traits": common.build_get_int_traits(mathdx.cublasdx_get_trait_int64s),
        "get_str_trait": common.build_get_str_trait(mathdx.cublasdx_get_trait_str_size, mathdx.cublasdx_get_trait_str),
        "get_str_device_trait": common.build_get_str_trait(
            mathdx.cublasdx_get_device_function_trait_str_size, mathdx.cublasdx_get_device_function_trait_str
        ),
    }
    for module in (backend, *modules):
        for name, helper in helpers.items():
            if hasattr(module, name):
                setattr(module, name, helper)

"""A persistent build cache for nvmath.device kernels: from minutes to seconds.

Where the time goes (profiled on an H100 host and on a laptop CPU): a numba kernel that uses cuBLASDx through
nvmath.device asks libmathdx for a dozen device functions, and libmathdx compiles each with NVRTC
(``cublasdx_finalize_device_functions``, about 9 s each); finalizing the tensor and pipeline descriptors and
querying their traits costs another half minute; nvJitLink then links the kernel with those LTO-IR modules
(about 18 s). None of it depends on anything but its inputs, so all of it can be cached on disk.

How: :class:`LazyMathdx` sits between nvmath and its libmathdx binding. It records how every descriptor was
built (its *recipe*: the creating call and every option set on it, with the recipes of the descriptors it
refers to), defers the expensive finalizations, and serves generated LTO-IR and trait values from a
:class:`DiskCache` keyed by the recipe plus the versions of everything that generates code. Only on a miss
does it finalize for real (dependencies first) and store the result. Code that misses is generated in worker
processes, several functions at once, while numba goes on lowering the kernel (``utilities.parallel_codegen``);
the link waits for it. A second hook caches nvJitLink's cubin, keyed by the kernel's own IR and the digests of
every module linked into it.

The cache never serves a wrong kernel: a key covers every call that shaped a descriptor, entries carry a
checksum (a corrupt or partial entry is deleted and rebuilt), and any version change gives new keys.
These hooks reach into nvmath-python and numba-cuda internals, so they switch themselves on only for the
exact versions verified here; with other versions the normal (slow) path runs and a warning says why.

Location: ``$COURSE_BUILD_CACHE`` if set (``off`` disables the cache), else ``$XDG_CACHE_HOME/tcfusion-course``
(``~/.cache/tcfusion-course``). Clear it with ``python -m utilities.buildcache clear``.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib.metadata
import json
import os
import shutil
import sys
import threading
import time
import warnings
import zlib
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import parallel_codegen
from .parallel_codegen import PENDING, Job, Pool, Result, Step, is_placeholder

FORMAT = 1
VERIFIED = {"nvmath-python": "1.0.0", "nvidia-libmathdx-cu13": "0.3.2.6", "numba-cuda": "0.30.4"}
_MAGIC = b"TCFC"


# --------------------------------------------------------------------------------------------------------------
# On-disk store: checksummed, atomic, self-healing
# --------------------------------------------------------------------------------------------------------------


def default_cache_dir() -> Path | None:
    """The cache folder, or None when ``COURSE_BUILD_CACHE=off``."""
    env = os.environ.get("COURSE_BUILD_CACHE")
    if env:
        return None if env.lower() in {"off", "0", "false", "no"} else Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "tcfusion-course"


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    corrupt: int = 0
    stored: int = 0
    seconds_generating: float = 0.0

    def summary(self) -> str:
        text = f"{self.hits} from cache, {self.misses} generated ({self.seconds_generating:.1f} s)"
        return text + (f", {self.corrupt} corrupt entries rebuilt" if self.corrupt else "")


class DiskCache:
    """Blobs under ``root/v<FORMAT>/<key[:2]>/<key>``: a header (magic, length, SHA-256), then zlib data."""

    def __init__(self, root: Path | str):
        self.root = Path(root) / f"v{FORMAT}"
        self.stats = CacheStats()

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / key

    def get(self, key: str, *, count: bool = True) -> bytes | None:
        """The entry's payload, or None; ``count=False`` leaves the hit and miss counts alone."""
        path = self._path(key)
        try:
            blob = path.read_bytes()
        except FileNotFoundError:
            self.stats.misses += count
            return None
        payload = _unpack(blob)
        if payload is None:
            self.stats.corrupt += 1
            self.stats.misses += count
            warnings.warn(f"build cache: corrupt entry {path} removed; it is being rebuilt", stacklevel=2)
            path.unlink(missing_ok=True)
            return None
        self.stats.hits += count
        return payload

    def put(self, key: str, payload: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_bytes(_pack(payload))
        os.replace(tmp, path)  # atomic: readers see the old entry or the whole new one
        self.stats.stored += 1

    def clear(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def size_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.root.rglob("*") if p.is_file()) if self.root.exists() else 0


def _pack(payload: bytes) -> bytes:
    data = zlib.compress(payload, 1)
    return _MAGIC + len(data).to_bytes(8, "little") + hashlib.sha256(data).digest() + data


def _unpack(blob: bytes) -> bytes | None:
    if len(blob) < 44 or blob[:4] != _MAGIC:
        return None
    size = int.from_bytes(blob[4:12], "little")
    data = blob[44:]
    if len(data) != size or hashlib.sha256(data).digest() != blob[12:44]:
        return None
    try:
        return zlib.decompress(data)
    except zlib.error:
        return None


def make_key(kind: str, recipe: Any, environment: dict[str, str]) -> str:
    """SHA-256 of everything that determines an entry: its kind, its recipe and the code generators' versions."""
    text = json.dumps([FORMAT, kind, recipe, sorted(environment.items())], separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


# --------------------------------------------------------------------------------------------------------------
# The libmathdx interposer
# --------------------------------------------------------------------------------------------------------------

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
    placeholder, which :meth:`resolve` turns into the real LTO-IR at link time (see ``parallel_codegen``).
    """

    def __init__(
        self,
        module: Any,
        cache: DiskCache,
        environment: dict[str, str],
        isa_option: int,
        pool: Pool | None = None,
        symbol_trait: int = 1,
    ):
        self.m = module
        self.cache = cache
        self.environment = dict(environment)
        self.isa_option = int(isa_option)
        self.pool = pool
        self.symbol_trait = int(symbol_trait)
        self.calls: dict[int, list[tuple[str, tuple[Any, ...]]]] = {}  # how to build each descriptor again
        self.symbols: dict[int, bytes] = {}
        self.futures: dict[str, Any] = {}  # cache key -> Future[Result] of code being generated by the pool
        self.fallbacks: dict[str, Callable[[], Result]] = {}
        self.recipes: dict[int, list[Any]] = {}
        self.deps: dict[int, list[int]] = {}
        self.kinds: dict[int, str] = {}
        self.pending: dict[int, str] = {}
        self.served: dict[int, _Code] = {}
        self.real: dict[str, Callable[..., Any]] = {}
        self.stage = ""
        self._lock = threading.RLock()

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
            self.real[finalize](1, [handle])

    # -- traits ------------------------------------------------------------------------------------------------
    def _trait(self, name: str, args: tuple[Any, ...]) -> Any:
        style = _TRAITS[name]
        handle, trait = int(args[0]), int(args[1])
        if handle not in self.recipes:
            self.realize(handle)
            return self.real[name](*args)
        size = int(args[2]) if style != "ret" else 0
        key = make_key("trait", [name, self._snapshot(handle), trait, size], self.environment)
        symbol = name.startswith("cublasdx_get_device_function_trait_str") and trait == self.symbol_trait
        blob = self.cache.get(key)
        if blob is None:
            # A device function's symbol needs no finalized tensors (libmathdx 0.3.2: the same name before and
            # after; the workers check it again), and the workers generate code without them.
            if not symbol:
                self.realize(handle)
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

        def regenerate() -> None:  # a served descriptor asked for something the cache does not hold
            for h in targets:
                self.realize(h)
            self.real[name](*args)

        blob = self.cache.get(key)
        if blob is not None:
            isa, ltoir = int.from_bytes(blob[:8], "little", signed=True), blob[8:]
            self.served[code] = _Code(ltoir, isa, regenerate)
            return None
        self.stage = f"generating {self._label(targets)} (libmathdx, NVRTC)"
        isa_key = make_key("isa", self._snapshot(code), self.environment)
        isa = self.cache.get(isa_key, count=False)
        job = self._job(name, code, targets) if self.pool is not None and isa is not None else None
        future = self.pool.submit(job) if job is not None else None
        if future is None:  # no pool, the first code for this target (which tells its ISA version), or at exit
            result = self._generate_here(name, args, code, targets)
            self._store(key, result)
            self.cache.put(isa_key, str(result.isa).encode())
            return None
        self.futures[key] = future
        self.fallbacks[key] = lambda: self._fallback(job, name, args, code, targets)
        future.add_done_callback(lambda done: done.exception() or self._store(key, done.result()))
        self.served[code] = _Code(PENDING + key.encode(), int(isa), regenerate)
        return None

    def _generate_here(self, name: str, args: tuple[Any, ...], code: int, targets: list[int]) -> Result:
        for h in targets:
            self.realize(h)
        start = time.perf_counter()
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
            return parallel_codegen.replay(job, lambda fn: self.real[fn])
        except Exception:
            if code not in self.recipes or any(h not in self.recipes for h in targets):
                raise RuntimeError(
                    "build cache: libmathdx could not generate a device function from its recipe; "
                    "set COURSE_BUILD_JOBS=1 to generate code in place, and report the versions you use"
                ) from None
            return self._generate_here(name, args, code, targets)

    def _store(self, key: str, result: Result) -> None:
        self.cache.stats.seconds_generating += result.seconds
        self.cache.put(key, result.isa.to_bytes(8, "little", signed=True) + result.ltoir)

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
            if waiting:
                self.stage = f"waiting for {waiting} libmathdx functions from {self.pool.workers} worker processes"
            return self._result(key).ltoir
        blob = self.cache.get(key)
        if blob is None:
            raise RuntimeError(
                "build cache: a kernel refers to code that was being generated in another process and is gone; "
                "restart the kernel (or set COURSE_BUILD_JOBS=1 to generate in place)"
            )
        return blob[8:]

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


# --------------------------------------------------------------------------------------------------------------
# The nvJitLink cubin cache (numba-cuda's CUDACodeLibrary.get_cubin)
# --------------------------------------------------------------------------------------------------------------


def _digest_linked(item: Any) -> str:
    data = getattr(item, "data", None)
    if isinstance(data, bytes | bytearray):
        return type(item).__name__ + ":" + hashlib.sha256(data).hexdigest()
    path = Path(str(item))
    if path.is_file():
        return path.name + ":" + hashlib.sha256(path.read_bytes()).hexdigest()
    raise TypeError(f"build cache: cannot digest linked item {item!r}")


def cubin_key(library: Any, cc: tuple[int, int], environment: dict[str, str]) -> str:
    """Key of a linked kernel: its own LLVM IR, NVVM options, every linked module's digest, target and versions."""
    recipe = {
        # numba emits the same modules in a different order from one process to the next: sort them
        "ir": hashlib.sha256("\n".join(sorted(m.strip() for m in library.llvm_strs)).encode()).hexdigest(),
        "nvvm": sorted((str(k), str(v)) for k, v in library._nvvm_options.items()),
        "linked": sorted(_digest_linked(f) for f in library._linking_files),
        "cudadevrt": bool(library.needs_cudadevrt),
        "max_registers": library._max_registers,
        "lto": bool(library._lto),
        "cc": list(cc),
    }
    return make_key("cubin", recipe, environment)


# --------------------------------------------------------------------------------------------------------------
# Progress of long builds
# --------------------------------------------------------------------------------------------------------------


class BuildProgress:
    """Shows what is being built once a build passes ``after`` seconds, then how long it took.

    In a notebook it updates one line in place; elsewhere it prints a line every ``every`` seconds.
    """

    def __init__(self, what: str, stage: Callable[[], str] = lambda: "", after: float = 3.0, every: float = 5.0):
        self.what, self.stage, self.after, self.every = what, stage, after, every
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
        if self._shown:
            self._show(f"[build] {self.what}: built in {self.seconds:.1f} s" + _cache_note())


def _in_notebook() -> bool:
    shell = sys.modules.get("IPython") and getattr(sys.modules["IPython"], "get_ipython", lambda: None)()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


# --------------------------------------------------------------------------------------------------------------
# Installing the hooks
# --------------------------------------------------------------------------------------------------------------

_STATE: dict[str, Any] = {}


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def generator_environment() -> dict[str, str]:
    """Versions of everything that generates or links code: part of every key."""
    env = {name: str(_version(name)) for name in (*VERIFIED, "nvidia-cuda-cccl", "nvidia-cuda-nvrtc", "numba")}
    env["nvidia-nvjitlink"] = str(_version("nvidia-nvjitlink"))
    try:
        from nvmath.bindings import mathdx

        env["libmathdx"] = str(mathdx.get_version())
    except Exception as exc:  # no driver, no library: recorded, so such keys never mix with real ones
        env["libmathdx"] = f"unavailable: {type(exc).__name__}"
    return env


def _cache_note() -> str:
    cache = _STATE.get("cache")
    return f" (libmathdx: {cache.stats.summary()})" if cache else ""


def install(cache_dir: Path | str | None = None, *, quiet: bool = False) -> DiskCache | None:
    """Switch the build cache on for this process (idempotent). Returns the cache, or None when it stays off."""
    if "cache" in _STATE:
        return _STATE["cache"]
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    if root is None:
        return None
    found = {name: _version(name) for name in VERIFIED}
    if found != VERIFIED:
        if not quiet:
            warnings.warn(
                f"build cache off: it was verified with {VERIFIED}, found {found}; kernels build the normal (slow) way",
                stacklevel=2,
            )
        return None
    from numba.cuda import codegen, dispatcher
    from numba.cuda.core import sigutils
    from nvmath.bindings import mathdx
    from nvmath.device import common_backend, cublasdx, cublasdx_backend

    cache = DiskCache(root)
    env = generator_environment()
    workers = parallel_codegen.workers_from_env()
    pool = Pool(workers) if workers > 1 else None
    symbol = int(mathdx.CublasdxDeviceFunctionTrait.SYMBOL)
    lazy = LazyMathdx(mathdx, cache, env, int(mathdx.CommondxOption.CODE_ISA), pool, symbol)
    lazy.install()
    _patch_cubin(codegen.CUDACodeLibrary, cache, env, lazy)
    rebind_trait_helpers(cublasdx_backend, [cublasdx], mathdx, common_backend)
    object_code, linker = cublasdx_backend.ObjectCode, cublasdx_backend.Linker
    cublasdx_backend.ObjectCode = ResolvingObjectCode(object_code, lazy)
    cublasdx_backend.Linker = functools.partial(
        CachingLinker, _link=(linker, object_code.from_cubin), _cache=(cache, env)
    )
    _patch_compile(dispatcher.CUDADispatcher, lazy, sigutils)
    _STATE.update(cache=cache, lazy=lazy, env=env)
    return cache


def _patch_cubin(library_class: Any, cache: DiskCache, env: dict[str, str], lazy: LazyMathdx) -> None:
    original = library_class.get_cubin

    def get_cubin(self: Any, cc: tuple[int, int] | None = None) -> Any:
        cc = self._ensure_cc(cc)
        if self._cubin_cache.get(cc):
            return self._cubin_cache[cc]
        resolve_placeholders(self._linking_files, lazy)
        key = cubin_key(self, cc, env)
        data = cache.get(key)
        if data is None:
            lazy.stage = "linking with nvJitLink"
            cubin = original(self, cc)
            cache.put(key, bytes(getattr(cubin, "code", cubin)))  # numba-cuda 0.30 returns a cuda.core ObjectCode
        else:
            from cuda.core import ObjectCode

            cubin = ObjectCode.from_cubin(data)
        self._cubin_cache[cc] = cubin
        self._linkerinfo_cache.setdefault(cc, "")
        return cubin

    library_class.get_cubin = get_cubin


def resolve_placeholders(linked: Iterable[Any], lazy: LazyMathdx) -> None:
    """Put the real LTO-IR into every linked module that still holds a placeholder (see ``parallel_codegen``)."""
    for item in linked:
        data = getattr(item, "_data", None)
        if isinstance(data, bytes | bytearray) and is_placeholder(data):
            item._data = lazy.resolve(data)


class ResolvingObjectCode:
    """cuda.core's ``ObjectCode`` as nvmath's backend sees it: LTO-IR placeholders resolved before use.

    nvmath links the device-pipeline init and destroy kernels itself (``ObjectCode.from_ltoir`` and cuda.core's
    ``Linker``), outside numba, as soon as a pipeline is made; those links must get the real code too.
    """

    def __init__(self, original: Any, lazy: LazyMathdx):
        self._original, self._lazy = original, lazy

    def from_ltoir(self, data: bytes, *args: Any, **kwargs: Any) -> Any:
        return self._original.from_ltoir(self._lazy.resolve(data), *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._original, name)


class CachingLinker:
    """cuda.core's ``Linker`` as nvmath's backend sees it: a cubin it linked before comes from the disk cache.

    nvmath compiles and links a small init kernel for every device pipeline it makes, and a destroy kernel when
    the pipeline is freed (nvJitLink with LTO, every process); keyed by every input's bytes and the options.
    """

    def __init__(self, *codes: Any, options: Any = None, _link: Any = None, _cache: Any = None, **kw: Any):
        self._codes, self._options, self._kw = codes, options, kw
        (self._linker, self._from_cubin), (self._cache, self._env) = _link, _cache

    def link(self, target_type: str) -> Any:
        def real() -> Any:
            return self._linker(*self._codes, options=self._options, **self._kw).link(target_type)

        if self._cache is None or target_type != "cubin" or self._kw:
            return real()
        inputs = [hashlib.sha256(bytes(code.code)).hexdigest() for code in self._codes]
        key = make_key("linked", [target_type, repr(self._options), inputs], self._env)
        data = self._cache.get(key)
        if data is not None:
            return self._from_cubin(data)
        linked = real()
        self._cache.put(key, bytes(linked.code))
        return linked


def rebind_trait_helpers(backend: Any, modules: Iterable[Any], mathdx: Any, common: Any) -> None:
    """Point nvmath's trait helpers at the (wrapped) binding functions.

    nvmath builds ``get_int_traits``, ``get_str_trait`` and ``get_str_device_trait`` at import, around the binding
    functions of that moment, so their queries would bypass the cache: on an H100 the four ``get_int_traits``
    calls of a pipeline kernel cost 6.9 s of a 12 s warm restart, in libmathdx, every process.
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


def _patch_compile(dispatcher_class: Any, lazy: LazyMathdx, sigutils: Any) -> None:
    original = dispatcher_class.compile

    def compile(self: Any, sig: Any) -> Any:
        argtypes, _ = sigutils.normalize_signature(sig)
        if self.specialized or argtypes in self.overloads:  # already built in this process
            return original(self, sig)
        name = getattr(self.py_func, "__name__", "kernel")
        with BuildProgress(name, stage=lambda: lazy.stage):
            kernel = original(self, sig)
            lazy.stage = "linking"
            kernel._codelibrary.get_cubin()  # link inside the progress display, not at the first launch
            return kernel

    dispatcher_class.compile = compile


def workers() -> int:
    """Worker processes generating code for this process's cache (0: in place, or no cache)."""
    lazy = _STATE.get("lazy")
    return lazy.pool.workers if lazy is not None and lazy.pool is not None else 0


def stats() -> CacheStats | None:
    cache = _STATE.get("cache")
    return cache.stats if cache else None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    root = default_cache_dir()
    if root is None:
        print("build cache is off (COURSE_BUILD_CACHE=off)")
        return 0
    cache = DiskCache(root)
    if args[:1] == ["clear"]:
        cache.clear()
        print(f"cleared {cache.root}")
    else:
        print(f"build cache: {cache.root} ({cache.size_bytes() / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A persistent build cache for nvmath.device kernels: from minutes to seconds.

Where the time goes: a numba kernel that uses cuBLASDx through nvmath.device asks libmathdx for a dozen device
functions, and libmathdx compiles each with NVRTC (``cublasdx_finalize_device_functions``); finalizing the tensor
and pipeline descriptors and querying their traits comes on top; nvJitLink then links the kernel with those LTO-IR
modules (``instructor-notes/machinery.md`` has the profile). None of it depends on anything but its inputs, so all
of it can be cached on disk.

The jobs, one module each:

- ``store``: the on-disk entries (checksummed, atomic; a corrupt one is deleted and rebuilt) and their keys;
- ``interposer``: ``LazyMathdx`` between nvmath and its libmathdx binding, recipes, deferred finalizations,
  code and traits served from the store, missing code generated in worker processes (``codegen_workers``);
- ``linking``: nvJitLink's cubins from the store, placeholders resolved before every link;
- ``progress``: what a build longer than a few seconds shows while it runs;
- ``dispatch``: a kernel the cache holds served before numba types it, by a fingerprint of its Python code.

:func:`install` puts them in place. The cache never serves a wrong kernel: a key covers every call that shaped a
descriptor and the versions of everything that generates code. These hooks reach into nvmath-python and
numba-cuda internals, so they switch themselves on only for the versions pinned in
``utilities.machinery.versions``; with others the normal (slow) path runs and a warning says why.

Location: ``$COURSE_BUILD_CACHE`` if set (``off`` disables the cache), else ``$XDG_CACHE_HOME/tcfusion-course``
(``~/.cache/tcfusion-course``). ``python -m utilities.machinery.buildcache`` prints its size, ``... clear``
clears it.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .. import codegen_workers, cpu_build, versions
from ..codegen_workers import Pool
from . import linking, progress
from .dispatch import patch_dispatch
from .interposer import LazyMathdx, rebind_trait_helpers
from .linking import (
    CachingLinker,
    ResolvingObjectCode,
    cubin_key,
    drop_unused_variables,
    patch_cubin,
    resolve_placeholders,
)
from .progress import BuildProgress, patch_compile
from .store import CacheStats, DiskCache, default_cache_dir, make_key

__all__ = [
    "BuildProgress",
    "CacheStats",
    "DiskCache",
    "LazyMathdx",
    "cubin_key",
    "default_cache_dir",
    "generator_environment",
    "install",
    "keeping_code",
    "make_key",
    "resolve_placeholders",
    "seconds",
    "stats",
    "workers",
]

_STATE: dict[str, Any] = {}


def generator_environment() -> dict[str, str]:
    """Versions of everything that generates or links code: part of every key."""
    names = (*versions.BUILD_CACHE, "nvidia-cuda-cccl", "nvidia-cuda-nvrtc", "numba", "nvidia-nvjitlink")
    env = {name: str(versions.installed(name)) for name in names}
    try:
        from nvmath.bindings import mathdx

        env["libmathdx"] = str(mathdx.get_version())
    except Exception as exc:  # no driver, no library: recorded, so such keys never mix with real ones
        env["libmathdx"] = f"unavailable: {type(exc).__name__}"
    return env


def install(cache_dir: Path | str | None = None, *, quiet: bool = False) -> DiskCache | None:
    """Switch the build cache on for this process (idempotent). Returns the cache, or None when it stays off."""
    if "cache" in _STATE:
        return _STATE["cache"]
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    if root is None:
        return None
    if not versions.verified(versions.BUILD_CACHE):
        if not quiet:
            versions.fall_back("the build cache", versions.BUILD_CACHE, "kernels build the normal (slow) way")
        return None
    from numba.cuda import codegen, dispatcher
    from numba.cuda.core import sigutils
    from numba.cuda.cudadrv import driver
    from nvmath.bindings import mathdx
    from nvmath.device import common_backend, cublasdx, cublasdx_backend

    cache = DiskCache(root)
    env = generator_environment()
    workers = codegen_workers.workers_from_env()
    pool = Pool(workers) if workers > 1 else None
    symbol = int(mathdx.CublasdxDeviceFunctionTrait.SYMBOL)
    uid = int(mathdx.CublasdxTensorTrait.UID)
    lazy = LazyMathdx(mathdx, cache, env, int(mathdx.CommondxOption.CODE_ISA), pool, symbol, uid)
    lazy.generate_code = cpu_build.linking()
    lazy.install()
    patch_cubin(codegen.CUDACodeLibrary, cache, env, lazy)
    drop_unused_variables(driver._Linker)
    rebind_trait_helpers(cublasdx_backend, [cublasdx], mathdx, common_backend)
    object_code, linker = cublasdx_backend.ObjectCode, cublasdx_backend.Linker
    resolving = ResolvingObjectCode(object_code, lazy)
    cublasdx_backend.ObjectCode = resolving
    cublasdx_backend.Linker = functools.partial(
        CachingLinker, _link=(linker, object_code.from_cubin), _cache=(cache, env), _object_code=resolving
    )
    patch_compile(dispatcher.CUDADispatcher, lazy, sigutils, note=lambda: f" (libmathdx: {cache.stats.summary()})")
    patch_dispatch(
        dispatcher.CUDADispatcher,
        cache,
        env,
        sigutils,
        served=_served,
        cc=lambda: codegen.CUDACodeLibrary._ensure_cc(None, None),
        gpu=lambda: not cpu_build.active(),
    )
    _STATE.update(cache=cache, lazy=lazy, env=env)
    return cache


def _served(name: str, key: str, waited: float = 0.0) -> None:
    """A kernel rebuilt from its record (``dispatch``): looked up, not linked; ``waited``: the seconds it waited for
    another process's build of it (a build wait as the run-through counts them)."""
    linking.KEYS.append((name, key))
    progress.BUILDS.append((name.rsplit(".", 1)[-1], round(waited, 2)))


@contextlib.contextmanager
def keeping_code() -> Iterator[None]:
    """Within the block, libmathdx code that a launch-only cache knows only by its digest is generated and stored
    (``LazyMathdx.keep_code``), and waited for at its end: a prebuild job of a check's twin, after a bundle import,
    so that an attendee's edited kernel is only linked (nothing generated) by the check. No cache: nothing to do."""
    lazy = _STATE.get("lazy")
    if lazy is None:
        yield
        return
    lazy.keep_code = True
    try:
        yield
        lazy.keep()
    finally:
        lazy.keep_code = False


def workers() -> int:
    """Worker processes generating code for this process's cache (0: in place, or no cache)."""
    lazy = _STATE.get("lazy")
    return lazy.pool.workers if lazy is not None and lazy.pool is not None else 0


def seconds() -> dict[str, float]:
    """Seconds this process has spent blocked in each kind of build work (empty without the cache)."""
    lazy = _STATE.get("lazy")
    return {k: round(v, 1) for k, v in sorted(lazy.seconds.items())} if lazy is not None else {}


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

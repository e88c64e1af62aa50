"""The build cache at link time: nvJitLink's cubins from the store, and placeholders resolved before any link.

numba-cuda links a kernel in ``CUDACodeLibrary.get_cubin`` (patched by :func:`patch_cubin`, keyed by the kernel's
own IR and the digests of every module linked into it); nvmath links its device pipelines' init and destroy
kernels itself through cuda.core (:class:`ResolvingObjectCode`, :class:`CachingLinker`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..codegen_workers import is_placeholder
from .interposer import LazyMathdx
from .store import DiskCache, make_key


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


def patch_cubin(library_class: Any, cache: DiskCache, env: dict[str, str], lazy: LazyMathdx) -> None:
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
            with lazy.timed("linking kernels (nvJitLink)"):
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
    """Put the real LTO-IR into every linked module that still holds a placeholder (see ``codegen_workers``)."""
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

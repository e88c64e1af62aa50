"""The build cache at link time: nvJitLink's cubins from the store, and placeholders resolved before any link.

numba-cuda links a kernel in ``CUDACodeLibrary.get_cubin`` (patched by :func:`patch_cubin`, keyed by the kernel's
own IR and every module linked into it: libmathdx's code by its recipe, since its bytes differ each time it is
generated, other code by its bytes' digest); nvmath links its device pipelines' init and destroy kernels itself
through cuda.core (:class:`ResolvingObjectCode`, :class:`CachingLinker`).

A kernel's IR as numba prints it depends on what the process compiled before (numba's compilation numbers, the
order of its modules, the struct types llvmlite declares, libmathdx's tensor UIDs): the same kernel built in a
notebook after a prebuild that built it in a process of its own would print differently. The key is made from
:func:`~.canonical.canonical_ir`, which removes all of that, and a cubin served to a kernel whose numbers differ is
looked up under the entry name it was linked with.

A notebook defines the exercises' factories (and some given kernels) in its cells, so in ``__main__``: the same code
as the course module's factory, under another module name in every symbol of the kernel. Every function defined in
``__main__`` under the name of one course module's function (a kernel's factory, a device function beside it) is
keyed under that module's name (:func:`main_aliases`): the same code gets the course kernel's key, and is served from
the cubin a prebuild or a bundle holds instead of being linked (with libmathdx code that a launch-only bundle leaves
out) on the day. Other code gets another key, as before.
"""

from __future__ import annotations

import hashlib
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .. import cpu_build
from ..codegen_workers import is_placeholder
from . import combined
from .canonical import canonical_ir, nested_name
from .interposer import LazyMathdx
from .store import DiskCache, make_key


def _digest_linked(item: Any, digest: Callable[[bytes], str] | None = None) -> str:
    """A linked module's part of a kernel's key: its type and the SHA-256 of its bytes (``digest`` gives that of the
    LTO-IR a placeholder stands for)."""
    data = getattr(item, "data", None)
    if isinstance(data, bytes | bytearray):
        return type(item).__name__ + ":" + (digest or (lambda d: hashlib.sha256(d).hexdigest()))(bytes(data))
    path = Path(str(item))
    if path.is_file():
        return path.name + ":" + hashlib.sha256(path.read_bytes()).hexdigest()
    raise TypeError(f"build cache: cannot digest linked item {item!r}")


LINKED: list[str] = []  # ``module.kernel`` of every kernel this process linked (not served from the store)
# ... of those that hold no code of the running script or notebook (``__main__``): the course's own kernels, which a
# prebuild or a bundle should have served. A course factory given a notebook's device function builds the notebook's.
COURSE_LINKED: list[str] = []
KEYS: list[tuple[str, str]] = []  # (``module.kernel``, key) of every kernel this process looked up, linked or served
COURSE_LINKED_KEYS: list[str] = []  # the key of each of COURSE_LINKED, in its order
# what each key of KEYS was made of (:func:`cubin_recipe`): a kernel keyed differently on two machines or in two
# processes can be compared part by part (``utilities.prebuild --keys``, the run-through's ``course_link_keys``)
RECIPES: dict[str, dict[str, Any]] = {}
_SCRIPT_CODE = re.compile(r"_ZN(?:6cudapy)?8__main__")


def qualified_name(mangled: str) -> str:
    """``module.function`` of a numba kernel's mangled name (``_ZN6cudapy8__main__4kernB2v1...`` ->
    ``__main__.kern``), or the name itself when it is not one."""
    start = mangled.find("_ZN")
    parts = nested_name(mangled, start + 3)[0] if start >= 0 else []
    parts = [p.replace("_3clocals_3e", "<locals>") for p in parts if p and p != "cudapy"]
    return ".".join(parts) if parts else mangled


_MAIN = re.compile(r"8__main__(?=\d)")


def course_module(name: str) -> str | None:
    """The course module (``utilities.*``, imported) that defines a function ``name`` when exactly one does, or when
    exactly one of those defines it as a numba function (read through its ``py_func``: 2c's ``neighbor`` is the
    device function of ``conv.simt``, not ``conv.reference``'s NumPy one, which no IR names)."""
    found: dict[str, bool] = {}
    for module in list(sys.modules.values()):
        module_name = getattr(module, "__name__", "")
        if module_name.startswith("utilities.") and callable(value := getattr(module, name, None)):
            if getattr(getattr(value, "py_func", value), "__module__", None) == module_name:  # defined there
                found[module_name] = hasattr(value, "py_func")
    numba = [m for m, compiled in found.items() if compiled]
    if len(found) == 1:
        return next(iter(found))
    return numba[0] if len(numba) == 1 else None


def main_aliases(texts: Iterable[str]) -> list[tuple[str, str]]:
    """``(old, new)`` for each function a notebook defines in ``__main__`` (in the mangled names of ``texts``) under
    the name of one course module's function: its mangled prefix, and the same under that module (see the module
    docstring). A kernel, its factory, and the device functions a cell defines beside them (2c's ``neighbor``)."""
    names: dict[str, None] = {}
    for text in texts:
        for match in _MAIN.finditer(text):
            parts, _ = nested_name(text, match.end())
            if parts:
                names.setdefault(parts[0])
    out = []
    for name in names:
        module = course_module(name)
        if module is not None:
            mangled = f"{len(name)}{name}"
            out.append(("8__main__" + mangled, "".join(f"{len(p)}{p}" for p in module.split(".")) + mangled))
    return out


def cubin_recipe(library: Any, cc: tuple[int, ...], digest: Callable[[bytes], str] | None = None) -> dict[str, Any]:
    """What a linked kernel's key is made of: its own LLVM IR (the SHA-256 of :func:`~.canonical.canonical_ir`'s
    text, a notebook's copies of course functions under the course module's name: :func:`main_aliases`) and entry name,
    NVVM options, what stands for every linked module (``digest``: :meth:`LazyMathdx.digest`, which names libmathdx's
    code by its recipe), the target, and that the link drops unread variables (:func:`drop_unused_variables`: a
    cubin linked before keeps them, and is linked again)."""
    texts, entry = list(library.llvm_strs), getattr(library, "_entry_name", None)
    for alias in main_aliases([*texts, entry or ""]):
        texts, entry = [t.replace(*alias) for t in texts], entry.replace(*alias) if entry else entry
    ir, entry = canonical_ir(texts, entry)
    return {
        "ir": hashlib.sha256(ir.encode()).hexdigest(),
        "entry": entry,
        "nvvm": sorted((str(k), str(v)) for k, v in library._nvvm_options.items()),
        "linked": sorted(_digest_linked(f, digest) for f in library._linking_files),
        "cudadevrt": bool(library.needs_cudadevrt),
        "max_registers": library._max_registers,
        "lto": bool(library._lto),
        "cc": list(cc),
        "unused_variables": "dropped",
    }


def cubin_key(
    library: Any, cc: tuple[int, ...], environment: dict[str, str], digest: Callable[[bytes], str] | None = None
) -> str:
    """Key of a linked kernel: :func:`cubin_recipe` and the versions of everything that generates or links code."""
    return make_key("cubin-named", cubin_recipe(library, cc, digest), environment)


def key_record(name: str, key: str) -> dict[str, Any]:
    """A kernel's key as the prebuild's and the run-through's logs keep it: name, key and :data:`RECIPES`' entry."""
    return {"kernel": name, "key": key, "recipe": RECIPES.get(key)}


def _named(entry: str | None, cubin: bytes) -> bytes:
    """A stored cubin: the entry name it was linked with (length-prefixed), then the cubin."""
    name = (entry or "").encode()
    return len(name).to_bytes(4, "little") + name + cubin


def _unnamed(payload: bytes) -> tuple[str, bytes]:
    size = int.from_bytes(payload[:4], "little")
    return payload[4 : 4 + size].decode(), payload[4 + size :]


def patch_cubin(library_class: Any, cache: DiskCache, env: dict[str, str], lazy: LazyMathdx) -> None:
    original = library_class.get_cubin

    def get_cubin(self: Any, cc: tuple[int, int] | None = None) -> Any:
        cc = self._ensure_cc(cc)
        if self._cubin_cache.get(cc):
            return self._cubin_cache[cc]
        recipe = cubin_recipe(self, cc, lazy.digest)
        key = make_key("cubin-named", recipe, env)
        RECIPES[key] = recipe
        KEYS.append((qualified_name(self._entry_name or ""), key))
        data = cache.get(key)
        if data is None:
            cubin = _link(self, cc, original, lazy)
            LINKED.append(qualified_name(self._entry_name or ""))
            if not _attendees(self):
                COURSE_LINKED.append(LINKED[-1])
                COURSE_LINKED_KEYS.append(key)
            # numba-cuda 0.30 returns a cuda.core ObjectCode
            cache.put(key, _named(self._entry_name, bytes(getattr(cubin, "code", cubin))))
        else:
            from cuda.core import ObjectCode

            if lazy.keep_code and combined.enabled(cpu_build.active() is not None):  # what an edit of it will link
                combined.want(self._linking_files, lazy, lazy.combiner)
            entry, code = _unnamed(data)
            if self._entry_name is not None and entry:
                self._entry_name = entry  # the same kernel, linked under the numbers of the process that built it
            cubin = ObjectCode.from_cubin(code)
        self._cubin_cache[cc] = cubin
        self._linkerinfo_cache.setdefault(cc, "")
        self._course_key = key  # where its cubin is stored: a record of the kernel names it (``dispatch``)
        return cubin

    library_class.get_cubin = get_cubin


def drop_unused_variables(linker_class: Any) -> None:
    """numba's kernel links (``driver._Linker``) told that a variable no device code reads may go
    (nvJitLink's ``-optimize-unused-variables``).

    libmathdx's code declares thousands of C++ compile-time constants as globals (``integral_constant<...>::value``,
    cuBLASDx's trait counters), every one of which nvJitLink otherwise keeps and ptxas assembles: a 3b products
    kernel's cubin held 25,825 symbols in 5.2 MB for 15 KB of machine code. Without them it is 39 KB, with the same
    machine code, ptxas takes a fifth of its time, and bundles and module loads shrink with it. No host code of the
    course or of numba reads a module variable that its kernels do not (``instructor-notes/machinery.md``)."""
    import dataclasses

    original = linker_class._get_linker_options
    if getattr(original, "_course", False):
        return

    def options(self: Any, ptx: Any) -> Any:
        made = original(self, ptx)
        return dataclasses.replace(made, optimize_unused_variables=True) if self._has_ltoir else made

    options._course = True  # type: ignore[attr-defined]
    linker_class._get_linker_options = options


def _attendees(library: Any) -> bool:
    """Whether the kernel is a notebook's (defined in ``__main__``), not the course's."""
    return any(_SCRIPT_CODE.search(text) for text in library.llvm_strs)


def _link(library: Any, cc: tuple[int, ...], original: Callable[..., Any], lazy: LazyMathdx) -> Any:
    """numba's link of ``library`` (``original``), its libmathdx functions as one module where the cache holds it
    (a third of the link's time: ``combined``), else as separate modules, each placeholder resolved first."""
    files = library._linking_files
    again = lazy.keep_code or _attendees(library)  # a kernel that may be linked again: its combined code is worth it
    use = lazy.generate_code and combined.enabled(cpu_build.active() is not None)
    swapped = combined.swap(files, lazy, lazy.combiner, again) if use else None
    resolve_placeholders(swapped or files, lazy)  # a new link needs the code itself
    lazy.stage = "linking with nvJitLink"
    library._linking_files = swapped or files
    try:
        with lazy.timed("linking kernels (nvJitLink)"):
            return original(library, cc)
    finally:
        library._linking_files = files


def resolve_placeholders(linked: Iterable[Any], lazy: LazyMathdx) -> None:
    """Put the real LTO-IR into every linked module that still holds a placeholder (see ``codegen_workers``)."""
    for item in linked:
        data = getattr(item, "_data", None)
        if isinstance(data, bytes | bytearray) and is_placeholder(data):
            item._data = lazy.resolve(data)


class ResolvingObjectCode:
    """cuda.core's ``ObjectCode`` as nvmath's backend sees it: an LTO-IR placeholder is kept as it is, so that
    :class:`CachingLinker` keys the link by the code's digest and resolves it (:meth:`resolved`) only for a new link.

    nvmath links the device-pipeline init and destroy kernels itself (``ObjectCode.from_ltoir`` and cuda.core's
    ``Linker``), outside numba, as soon as a pipeline is made; those links must get the real code too.
    """

    def __init__(self, original: Any, lazy: LazyMathdx):
        self._original, self._lazy = original, lazy

    def from_ltoir(self, data: bytes, *args: Any, **kwargs: Any) -> Any:
        return self._original.from_ltoir(bytes(data), *args, **kwargs)

    def resolved(self, code: Any) -> Any:
        """``code``, or the same object code made from the real LTO-IR if it holds a placeholder."""
        data = bytes(code.code)
        return self._original.from_ltoir(self._lazy.resolve(data)) if is_placeholder(data) else code

    def __getattr__(self, name: str) -> Any:
        return getattr(self._original, name)


class CachingLinker:
    """cuda.core's ``Linker`` as nvmath's backend sees it: a cubin it linked before comes from the disk cache.

    nvmath compiles and links a small init kernel for every device pipeline it makes, and a destroy kernel when
    the pipeline is freed (nvJitLink with LTO, every process); keyed by every input's bytes and the options.
    """

    def __init__(
        self,
        *codes: Any,
        options: Any = None,
        _link: Any = None,
        _cache: Any = None,
        _object_code: ResolvingObjectCode | None = None,
        **kw: Any,
    ):
        self._codes, self._options, self._kw = codes, options, kw
        (self._linker, self._from_cubin), (self._cache, self._env) = _link, _cache
        self._object_code = _object_code

    def link(self, target_type: str) -> Any:
        if cpu_build.active() and not cpu_build.linking():
            return cpu_build.Unloaded(None)  # a CPU build that only types kernels: nothing to link
        linked = self._link(target_type)
        return cpu_build.Unloaded(linked) if cpu_build.active() else linked

    def _link(self, target_type: str) -> Any:
        def real() -> Any:
            codes = [self._object_code.resolved(c) for c in self._codes] if self._object_code else self._codes
            return self._linker(*codes, options=self._options, **self._kw).link(target_type)

        if self._cache is None or target_type != "cubin" or self._kw:
            return real()
        digest = self._object_code._lazy.digest if self._object_code else lambda d: hashlib.sha256(d).hexdigest()
        inputs = [digest(bytes(code.code)) for code in self._codes]
        key = make_key("linked", [target_type, repr(self._options), inputs], self._env)
        data = self._cache.get(key)
        if data is not None:
            return self._from_cubin(data)
        linked = real()
        self._cache.put(key, bytes(linked.code))
        return linked

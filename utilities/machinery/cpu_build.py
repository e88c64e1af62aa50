"""Course kernels built on a machine without a GPU: typed by numba, their libmathdx code generated, linked by
nvJitLink into the build cache, never launched.

None of that needs a GPU, but the stack asks for one on the way: nvmath's libmathdx binding refuses to load
without a CUDA driver, NVRTC asks the driver for an export table, nvmath and numba ask the current device for its
compute capability, the plans allocate with CuPy, and a device pipeline allocates storage and launches its init
kernel. :func:`enter` stands in for each, in this process and in the code generation workers it starts:

- a stand-in ``libcuda.so.1`` of five functions (:data:`DRIVER_SOURCE`, compiled with the host's C compiler on
  first use): the driver version (13.0), ``cuInit`` succeeds, ``cuGetProcAddress`` (both versions) and
  ``cuGetExportTable`` find nothing (without the last, NVRTC crashes);
- CuPy replaced by NumPy (arrays typed by numba as CuPy's are: same dtype, dimensions and layout);
- the device's compute capability given (nvmath's ``get_current_device_cc``, numba's device lookups);
- a kernel "launch" links the kernel (``get_cubin``, through the build cache) and returns; a device pipeline is
  made without storage: its descriptor, traits and init kernel's link, no launch (``utilities.machinery.pipelines``).

What a plan computes is garbage (NumPy zeros in, nothing written): only what it builds counts. Kernels whose choice
depends on results (an automatic slice count) build the choice kernels, not the chosen count's kernels.

``python -m utilities.prebuild --arch sm_90`` builds the course this way; ``tools/key_determinism.py`` checks that a
kernel's key does not depend on what its process built before. These hooks reach into numba-cuda and nvmath-python
internals: :func:`unavailable` refuses other versions than those pinned in ``utilities.machinery.versions``.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.machinery
import os
import shutil
import subprocess
import sys
import sysconfig
import types
from pathlib import Path
from typing import Any

import numpy as np

from . import versions

ENV = "COURSE_CPU_BUILD"  # "9.0": this process (and the prebuild's jobs) builds for that GPU on the CPU
NEEDS = ("numba-cuda", "nvmath-python", "nvidia-libmathdx-cu13")
# what the stand-in device reports (an H100 / H200 SXM): plans size grids and check shared memory with these
MEMORY_BYTES = 80 * 10**9  # the stand-in device's memory, free and total
DEVICE_ATTRIBUTES = {
    "MultiProcessorCount": 132,
    "MaxSharedMemoryPerBlockOptin": 232448,
    "MaxSharedMemoryPerBlock": 49152,
    "MaxThreadsPerBlock": 1024,
    "MaxThreadsPerMultiProcessor": 2048,
    "WarpSize": 32,
}

DRIVER_SOURCE = r"""
/* A stand-in libcuda.so.1 for building kernels without a GPU (utilities/machinery/cpu_build.py). */
typedef int CUresult;
enum { OK = 0, NOT_FOUND = 500 };

CUresult cuDriverGetVersion(int *version) { *version = 13000; return OK; }
CUresult cuInit(unsigned int flags) { (void)flags; return OK; }
CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, unsigned long long flags) {
    (void)symbol; (void)version; (void)flags;
    if (pfn) *pfn = 0;
    return NOT_FOUND;
}
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, unsigned long long flags, int *status) {
    (void)symbol; (void)version; (void)flags;
    if (pfn) *pfn = 0;
    if (status) *status = 1; /* CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND */
    return NOT_FOUND;
}
CUresult cuGetExportTable(const void **table, const void *id) { (void)id; if (table) *table = 0; return NOT_FOUND; }
"""

_STATE: dict[str, Any] = {}


def target(text: str | None = None) -> tuple[int, int] | None:
    """The compute capability of ``text`` (``"9.0"``, ``"90"``, ``"sm_90"``, ``"sm_90a"``; default
    ``$COURSE_CPU_BUILD``), or None when it is empty."""
    text = (os.environ.get(ENV, "") if text is None else text).strip().lower().removeprefix("sm_").rstrip("a")
    if not text:
        return None
    major, _, minor = text.partition(".") if "." in text else (text[:-1], "", text[-1:])
    try:
        return int(major), int(minor)
    except ValueError:
        raise ValueError(f"a GPU architecture is sm_90 or 9.0, got {text!r}") from None


def _compiler() -> str | None:
    return next((c for c in (os.environ.get("CC"), "cc", "gcc", "clang") if c and shutil.which(c)), None)


def driver_library(directory: Path | None = None) -> Path:
    """The stand-in ``libcuda.so.1``, compiled from :data:`DRIVER_SOURCE` into ``directory`` (default: beside the
    build cache) unless it is there already."""
    if directory is None:
        from .buildcache.store import default_cache_dir

        directory = (default_cache_dir() or Path.home() / ".cache" / "tcfusion-course").parent / "tcfusion-stand-in"
    digest = hashlib.sha256(DRIVER_SOURCE.encode()).hexdigest()[:12]
    folder = Path(directory) / f"driver-{digest}"
    library = folder / "libcuda.so.1"
    if library.is_file():
        return library
    compiler = _compiler()
    if compiler is None:
        raise RuntimeError("a build without a GPU needs a C compiler (cc, gcc or clang) for its stand-in driver")
    folder.mkdir(parents=True, exist_ok=True)
    source = folder / "libcuda.c"
    source.write_text(DRIVER_SOURCE)
    partial = folder / f".libcuda.so.1.{os.getpid()}"
    cmd = [compiler, "-shared", "-fPIC", "-O1", "-Wl,-soname,libcuda.so.1", "-o", str(partial), str(source)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"could not compile the stand-in driver ({' '.join(cmd)}):\n{done.stderr[-2000:]}")
    os.replace(partial, library)
    return library


def unavailable() -> str | None:
    """Why kernels cannot be built on this machine's CPU (None when they can)."""
    if not versions.verified(NEEDS + ("numpy",)):
        found = ", ".join(f"{n} {v or 'missing'}" for n, v in versions.found(NEEDS + ("numpy",)).items())
        pinned = ", ".join(f"{n} {versions.PINS[n]}" for n in NEEDS + ("numpy",))
        return f"the GPU stack is not installed as pinned ({pinned}); found {found}"
    site = Path(sysconfig.get_paths()["purelib"])
    if not list(site.glob("nvidia/cu13/lib/libmathdx.so*")):
        return f"libmathdx is not in this interpreter's site-packages ({site}): cuda-pathfinder looks only there"
    if _compiler() is None:
        return "no C compiler (cc, gcc or clang) to build the stand-in CUDA driver"
    if not list(site.glob("nvidia/cu13/lib/libnvvm.so*")) and not list(site.glob("nvidia/cu13/nvvm/lib64/libnvvm*")):
        return "numba-cuda's NVVM is not installed (numba-cuda[cu13])"
    return None


def active() -> tuple[int, int] | None:
    """The compute capability this process builds for on its CPU (:func:`enter`), or None."""
    return _STATE.get("cc")


class _Memory:
    def __init__(self, *args: Any, **kwargs: Any):
        self.ptr = 0


class _DoesNothing:
    """Anything else asked of a stand-in stream, event or device (``wait_event``, ``record``...) does nothing."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *args, **kwargs: None


class _Stream(_DoesNothing):
    ptr = 0
    null = None

    def __init__(self, *args: Any, **kwargs: Any):
        pass

    def __enter__(self) -> _Stream:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def synchronize(self) -> None:
        return None

    def use(self) -> _Stream:
        return self


class _Event(_DoesNothing):
    def __init__(self, *args: Any, **kwargs: Any):
        pass

    def record(self, stream: Any = None) -> None:
        return None

    def synchronize(self) -> None:
        return None


class _Device(_DoesNothing):
    def __init__(self, device: int | None = None):
        self.id = 0

    @property
    def compute_capability(self) -> str:
        major, minor = _STATE["cc"]
        return f"{major}{minor}"

    @property
    def attributes(self) -> dict[str, int]:
        return dict(DEVICE_ATTRIBUTES)

    @property
    def mem_info(self) -> tuple[int, int]:
        """(free, total) bytes: the smaller sm_90 part's, an 80 GB H100 (Ozaki-II's digits="auto" asks)."""
        return MEMORY_BYTES, MEMORY_BYTES

    def synchronize(self) -> None:
        return None

    def use(self) -> None:
        return None

    def __enter__(self) -> _Device:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


class _Pool:
    def free_all_blocks(self) -> None:
        return None

    def used_bytes(self) -> int:
        return 0

    def total_bytes(self) -> int:
        return 0

    def free_bytes(self) -> int:
        return 0


def _no_gpu(what: str) -> Any:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{what} needs a GPU: this process builds kernels on the CPU ({ENV})")

    return refuse


class _Pointer:
    def __init__(self, ptr: int):
        self.ptr = ptr


class HostArray(np.ndarray):
    """A NumPy array that answers what the plans ask of a CuPy array: ``.data.ptr`` and ``.get()``."""

    @property
    def data(self) -> _Pointer:  # type: ignore[override]
        return _Pointer(int(self.ctypes.data))

    def get(self, *args: Any, **kwargs: Any) -> np.ndarray:
        return np.asarray(self)


def _host(value: Any) -> Any:
    if isinstance(value, np.ndarray) and not isinstance(value, HostArray):
        return value.view(HostArray)
    if isinstance(value, tuple):
        return tuple(_host(v) for v in value)
    return value


def _returning_host_arrays(fn: Any) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        return _host(fn(*args, **kwargs))

    call.__name__ = getattr(fn, "__name__", "call")
    return call


def _module(name: str, **attributes: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    for key, value in attributes.items():
        setattr(module, key, value)
    return module


def _nothing(name: str) -> Any:
    """A stand-in module's missing name: 0 for a constant (``CUBLAS_OP_T``), a function doing nothing otherwise."""
    if name.startswith("__"):
        raise AttributeError(name)
    return 0 if name.isupper() else (lambda *args, **kwargs: 0)


def _constant(name: str) -> int:
    """A stand-in module's missing constant (``CUDA_R_8I``): 0; any other missing name is missing, as CuPy's."""
    if name.isupper():
        return 0
    raise AttributeError(name)


def numpy_cupy() -> types.ModuleType:
    """A ``cupy`` module made of NumPy: array functions that return :class:`HostArray`, and a ``cuda`` namespace
    whose device, streams and events do nothing."""
    cupy = types.ModuleType("cupy", "NumPy standing in for CuPy in a CPU build (utilities.machinery.cpu_build)")
    cupy.__spec__ = importlib.machinery.ModuleSpec("cupy", None)  # importlib.util.find_spec asks for one
    runtime = _module(
        "cupy.cuda.runtime",
        __getattr__=_constant,
        deviceSynchronize=lambda: None,
        runtimeGetVersion=lambda: 13000,
        driverGetVersion=lambda: 13000,
        getDeviceCount=lambda: 1,
        getDeviceProperties=lambda device=0: {
            "name": b"CPU build",
            "major": _STATE["cc"][0],
            "minor": _STATE["cc"][1],
            "multiProcessorCount": DEVICE_ATTRIBUTES["MultiProcessorCount"],
            "sharedMemPerBlockOptin": DEVICE_ATTRIBUTES["MaxSharedMemoryPerBlockOptin"],
        },
    )
    cuda = _module(
        "cupy.cuda",
        Device=_Device,
        Stream=_Stream,
        Event=_Event,
        get_current_stream=lambda *a: _Stream(),
        get_elapsed_time=lambda *a: 0.0,
        runtime=runtime,
        UnownedMemory=_Memory,
        MemoryPointer=_Memory,
        alloc_pinned_memory=lambda size: bytearray(size),
        is_available=lambda: True,
        # cuBLAS (Ozaki-II's int8 products: utilities.cublas) does nothing; its constants are 0
        cublas=_module("cupy.cuda.cublas", __getattr__=_nothing),
        device=_module("cupy.cuda.device", get_cublas_handle=lambda: 0, Device=_Device),
    )
    random = types.SimpleNamespace(
        default_rng=lambda *a, **k: _Generator(np.random.default_rng(*a, **k)),
        RandomState=lambda *a, **k: _Generator(np.random.RandomState(*a, **k)),
    )
    names = {
        "cuda": cuda,
        "random": random,
        "ndarray": HostArray,
        "asnumpy": lambda a, *args, **kwargs: np.asarray(a),
        "get_default_memory_pool": _Pool,
        "get_default_pinned_memory_pool": _Pool,
        "ElementwiseKernel": _no_gpu("cupy.ElementwiseKernel"),
        "RawKernel": _no_gpu("cupy.RawKernel"),
        "__version__": f"numpy {np.__version__} (CPU build)",
    }
    for name, value in names.items():
        setattr(cupy, name, value)

    def attribute(name: str) -> Any:
        value = getattr(np, name)
        is_function = isinstance(value, types.FunctionType | types.BuiltinFunctionType | np.ufunc)
        return _returning_host_arrays(value) if is_function else value

    cupy.__getattr__ = attribute  # type: ignore[attr-defined]
    return cupy


class _Generator:
    """NumPy's random generator (or legacy ``RandomState``), handing out :class:`HostArray` of the ``dtype`` asked
    for, as CuPy's take one (NumPy's legacy methods do not)."""

    def __init__(self, generator: Any):
        self._generator = generator

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._generator, name)

        def call(*args: Any, dtype: Any = None, **kwargs: Any) -> Any:
            values = method(*args, **kwargs)
            return _host(values if dtype is None else np.asarray(values).astype(dtype))

        return call


class _NumbaDevice:
    """What numba's ``get_current_device()`` returns, for a device that is not there."""

    id = 0
    name = b"CPU build"

    @property
    def compute_capability(self) -> tuple[int, int]:
        return _STATE["cc"]

    MULTIPROCESSOR_COUNT = DEVICE_ATTRIBUTES["MultiProcessorCount"]
    MAX_THREADS_PER_MULTIPROCESSOR = DEVICE_ATTRIBUTES["MaxThreadsPerMultiProcessor"]
    MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = DEVICE_ATTRIBUTES["MaxSharedMemoryPerBlockOptin"]


class Unloaded:
    """Linked code in a CPU build (None when it only types kernels): what nvmath asks of it (``get_kernel``) names
    the kernel; nothing is loaded."""

    def __init__(self, code: Any):
        self.code_object = code
        self.code = None if code is None else code.code

    def get_kernel(self, name: str | bytes) -> str:
        return name.decode() if isinstance(name, bytes) else name


def linking() -> bool:
    """Whether this process links the kernels it builds (False: a CPU build that only types them, :func:`enter`)."""
    return bool(_STATE.get("link", True))


# (``module.kernel``, key) of each kernel a CPU build that only types kernels typed: the key of :func:`typed_key`
TYPED: list[tuple[str, str]] = []


def typed_key(library: Any) -> tuple[str, bool]:
    """The build cache's key of a kernel that was typed and not linked, and whether its modules gave the same key in
    other orders: what the key is made of (``buildcache.linking.cubin_key``), each piece of libmathdx code standing
    as its recipe's key, as in a linked kernel's key (no code was generated): the key a link would look up."""
    import random

    from .buildcache import canonical, generator_environment, linking, make_key
    from .buildcache.interposer import recipe_digest
    from .codegen_workers import PENDING, is_placeholder

    def digest(data: bytes) -> str:  # a placeholder names the recipe's cache key
        if is_placeholder(data):
            return recipe_digest(bytes(data[len(PENDING) :]).decode())
        return hashlib.sha256(data).hexdigest()

    recipe = linking.cubin_recipe(library, link_cc(), digest)
    key = make_key("cubin-named", recipe, generator_environment())
    linking.RECIPES[key] = recipe
    want = canonical.canonical_ir(library.llvm_strs, library._entry_name)
    same = True
    for seed in range(2):  # numba's order of the modules follows addresses: try two others
        modules = list(library.llvm_strs)
        random.Random(seed).shuffle(modules)
        same = same and canonical.canonical_ir(modules, library._entry_name) == want
    return key, same


def _typed(library: Any) -> None:
    if getattr(library, "_cpu_build_typed", False):
        return
    library._cpu_build_typed = True
    key, same = typed_key(library)
    from .buildcache.linking import qualified_name

    name = qualified_name(library._entry_name or "")
    TYPED.append((name, key if same else key + " (another order of its modules gave another key)"))


def link_cc() -> tuple[int, int, str]:
    """The target numba links for: (major, minor, "a") from sm_90 on, as numba-cuda's own ``_ensure_cc``."""
    major, minor = _STATE["cc"]
    return (major, minor, "a" if (major, minor) >= (9, 0) else "")


def link(kernel: Any, *args: Any) -> Any:
    """Type ``kernel`` for ``args`` and link it (through the build cache): what a launch would have built."""
    from .launch import compiled

    overload = compiled(kernel, *args)
    if not linking():
        return _typed(overload._codelibrary)
    return overload._codelibrary.get_cubin(link_cc())


def resources(threads: int, shared: int) -> dict[str, Any]:
    """``launch.resources`` without a device: blocks an SM by threads and shared memory alone (registers unknown,
    reported as 0). Plans size a persistent grid with it; the kernel's code does not depend on it."""
    warps = DEVICE_ATTRIBUTES["MaxThreadsPerMultiProcessor"] // 32
    by_threads = DEVICE_ATTRIBUTES["MaxThreadsPerMultiProcessor"] // max(threads, 1)
    by_shared = DEVICE_ATTRIBUTES["MaxSharedMemoryPerBlockOptin"] // max(shared, 1)
    blocks = min(by_threads, by_shared, 32)
    occupancy = blocks * threads / 32 / warps
    return {"registers": 0, "spills": 0, "smem": int(shared), "blocks_per_sm": blocks, "occupancy": occupancy}


def enter(cc: tuple[int, int] | None = None, *, link: bool = True) -> None:
    """Make this process build kernels for ``cc`` (default ``$COURSE_CPU_BUILD``) without a GPU (the module
    docstring says how). Call it before anything imports CuPy, numba.cuda or nvmath.device; idempotent.

    ``link=False`` only types the kernels: libmathdx generates no code, nothing is linked, and :data:`TYPED` gets
    each kernel's key (``tools/key_determinism.py --typing-only``: minutes instead of an hour for a kernel's first
    build on a small machine)."""
    if "cc" in _STATE:
        return
    cc = cc or target()
    if cc is None:
        raise ValueError(f"no GPU architecture to build for: pass one or set {ENV}=9.0")
    why = unavailable()
    if why:
        raise RuntimeError(f"cannot build kernels on this CPU: {why}")
    if "cupy" in sys.modules and not getattr(sys.modules["cupy"], "__version__", "").startswith("numpy"):
        raise RuntimeError("cpu_build.enter() must run before CuPy is imported")
    library = driver_library()
    ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL)  # found by its soname from now on, in this process
    folder = str(library.parent)  # ... and in the code generation workers, through the loader's path
    os.environ["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [folder, os.environ.get("LD_LIBRARY_PATH")]))
    os.environ[ENV] = f"{cc[0]}.{cc[1]}"
    _STATE["cc"], _STATE["link"] = cc, link
    cupy = sys.modules["cupy"] = numpy_cupy()
    for name in ("cuda", "cuda.cublas", "cuda.device", "cuda.runtime"):  # ``from cupy.cuda import cublas``
        module = cupy
        for part in name.split("."):
            module = getattr(module, part)
        sys.modules[f"cupy.{name}"] = module
    _patch_numba()
    _patch_nvmath()


def _patch_numba() -> None:
    import numba.cuda
    from numba.cuda import api, codegen, dispatcher

    device = _NumbaDevice()
    for module in (numba.cuda, api, dispatcher):
        module.get_current_device = lambda: device  # type: ignore[attr-defined]
    ensure = codegen.CUDACodeLibrary._ensure_cc
    codegen.CUDACodeLibrary._ensure_cc = lambda self, cc: ensure(self, cc or link_cc())

    def bind(self: Any) -> None:  # numba links a kernel when it is compiled: link it, load nothing
        if linking():
            self._codelibrary.get_cubin(link_cc())
        else:
            _typed(self._codelibrary)

    def launch(self: Any, args: Any, griddim: Any, blockdim: Any, stream: Any = 0, sharedmem: Any = 0) -> None:
        bind(self)

    dispatcher._Kernel.bind = bind
    dispatcher._Kernel.launch = launch


def _patch_nvmath() -> None:
    import nvmath.device  # noqa: F401 - its modules import the two functions by name: patch each copy
    from nvmath.device import common_cuda

    major, minor = _STATE["cc"]
    capability = common_cuda.ComputeCapability(major, minor, "a" if (major, minor) >= (9, 0) else "")
    stand_ins = {
        id(common_cuda.get_current_device_cc): lambda: capability,
        id(common_cuda.get_default_code_type): lambda: common_cuda.CodeType("lto", capability),
    }
    for name, module in list(sys.modules.items()):
        if name.startswith("nvmath.") and module is not None:
            for attribute, value in list(vars(module).items()):
                if id(value) in stand_ins:
                    setattr(module, attribute, stand_ins[id(value)])

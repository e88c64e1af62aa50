"""Device pipelines whose build does not depend on the problem shape: one kernel build serves every shape.

Why: nvmath-python 1.0.0 describes a ``DevicePipeline``'s global A and B to libmathdx with their concrete shapes
and strides, and the pipeline's numba type carries them. Every problem shape is then a new type, new libmathdx
code and a new nvJitLink link: a minute or more for a kernel already built at another shape.
libmathdx itself takes run-time extents (``LIBMATHDX_RUNTIME`` in a tensor's shape or strides): the generated
code then reads them from the pipeline's device storage, which the pipeline's init kernel writes from the
tensors it is given. So :func:`device_pipeline` describes A and B with every extent and every non-unit stride
marked run-time. What is left in the type and the code is what a build must know: element type, rank, which
stride is 1, the tile and the depth.

How: :class:`ShapeGenericPipeline` is an nvmath ``DevicePipeline`` (numba types it, and every overload accepts
it), made by hand: its views report the marked extents to nvmath, and its init kernel passes the real ones.
It reaches into nvmath internals, so :func:`device_pipeline` uses it only for the versions pinned in
``utilities.machinery.versions``; with others it makes nvmath's own pipeline (one build per shape) and warns once.

A new shape then costs seconds, and the kernel runs as fast as with nvmath's pipeline, bit for bit the same
output (``tools/pipeline_speed.py``; the figures: ``results/nvidia-h100-80gb-hbm3-builds.md`` and
``instructor-notes/machinery.md``).

Two things to know. numba interns the pipeline's type by name, so every pipeline of one kernel shares the type
made for the first one. And nvmath builds a pipeline's destroy kernel when a pipeline is first freed, which may be
in the middle of a later build (it was, in a measured edit: ``instructor-notes/machinery.md``): the destroy code
is requested when the pipeline is made, so that the build cache's workers generate it beside the first build.

A guard band: the pipeline's storage is allocated with :data:`STORAGE_GUARD` bytes more than libmathdx's
``STORAGE_BYTES`` says, filled with a pattern, and checked after the init kernel ran: a write past the storage
lands there instead of in another buffer, and a warning says how far it went. (It was added when 3b's products went
wrong in a way that followed where a plan's buffers were; the cause was a write past a buffer in CuPy's memory pool,
which a band after nvmath's storage cannot see: ``instructor-notes/ozaki.md``.)

Only :func:`device_pipeline` needs a GPU (or a CPU build, ``utilities.machinery.cpu_build``: the pipeline is then
described and its init and destroy kernels linked, with no storage and no launch); the helpers above it are plain
Python.
"""

from __future__ import annotations

import functools
import os
import warnings
import weakref
from typing import Any, NamedTuple

from . import cpu_build, versions

RUNTIME = -(2**63)  # libmathdx's LIBMATHDX_RUNTIME: "this extent is known at run time"
STORAGE_GUARD = 4096  # bytes past a pipeline's storage, filled with GUARD_BYTE and checked after its init kernel
GUARD_BYTE = 0xA5


def guard_overwritten(guard: bytes) -> int:
    """How far into the guard band something wrote: the offset just past the last byte that is not the pattern."""
    changed = [i for i, b in enumerate(guard) if b != GUARD_BYTE]
    return changed[-1] + 1 if changed else 0


class Extents(NamedTuple):
    """A global tensor as its init kernel is given it, and as the pipeline's code sees it (``marked``): every
    extent and every stride but the unit one run-time (the unit stride stays: it decides how the pipeline loads,
    and it is the same for every shape of one kernel)."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]

    @property
    def marked_shape(self) -> tuple[int, ...]:
        return (RUNTIME,) * len(self.shape)

    @property
    def marked_strides(self) -> tuple[int, ...]:
        return tuple(1 if s == 1 else RUNTIME for s in self.strides)

    @property
    def counts(self) -> tuple[int, int]:
        """How many strides and how many extents are run-time: all that the init kernel's source depends on."""
        return self.marked_strides.count(RUNTIME), len(self.shape)

    def runtime_values(self) -> tuple[list[int], list[int]]:
        """The values of the run-time strides and extents, in order: what the init kernel passes for them."""
        return [s for s in self.strides if s != 1], list(self.shape)


def extents(shape: tuple[int, ...], strides: tuple[int, ...]) -> Extents:
    """An operand's :class:`Extents` (:func:`settled_strides`), refused with the reason if a pipeline cannot take it."""
    if len(shape) != len(strides):
        raise ValueError(f"shape {shape} and strides {strides} differ in rank")
    strides = settled_strides(shape, strides)
    if 1 not in strides:
        raise ValueError(f"a pipeline operand needs one unit stride (a contiguous dimension), got strides {strides}")
    return Extents(tuple(int(e) for e in shape), tuple(int(s) for s in strides))


def settled_strides(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[int, ...]:
    """``strides`` with the stride of each dimension of extent 1 replaced by the span of the others (the stride it
    would have in a batch of more): no index ever multiplies it, and array exporters write it differently. NumPy's
    DLPack reports no strides for A0 (1, M, K0) seen as (M, K0, 1), which is C-contiguous once extents of one are
    ignored, so :func:`contiguous_strides` made the batch stride 1, a second unit stride, where an exporter that
    keeps the array's own strides gives M K0: two marked tensors, two recipes, two kernels, one built on the CPU for
    the bundle and another on the GPU. Settled, a batch of one is marked as a batch of many and builds its kernel."""
    if len(shape) != len(strides):
        raise ValueError(f"shape {shape} and strides {strides} differ in rank")
    span = max((int(s) * int(e) for s, e in zip(strides, shape, strict=True) if e != 1), default=1)
    return tuple(int(s) if e != 1 else span for s, e in zip(strides, shape, strict=True))


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return tuple(reversed(strides))


# libmathdx 0.3.2's by-value tensor argument (libcublasdx.h, cublasdxCreateTensorStrided): the pointer, then the
# run-time extents, then the run-time strides
FIELDS = ("shape", "strides")


def tensor_struct(strides: int, shape: int) -> tuple[str, str]:
    """libmathdx's by-value tensor argument with ``strides`` run-time strides and ``shape`` run-time extents: its
    name and C++ definition."""
    name = f"libmathdx_tensor_{strides}s_{shape}s"
    counts = {"shape": shape, "strides": strides}
    fields = ["void* ptr;", *(f"long long {f}[{counts[f]}];" for f in FIELDS if counts[f])]
    return name, f"struct {name} {{ {' '.join(fields)} }};"


def init_kernel_source(symbol: str, a: tuple[int, int], b: tuple[int, int]) -> str:
    """C++ of the kernel that runs libmathdx's pipeline ``create`` function ``symbol`` for operands a and b, with
    ``(strides, extents)`` run-time values each (:attr:`Extents.counts`).

    Parameters: the pipeline's storage, then for each operand its pointer, run-time strides and extents.
    """
    structs: dict[str, str] = {}
    params, setup, names = ["void* storage"], [], []
    for tag, (n_strides, n_shape) in (("a", a), ("b", b)):
        name, definition = tensor_struct(n_strides, n_shape)
        structs[name] = definition
        names.append(name)
        params.append(f"void* {tag}_ptr")
        params += [f"long long {tag}_s{i}" for i in range(n_strides)]
        params += [f"long long {tag}_e{i}" for i in range(n_shape)]
        setup.append(f"    {name} {tag}; {tag}.ptr = {tag}_ptr;")
        setup += [f"    {tag}.strides[{i}] = {tag}_s{i};" for i in range(n_strides)]
        setup += [f"    {tag}.shape[{i}] = {tag}_e{i};" for i in range(n_shape)]
    return "\n".join(
        [
            "struct libmathdx_pipeline { void* ptr; };",
            *structs.values(),
            f'extern "C" __device__ void {symbol}(libmathdx_pipeline, {names[0]}, {names[1]});',
            f'extern "C" __global__ void create_shape_generic_pipeline({", ".join(params)}) {{',
            *setup,
            f"    {symbol}(libmathdx_pipeline{{storage}}, a, b);",
            "}",
            "",
        ]
    )


def init_kernel_arguments(a: Extents, b: Extents, a_ptr: int, b_ptr: int) -> list[Any]:
    """The init kernel's arguments after the storage, in :func:`init_kernel_source`'s order."""
    import numpy as np

    args: list[Any] = []
    for ptr, ext in ((a_ptr, a), (b_ptr, b)):
        strides, shape = ext.runtime_values()
        args += [int(ptr), *(np.int64(v) for v in strides), *(np.int64(v) for v in shape)]
    return args


SWITCH = "COURSE_SHAPE_GENERIC"  # "off": nvmath's own pipelines (one build per shape), e.g. to compare


def supported() -> bool:
    """Whether the installed stack is the one these internals were verified with."""
    return versions.verified(versions.SHAPE_GENERIC_PIPELINE)


def switched_off() -> bool:
    return os.environ.get(SWITCH, "").lower() in {"off", "0", "false", "no"}


def device_pipeline(MM: Any, depth: int, a: Any, b: Any) -> Any:
    """``MM.suggest_device_pipeline(depth, a, b)``, built once for every shape of ``a`` and ``b``.

    With another stack than the verified one: nvmath's own pipeline (a build per shape), and a warning once; the
    same, silently, with ``COURSE_SHAPE_GENERIC=off``.
    """
    if switched_off():
        return MM.suggest_device_pipeline(depth, a, b)
    if not supported():
        versions.fall_back(
            "shape-generic device pipelines (utilities.machinery.pipelines)",
            versions.SHAPE_GENERIC_PIPELINE,
            "each problem shape builds its kernel again",
        )
        return MM.suggest_device_pipeline(depth, a, b)
    return _pipeline_class()(MM, depth, a, b)


class _View(NamedTuple):
    """What nvmath reads of an operand's ``StridedMemoryView``: the dtype, and the marked shape."""

    dtype: Any
    shape: tuple[int, ...]
    ptr: int
    device_id: int


@functools.cache
def _pipeline_class() -> type:
    import cupy
    import numpy as np
    from cuda.core import Device, LaunchConfig, LinkerOptions, Program, ProgramOptions, launch
    from cuda.core.utils import StridedMemoryView
    from nvmath.bindings import mathdx
    from nvmath.device import cublasdx, cublasdx_backend
    from nvmath.device.common_cuda import get_current_device_cc, get_default_code_type

    class ShapeGenericPipeline(cublasdx.DevicePipeline):
        """nvmath's ``DevicePipeline`` with run-time extents (see the module docstring)."""

        def __init__(self, mm: Any, pipeline_depth: int, a: Any, b: Any):  # noqa: D107 - nvmath's __init__ replaced
            if get_current_device_cc().major < 9:
                raise RuntimeError("device pipelines need compute capability 9.0 or newer (an H100, H200, B200...)")
            self.mm, self.pipeline_depth = mm, pipeline_depth
            views = [StridedMemoryView.from_any_interface(x, stream_ptr=-1) for x in (a, b)]
            on_cpu = cpu_build.active() is not None  # a CPU build: no device, no storage, nothing launched
            device = None if on_cpu else Device(None)
            for name, view in zip("ab", views, strict=True):
                if device is not None and view.device_id != device.device_id:
                    raise ValueError(f"operand {name!r} is not on the current CUDA device {device.device_id}")
            if device is not None:
                device.set_current()
            shapes = [tuple(v.shape) for v in views]
            strides = [
                tuple(v.strides) if v.strides is not None else contiguous_strides(s)
                for v, s in zip(views, shapes, strict=True)
            ]
            self._extents = (extents(shapes[0], strides[0]), extents(shapes[1], strides[1]))
            self._a_view, self._b_view = (
                _View(v.dtype, e.marked_shape, int(v.ptr), v.device_id)
                for v, e in zip(views, self._extents, strict=True)
            )
            self.a_strides, self.b_strides = (e.marked_strides for e in self._extents)
            h = cublasdx._blas_device_pipeline_handle(self)
            trait = functools.partial(mathdx.cublasdx_get_pipeline_trait_int64, h)
            self._storage_bytes = int(trait(mathdx.CublasdxPipelineTrait.STORAGE_BYTES))
            self._storage_alignment_bytes = int(trait(mathdx.CublasdxPipelineTrait.STORAGE_ALIGNMENT_BYTES))
            self._buffer_size = int(trait(mathdx.CublasdxPipelineTrait.BUFFER_SIZE))
            self._buffer_alignment_bytes = int(trait(mathdx.CublasdxPipelineTrait.BUFFER_ALIGNMENT_BYTES))
            block_dim = np.zeros(3, dtype=np.int64)
            mathdx.cublasdx_get_pipeline_trait_int64s(
                h, mathdx.CublasdxPipelineTrait.BLOCK_DIM, 3, block_dim.ctypes.data
            )
            self._block_dim = cublasdx.Dim3(*block_dim.tolist())
            mm_handle = cublasdx._blas_tensors_handle(mm)
            if device is None:  # what the GPU's first use links, linked here: the init and destroy kernels
                _init_code(mm_handle, h, self._extents[0].counts, self._extents[1].counts)
                _request_destroy_code(mm_handle, h)
                cublasdx_backend._compile_blas_device_pipeline_destroy_kernel(mm_handle, h, get_default_code_type())
                self._storage, self._finalizer = None, None
                return
            self._storage = device.allocate(self._storage_bytes + STORAGE_GUARD, stream=device.default_stream)
            guard = self.guard_band()
            guard.fill(GUARD_BYTE)
            cupy.cuda.Device().synchronize()
            kernel = _init_kernel(mm_handle, h, self._extents[0].counts, self._extents[1].counts)
            _request_destroy_code(mm_handle, h)
            args = init_kernel_arguments(*self._extents, self._a_view.ptr, self._b_view.ptr)
            launch(device.default_stream, LaunchConfig(grid=(1,), block=(1,)), kernel, int(self._storage.handle), *args)
            device.default_stream.sync()
            past = guard_overwritten(bytes(guard.get()))
            if past:
                warnings.warn(
                    f"shape-generic pipeline: its init kernel wrote {past} bytes past the {self._storage_bytes} bytes "
                    f"of storage libmathdx asked for (the {STORAGE_GUARD}-byte guard band took them); report the "
                    "versions you use",
                    stacklevel=2,
                )
            self._finalizer = weakref.finalize(
                self, cublasdx.DevicePipeline._destruct_kernel_execute, mm_handle, h, self._storage, device
            )

        def guard_band(self) -> Any:
            """The :data:`STORAGE_GUARD` bytes past the storage, as a CuPy byte array (see the module docstring)."""
            memory = cupy.cuda.UnownedMemory(
                int(self._storage.handle) + self._storage_bytes, STORAGE_GUARD, self._storage
            )
            return cupy.ndarray(STORAGE_GUARD, cupy.uint8, cupy.cuda.MemoryPointer(memory, 0))

        @property
        def shapes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
            """The operands' real shapes (nvmath's views report the run-time marks)."""
            return self._extents[0].shape, self._extents[1].shape

    @functools.cache
    def _request_destroy_code(mm_handle: int, pipeline_handle: int) -> None:
        """Ask for the destroy kernel's libmathdx code now: with the build cache it is generated in a worker beside
        this build, not in the middle of whatever build runs when the pipeline is freed."""
        cublasdx_backend._compile_blas_device_pipeline_destroy(mm_handle, pipeline_handle, get_default_code_type())

    @functools.cache
    def _init_kernel(mm_handle: int, pipeline_handle: int, a: tuple[int, int], b: tuple[int, int]) -> Any:
        """nvmath's pipeline init kernel, with the operands' run-time extents as arguments (one per marking)."""
        return _init_code(mm_handle, pipeline_handle, a, b).get_kernel("create_shape_generic_pipeline")

    @functools.cache
    def _init_code(mm_handle: int, pipeline_handle: int, a: tuple[int, int], b: tuple[int, int]) -> Any:
        """The init kernel's linked code (a cubin)."""
        code_type = get_default_code_type()
        lto, symbol = cublasdx_backend._compile_blas_device_pipeline_init(mm_handle, pipeline_handle, code_type)
        cc = code_type.cc
        arch = f"sm_{cc.major}{cc.minor}{cc.arch}"
        # the backend's ObjectCode and Linker: the build cache resolves and caches them (buildcache.install)
        create = cublasdx_backend.ObjectCode.from_ltoir(lto.data)
        program = Program(
            init_kernel_source(symbol, a, b),
            code_type="c++",
            options=ProgramOptions(link_time_optimization=True, arch=arch),
        )
        options = LinkerOptions(link_time_optimization=True, arch=arch)
        return cublasdx_backend.Linker(program.compile(target_type="ltoir"), create, options=options).link("cubin")

    return ShapeGenericPipeline

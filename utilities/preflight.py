"""What this machine can run, and how to fix what it cannot: the table at the top of every notebook.

``probe()`` gathers the facts (GPU through the CUDA driver API, package versions, libmathdx); the small
pure functions below judge them, so that tests can feed fake machines. ``nvmath.device`` is never imported:
it raises where there is no CUDA driver.

In a notebook, a preflight that fails also stops every later cell of the kernel before it runs, with one line that
says why (:func:`stop_later_cells`): a cell run by hand after the stop would otherwise fail on a name the
preflight's cell never defined (``NameError: name 'cp' is not defined``). A cell that calls ``preflight`` again
still runs (it probes anew, and a pass lifts the stop), and so does a ``reveal`` cell, which needs no GPU.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import os
import re
import site
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .machinery.versions import PINS  # the stack verified together on an H100 (README, "GPU")

LIBMATHDX_DISTS = ("nvidia-libmathdx-cu13", "nvidia-libmathdx-cu12")
CUPY_DISTS = ("cupy-cuda13x", "cupy-cuda12x", "cupy")
COURSE_MIN_CC = (8, 0)
SUPPORTED_SMS = (80, 86, 89, 90, 100, 103, 120)
NVMATH_CC_FALLBACK = ((7, 0), (12, 1))  # MIN/MAX_SUPPORTED_CC of nvmath-python 1.0.0
NUMPY_LIMIT = (2, 5)
CPU_PARTS = (
    "the CPU notebooks 3a_ozaki_numerics and 4a_ozaki2_numerics and all NumPy references and tests (./course test)"
)
GPU_TRACKS = ("1 (multi-pass)", "2 (block fusion)", "3 (Ozaki-I)", "4 (Ozaki-II)")
INSTALL_MATHDX = f'pip install "nvidia-libmathdx-cu13=={PINS["nvidia-libmathdx-cu13"]}"'


class PreflightError(RuntimeError):
    """This machine cannot run what the notebook needs; the message names the problem and the fix.

    In a notebook it shows as that message alone, not as a traceback through this module (IPython asks an
    exception for ``_render_traceback_``): the cell still fails, so "Run All", nbval and the GPU suite stop there.
    """

    def _render_traceback_(self) -> list[str]:
        return [f"This notebook cannot run on this machine. {self}"]


@dataclass(frozen=True)
class Gpu:
    name: str
    cc: tuple[int, int]


@dataclass(frozen=True)
class Facts:
    """Everything probed about the machine; tests build fake ones."""

    gpus: tuple[Gpu, ...] = ()
    gpu_problem: str = ""  # why no GPU was found ("" when one was)
    cuda_driver: int | None = None  # cuDriverGetVersion, e.g. 13000
    driver_release: str | None = None  # e.g. "580.159.04"
    runtimes: dict[str, str] = field(default_factory=dict)  # CUDA runtime/compiler used by each package
    versions: dict[str, str | None] = field(default_factory=dict)  # distribution -> version (None: missing)
    libmathdx_path: str | None = None  # where the loader (cuda-pathfinder) finds libmathdx.so.0
    libmathdx_elsewhere: str | None = None  # a copy the loader does not search (PYTHONPATH)
    nvmath_cc: tuple[tuple[int, int], tuple[int, int]] = NVMATH_CC_FALLBACK
    cudasim: bool = False


@dataclass(frozen=True)
class Environment:
    """The verdict of ``preflight``: facts, which tracks can run, and warnings."""

    facts: Facts
    tracks: dict[str, str]
    warnings: tuple[str, ...]

    @property
    def gpu(self) -> Gpu | None:
        return self.facts.gpus[0] if self.facts.gpus else None

    def table(self) -> str:
        return format_table(self.facts, self.tracks, self.warnings)

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        gpu = self.gpu
        return f"Environment(gpu={gpu.name if gpu else None!r}, warnings={len(self.warnings)})"

    def _ipython_display_(self) -> None:
        """Nothing: ``preflight()`` printed the table already (a notebook cell ending in it shows no repr)."""


# --- pure judgements ------------------------------------------------------------------------------------


def _release(version: str | None) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version or "")[:3])


def cuda_version(code: int | None) -> str:
    """13000 -> "13.0"."""
    return "-" if code is None else f"{code // 1000}.{code % 1000 // 10}"


def version_problems(versions: dict[str, str | None], require_gpu: bool) -> list[str]:
    """Errors about the packages: numpy missing or too new, and (with ``require_gpu``) every GPU package the
    table shows missing (numba, numba-cuda, CuPy, nvmath-python), each with the pin to install."""
    problems = []
    numpy = versions.get("numpy")
    if not numpy:
        problems.append(f'numpy is not installed. Fix: pip install "numpy=={PINS["numpy"]}" (or ./course test).')
    elif _release(numpy)[:2] >= NUMPY_LIMIT:
        problems.append(
            f"numpy {numpy} is installed, but numba-cuda {PINS['numba-cuda']} cannot be imported with numpy >= 2.5. "
            f'Fix: pip install "numpy<2.5" ({PINS["numpy"]} verified).'
        )
    if not require_gpu:
        return problems
    for names, what, pin, needed in GPU_PACKAGES:
        if not any(versions.get(name) for name in names):
            problems.append(
                f'{what} is not installed ({needed}). Fix: pip install "{pin}=={PINS[pin]}" (or ./course lab).'
            )
    return problems


# The GPU packages the table shows: the distributions that provide each, its name, the pin to install, what needs it.
GPU_PACKAGES = (
    (("numba",), "numba", "numba", "numba-cuda compiles the kernels with it"),
    (("numba-cuda",), "numba-cuda", "numba-cuda", "every kernel of the course is a numba-cuda kernel"),
    (CUPY_DISTS, "CuPy", "cupy-cuda13x", "the notebooks hold their arrays on the GPU with it"),
    (("nvmath-python",), "nvmath-python", "nvmath-python", "its device APIs build the cuBLASDx tiles"),
)
DRIVER_CUDA = 13000  # the CUDA the pinned wheels are built for: a driver of version 580 or newer


def driver_problems(facts: Facts) -> list[str]:
    """Errors about the driver: one whose CUDA is older than the pinned wheels' (13), where a GPU was found."""
    if not facts.gpus or facts.cuda_driver is None or facts.cuda_driver >= DRIVER_CUDA:
        return []
    release = f" {facts.driver_release}" if facts.driver_release else ""
    return [
        f"the NVIDIA driver{release} supports CUDA {cuda_version(facts.cuda_driver)}; the course's packages are built "
        f"for CUDA {cuda_version(DRIVER_CUDA)}. Fix: install a driver for CUDA 13 (version 580 or newer)."
    ]


def gpu_problems(facts: Facts) -> list[str]:
    """Errors about the GPU: none found, compute capability outside what the course and nvmath-python support."""
    supported = ", ".join(f"sm_{sm}" for sm in SUPPORTED_SMS)
    if not facts.gpus:
        return [
            f"No NVIDIA GPU: {facts.gpu_problem or 'none found'}. Fix: run on a machine with an NVIDIA GPU "
            f"({supported}) and a driver for CUDA 13 (>= 580). Without a GPU, {CPU_PARTS} still run."
        ]
    gpu = facts.gpus[0]
    low, high = max(COURSE_MIN_CC, facts.nvmath_cc[0]), facts.nvmath_cc[1]
    cc = f"{gpu.cc[0]}.{gpu.cc[1]}"
    if gpu.cc < low:
        return [
            f"{gpu.name} has compute capability {cc}; the course needs {low[0]}.{low[1]} or newer (int8 and FP64 "
            f"tensor cores). Fix: use a GPU of {supported}."
        ]
    if gpu.cc > high:
        return [
            f"{gpu.name} has compute capability {cc}, above what nvmath-python {PINS['nvmath-python']} supports (up to "
            f"{high[0]}.{high[1]}). Fix: use a GPU of {supported}, or a newer nvmath-python that supports it."
        ]
    return []


def mathdx_problems(facts: Facts) -> list[str]:
    """Errors about libmathdx, which nvmath.device needs to build cuBLASDx kernels."""
    if facts.libmathdx_path:
        return []
    if facts.libmathdx_elsewhere:
        return [
            f"libmathdx.so.0 is at {facts.libmathdx_elsewhere}, where cuda-pathfinder does not look (it ignores "
            f"PYTHONPATH). Fix: {INSTALL_MATHDX} into this interpreter's own site-packages ({sys.executable} -m pip)."
        ]
    return [f"libmathdx.so.0 cannot be found (nvmath.device needs it). Fix: {INSTALL_MATHDX} (or ./course lab)."]


def pin_warnings(facts: Facts) -> list[str]:
    """Warnings: versions that differ from the verified pins, a GPU outside the verified set."""
    notes = [
        f"{name} {facts.versions[name]} differs from the verified {pin}"
        for name, pin in PINS.items()
        if facts.versions.get(name) and facts.versions[name] != pin
    ]
    if facts.gpus and not gpu_problems(facts):
        gpu = facts.gpus[0]
        if gpu.cc[0] * 10 + gpu.cc[1] not in SUPPORTED_SMS:
            notes.append(f"compute capability {gpu.cc[0]}.{gpu.cc[1]} is not one the course was verified on")
    driver = _release(cuda_version(facts.cuda_driver))[:1]
    newer = [f"{key} {value}" for key, value in facts.runtimes.items() if driver and _release(value)[:1] > driver]
    if newer:  # a newer minor version is fine (CUDA minor version compatibility), a newer major is not
        notes.append(
            f"the CUDA of {', '.join(newer)} is newer than this driver's CUDA {cuda_version(facts.cuda_driver)}: "
            "install a driver for CUDA 13 (>= 580)"
        )
    if facts.cudasim:
        notes.append("NUMBA_ENABLE_CUDASIM=1: numba-cuda kernels run in the simulator, not on the GPU")
    return notes


def track_status(facts: Facts) -> dict[str, str]:
    """Which parts of the course can run here: "yes" or "no: <short reasons>"."""
    versions = facts.versions
    if not facts.gpus:
        missing = ["no NVIDIA GPU"]
    else:
        gpu = facts.gpus[0]
        missing = [f"compute capability {gpu.cc[0]}.{gpu.cc[1]}"] if gpu_problems(facts) else []
        missing += [f"driver for CUDA {cuda_version(facts.cuda_driver)}"] if driver_problems(facts) else []
    checks = [
        (_release(versions.get("numpy"))[:2] >= NUMPY_LIMIT, "numpy >= 2.5"),
        (not versions.get("numba"), "numba missing"),
        (not versions.get("numba-cuda"), "numba-cuda missing"),
        (not any(versions.get(name) for name in CUPY_DISTS), "cupy missing"),
        (not versions.get("nvmath-python"), "nvmath-python missing"),
        (not facts.libmathdx_path, "libmathdx.so.0 not found"),
    ]
    missing += [reason for failed, reason in checks if failed]
    gpu_verdict = "no: " + ", ".join(missing) if missing else "yes"
    cpu_verdict = "yes" if versions.get("numpy") else "no: numpy missing"
    return {"CPU notebooks 3a, 4a": cpu_verdict} | {f"track {name}": gpu_verdict for name in GPU_TRACKS}


def problems_for(facts: Facts, require_gpu: bool = True, require_mathdx: bool = True) -> list[str]:
    """Every error that stops the notebook, in the order to fix them."""
    problems = version_problems(facts.versions, require_gpu)
    if require_gpu:
        problems += gpu_problems(facts)
        problems += driver_problems(facts)
        if require_mathdx:
            problems += mathdx_problems(facts)
    return problems


def runtime_line(runtimes: dict[str, str]) -> str:
    """The CUDA version each package reports, e.g. ``CUDA 13.2 (cupy runtime), CUDA 13.0 (NVRTC)``.

    cupy and cuda-bindings link the CUDA runtime into themselves, so the version they report is the CUDA they were
    built with, not a library on this machine. Written as ``cupy 13.2`` it read as a version of cupy, one line above
    ``cupy 14.2.0``: the version goes first, the package after it, in parentheses."""
    names = {"nvrtc": "NVRTC"}
    return ", ".join(f"CUDA {v} ({names.get(k, k + ' runtime')})" for k, v in runtimes.items()) or "-"


def format_table(facts: Facts, tracks: dict[str, str], warnings: tuple[str, ...] | list[str] = ()) -> str:
    """The short table printed at the top of every notebook."""
    gpu = facts.gpus[0] if facts.gpus else None
    rows = [
        ("GPU", f"{gpu.name} ({len(facts.gpus)} visible)" if gpu else f"none ({facts.gpu_problem or 'not found'})"),
        ("compute capability", f"{gpu.cc[0]}.{gpu.cc[1]}" if gpu else "-"),
        ("driver", f"{facts.driver_release or '-'}, CUDA {cuda_version(facts.cuda_driver)}"),
        ("CUDA of packages", runtime_line(facts.runtimes)),
    ]
    rows += [(name, facts.versions.get(name) or "missing") for name in ("numpy", "numba", "numba-cuda")]
    rows.append(("cupy", next((facts.versions[n] for n in CUPY_DISTS if facts.versions.get(n)), "missing")))
    rows.append(("nvmath-python", facts.versions.get("nvmath-python") or "missing"))
    mathdx = next((facts.versions[n] for n in LIBMATHDX_DISTS if facts.versions.get(n)), "missing")
    rows.append(("libmathdx", f"{mathdx}, libmathdx.so.0: {facts.libmathdx_path or 'not found'}"))
    rows += [(f"can run {name}", verdict) for name, verdict in tracks.items()]
    width = max(len(key) for key, _ in rows)
    lines = [f"{key:<{width}}  {value}" for key, value in rows]
    lines += [f"warning: {note}" for note in warnings]
    return "\n".join(lines)


def nvmath_cc_range(source: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """MIN_SUPPORTED_CC and MAX_SUPPORTED_CC from the text of nvmath/device/common_cuda.py."""
    found = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and len(node.value.args) >= 2:
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id in ("MIN_SUPPORTED_CC", "MAX_SUPPORTED_CC"):
                    found[target.id] = tuple(ast.literal_eval(arg) for arg in node.value.args[:2])
    if len(found) != 2:
        raise ValueError("MIN_SUPPORTED_CC or MAX_SUPPORTED_CC not found")
    return found["MIN_SUPPORTED_CC"], found["MAX_SUPPORTED_CC"]


# --- probes (touch the machine) ---------------------------------------------------------------------------


def probe_gpus() -> tuple[tuple[Gpu, ...], str, int | None]:
    """GPUs seen by the CUDA driver API, why none (or ""), and the driver's CUDA version."""
    try:
        from cuda.bindings import driver
    except ImportError:
        return (), "cuda-bindings is not installed", None
    try:
        (status,) = driver.cuInit(0)
    except Exception:  # the bindings raise when libcuda.so.1 cannot be loaded
        return (), "no CUDA driver: libcuda.so.1 not found", None
    ok = driver.CUresult.CUDA_SUCCESS
    if status != ok:
        return (), f"cuInit failed with {status.name}", None
    status, version = driver.cuDriverGetVersion()
    status, count = driver.cuDeviceGetCount()
    if status != ok or count == 0:
        return (), "the CUDA driver sees no device", version
    attribute = driver.CUdevice_attribute
    gpus = []
    for ordinal in range(count):
        _, device = driver.cuDeviceGet(ordinal)
        _, name = driver.cuDeviceGetName(256, device)
        _, major = driver.cuDeviceGetAttribute(attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device)
        _, minor = driver.cuDeviceGetAttribute(attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device)
        gpus.append(Gpu(name.split(b"\0")[0].decode(errors="replace"), (major, minor)))
    return tuple(gpus), "", version


def probe_driver_release() -> str | None:
    """The kernel driver's version, e.g. "580.159.04" (Linux)."""
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return None
    match = re.search(r"Kernel Module(?: for \w+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
    return match[1] if match else None


def probe_runtimes() -> dict[str, str]:
    """CUDA versions of the runtime and compiler that numba-cuda (cuda-bindings, NVRTC) and cupy use."""
    found = {}
    try:
        from cuda.bindings import nvrtc, runtime

        status, code = runtime.cudaRuntimeGetVersion()
        if status == runtime.cudaError_t.cudaSuccess:
            found["cuda-bindings"] = cuda_version(code)
        status, major, minor = nvrtc.nvrtcVersion()
        if status == nvrtc.nvrtcResult.NVRTC_SUCCESS:
            found["nvrtc"] = f"{major}.{minor}"
    except Exception:  # missing package or library: left out of the table
        pass
    if any(_version(name) for name in CUPY_DISTS):
        try:
            import cupy

            found["cupy"] = cuda_version(cupy.cuda.runtime.runtimeGetVersion())
        except Exception:
            pass
    return found


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def probe_versions() -> dict[str, str | None]:
    names = ["numpy", "numba", "numba-cuda", "nvmath-python", *CUPY_DISTS, *LIBMATHDX_DISTS]
    return {name: _version(name) for name in names}


def _libmathdx_in(directories: list[str]) -> str | None:
    for directory in directories:
        hits = sorted(Path(directory).glob("nvidia/*/lib/libmathdx.so*")) if Path(directory).is_dir() else []
        if hits:
            return str(hits[0])
    return None


def probe_libmathdx() -> tuple[str | None, str | None]:
    """libmathdx.so.0 where the loader finds it (cuda-pathfinder, as nvmath does), and a copy elsewhere."""
    own = [*site.getsitepackages(), site.getusersitepackages()]
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib
    except ImportError:
        found = _libmathdx_in(own)
    else:
        try:
            found = load_nvidia_dynamic_lib("mathdx").abs_path
        except Exception:  # DynamicLibNotFoundError and kin
            found = None
    elsewhere = None if found else _libmathdx_in([p for p in sys.path if p and p not in own])
    return found, elsewhere


def probe_nvmath_cc() -> tuple[tuple[int, int], tuple[int, int]]:
    """nvmath-python's supported compute capabilities, read from its source without importing nvmath.device."""
    try:
        spec = importlib.util.find_spec("nvmath")
        locations = list(spec.submodule_search_locations or []) if spec else []
        return nvmath_cc_range((Path(locations[0]) / "device" / "common_cuda.py").read_text())
    except (IndexError, OSError, ValueError, SyntaxError):
        return NVMATH_CC_FALLBACK


def probe() -> Facts:
    """The facts of this machine."""
    gpus, problem, driver_version = probe_gpus()
    libmathdx, elsewhere = probe_libmathdx()
    return Facts(
        gpus=gpus,
        gpu_problem=problem,
        cuda_driver=driver_version,
        driver_release=probe_driver_release(),
        runtimes=probe_runtimes(),
        versions=probe_versions(),
        libmathdx_path=libmathdx,
        libmathdx_elsewhere=elsewhere,
        nvmath_cc=probe_nvmath_cc(),
        cudasim=os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"),
    )


def judge(facts: Facts, require_gpu: bool = True, require_mathdx: bool = True) -> Environment:
    """The Environment of these facts; raises PreflightError listing every problem with its fix."""
    problems = problems_for(facts, require_gpu, require_mathdx)
    if problems:
        raise PreflightError("Preflight failed:\n" + "\n".join(f"- {problem}" for problem in problems))
    return Environment(facts, track_status(facts), tuple(pin_warnings(facts)))


# calls that a cell after a failed preflight may still make: the preflight itself, and the solution's reveal
STILL_RUNS = ("preflight", "reveal")
_GUARD = "_course_preflight_guard"


def stopped_message(problems: list[str]) -> str:
    """The line every cell after a failed preflight shows instead of running."""
    first = problems[0].split(" Fix:")[0].rstrip(".") if problems else "the preflight failed"
    if first.startswith("No NVIDIA GPU"):
        why = first.split(": ", 1)[1] if ": " in first else "none found"
        return f"Not run: this cell needs an NVIDIA GPU, and the preflight found none ({why})."
    return f"Not run: this cell needs what the preflight found missing ({first}). Fix it, then run the preflight again."


def _calls(tree: ast.AST, names: tuple[str, ...]) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name in names:
                return True
    return False


def _ipython() -> object | None:
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


def release_later_cells() -> None:
    """Lift the stop of :func:`stop_later_cells` (nothing to do outside IPython or without one)."""
    shell = _ipython()
    if shell is not None:
        shell.ast_transformers[:] = [t for t in shell.ast_transformers if not getattr(t, _GUARD, False)]


def stop_later_cells(message: str) -> bool:
    """In an IPython kernel, make every later cell fail before it runs, showing ``message`` alone (no traceback),
    except cells that call one of :data:`STILL_RUNS`; returns whether a kernel was there to stop. The stop is an
    AST transformer that raises IPython's ``InputRejected``, the one way to refuse a cell before any of it runs."""
    shell = _ipython()
    if shell is None:
        return False
    from IPython.core.error import InputRejected

    class StoppedByPreflight(InputRejected):
        def _render_traceback_(self) -> list[str]:
            return [message]

    class Guard(ast.NodeTransformer):
        def visit_Module(self, node: ast.Module) -> ast.Module:
            if _calls(node, STILL_RUNS):
                return node
            raise StoppedByPreflight(message)

    guard = Guard()
    setattr(guard, _GUARD, True)
    release_later_cells()
    shell.ast_transformers.append(guard)
    return True


def preflight(require_gpu: bool = True, require_mathdx: bool = True, quiet: bool = False) -> Environment:
    """Probe this machine, print the table, and fail fast with the fix when the notebook cannot run; in a notebook
    the cells after a failed preflight then stop with one line that says why (:func:`stop_later_cells`).

    ``require_mathdx`` applies with ``require_gpu`` only: libmathdx serves the GPU kernels.
    """
    facts = probe()
    try:
        environment = judge(facts, require_gpu, require_mathdx)
    except PreflightError:
        if not quiet:
            print(format_table(facts, track_status(facts)))
        stop_later_cells(stopped_message(problems_for(facts, require_gpu, require_mathdx)))
        raise
    release_later_cells()
    if not quiet:
        print(environment.table())
    return environment


if __name__ == "__main__":
    try:
        preflight(require_gpu=False)
    except PreflightError as error:
        sys.exit(str(error))

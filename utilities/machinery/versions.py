"""The GPU stack verified together, in one place, and the guard around every reach into private internals.

``PINS`` is the stack of the README's table and of ``pyproject.toml``'s ``gpu`` extra (a test keeps the three
equal). Each piece of machinery that touches another library's internals names the distributions it depends on
and asks :func:`verified` first; with any other version it takes the public (slower) path, and
:func:`fall_back` says so once per piece, naming what was found. Plain Python: importable anywhere.
"""

from __future__ import annotations

import functools
import importlib.metadata
import warnings

# distribution -> version, verified together on an H100 (driver 580.159.04)
PINS = {
    "numpy": "2.3.5",
    "numba": "0.68.0",
    "numba-cuda": "0.30.4",
    "cupy-cuda13x": "14.2.0",
    "nvmath-python": "1.0.0",
    "nvidia-libmathdx-cu13": "0.3.2.6",
}
# what each piece of machinery reaches into
BUILD_CACHE = ("nvmath-python", "nvidia-libmathdx-cu13", "numba-cuda")  # libmathdx binding, numba's linker
ALIGNED_COPY = ("nvmath-python",)  # nvmath's layout and descriptor classes
FAST_LAUNCH = ("numba-cuda",)  # numba's kernel argument layout and its compiled-kernel objects
SWIZZLE = ("nvmath-python", "nvidia-libmathdx-cu13")  # the suggested shared-memory layout, written by hand
SHAPE_GENERIC_PIPELINE = ("nvmath-python", "nvidia-libmathdx-cu13")  # DevicePipeline internals, run-time extents
PADDED_LAYOUTS = ("nvmath-python", "nvidia-libmathdx-cu13")  # the tensor API's handle, with a leading dimension

_warned: set[str] = set()


def installed(distribution: str) -> str | None:
    """The installed version of a distribution, None if it is not installed (read once per process: the fast launch
    asks on every launch, and ``importlib.metadata`` scans the installed packages each time it is asked)."""
    return _metadata_version(distribution)


@functools.cache
def _metadata_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def found(distributions: tuple[str, ...]) -> dict[str, str | None]:
    """The installed versions of ``distributions``."""
    return {name: installed(name) for name in distributions}


def verified(distributions: tuple[str, ...]) -> bool:
    """Whether every one of ``distributions`` is installed at its pinned version."""
    return all(found(distributions)[name] == PINS[name] for name in distributions)


def fall_back(what: str, distributions: tuple[str, ...], fallback: str) -> None:
    """Warn once that ``what`` is off because ``distributions`` are not the pinned versions, and what runs instead."""
    if what in _warned:
        return
    _warned.add(what)
    pinned = ", ".join(f"{name} {PINS[name]}" for name in distributions)
    seen = ", ".join(f"{name} {version or 'missing'}" for name, version in found(distributions).items())
    warnings.warn(f"{what} is off: verified with {pinned}, found {seen}; {fallback}", stacklevel=3)

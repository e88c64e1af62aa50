"""Where what runs beside a check may run: a check's race run and the builds of its contract's other blocks run only
where the check's own kernels ran on a GPU, and each has a switch that turns it off (``checker``,
``contract_builds``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any


def kernels_off_gpu(environ: Mapping[str, str] | None = None, modules: Mapping[str, Any] | None = None) -> str:
    """Why the check's kernels did not run on a GPU here ("" when they did): numba's simulator ran them on the CPU,
    numba-cuda was never imported, or there is no GPU. What runs beside a check (its race run, the builds of its
    contract's other blocks) runs only where they did."""
    environ = os.environ if environ is None else environ
    modules = sys.modules if modules is None else modules
    if environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
        return "numba's CUDA simulator ran the kernels, on the CPU"
    cuda = modules.get("numba.cuda")
    if cuda is None:
        return "no kernel ran on a GPU (numba.cuda was never imported)"
    try:
        return "" if cuda.is_available() else "no GPU"
    except Exception:  # a driver that cannot start
        return "no GPU"


def switched_off(name: str, environ: Mapping[str, str]) -> bool:
    """Whether the environment variable ``name`` turns its switch off: 0, off, no or false, any case."""
    return environ.get(name, "").strip().lower() in ("0", "off", "no", "false")

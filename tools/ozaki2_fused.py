"""Which multiply-adds the Ozaki-II reconstruction kernel fuses on a GPU, read from its PTX (no GPU needed).

numba-cuda's NVVM contracts ``a * b + c`` into one ``fma.rn.f64`` wherever it can, and numba's simulator never
does: a kernel whose C the simulator matches with the NumPy reference bit for bit matches it on the GPU only if
every fused multiply-add is written in the source as ``fma`` (which the simulator rounds once, as the GPU) and the
compiler fuses nothing else. This prints, for each build of ``simt.make_reconstruct_kernel`` (digits read early
and late, a few counts, sm_80 and sm_90), one JSON line:

- ``fused``: the ``fma.rn.f64`` of the kernel as the course builds it;
- ``explicit``: the same kernel built with the source's ``fma`` as ``fma.rz.f64`` (libdevice's ``fma_rz``), a
  marker: how many of them the source asks for;
- ``implicit``: the ``fma.rn.f64`` left in that build, which the compiler made of a plain ``a * b + c``;
- ``fused_f32``: any FP32 multiply-add (none is expected).

Late digits are built twice more: with the digit of each int32 product as the course's ``make_digit`` (whose
nearest-multiple step the compiler fuses: exact integers either way, compared bit for bit by the digits' tests)
and with a stand-in without arithmetic (``digit stand-in``): the reconstruction's own contractions.

Used by tests/test_ozaki2_rounding.py, which requires ``fused == explicit > 0`` and no implicit contraction but
inside ``digit``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numba.cuda.dispatcher  # noqa: E402
from numba import cuda, types  # noqa: E402
from numba.cuda import libdevice  # noqa: E402

from utilities.ozaki2 import simt  # noqa: E402

# numba-cuda asks the current device for its compute capability when it compiles a device function called from a
# kernel; without a GPU, answer with the target being compiled for (as tools/compile_kernels.py does).
TARGET = SimpleNamespace(compute_capability=(9, 0))
numba.cuda.dispatcher.get_current_device = lambda: TARGET

COUNTS = (2, 15, 20)
TARGETS = ((8, 0), (9, 0))


@cuda.jit(device=True, inline=True)
def marked_fma(a, b, c):
    """A fused multiply-add the PTX tells apart: rounded toward zero (``fma.rz.f64``)."""
    return libdevice.fma_rz(a, b, c)


def no_digit(count: int) -> Any:
    """A stand-in for ``simt.make_digit``: the product itself, no arithmetic."""

    @cuda.jit(device=True)
    def digit(v, t):
        return v

    return digit


def signature(from_products: bool) -> tuple:
    f64_2d, i32_1d = types.float64[:, ::1], types.int32[::1]
    planes = types.int32[:, :, ::1] if from_products else types.uint8[:, :, ::1]
    return (planes, i32_1d, i32_1d, f64_2d, f64_2d, types.float64, types.float64, f64_2d, f64_2d)


def ptx_of(count: int, from_products: bool, cc: tuple[int, int], fma: Any = None, digit: Any = None) -> str:
    """The PTX of a fresh build of the reconstruction kernel, with ``simt.fma`` (read when numba compiles the
    kernel) and the digit factory replaced where given."""
    TARGET.compute_capability = cc
    saved = simt.fma
    if fma is not None:
        simt.fma = fma
    try:
        factory = simt.make_reconstruct_kernel.__wrapped__  # not the cached build
        kernel = factory(count, from_products, digit or simt.make_digit)
        ptx, _ = cuda.compile_ptx(kernel.py_func, signature(from_products), cc=cc)
    finally:
        simt.fma = saved
    return ptx


def count_of(ptx: str, instruction: str) -> int:
    return len(re.findall(rf"^\s*{re.escape(instruction)}\s", ptx, re.MULTILINE))


def contractible(ptx: str) -> int:
    """How many ``add.f64`` or ``sub.f64`` take a plain ``mul.f64``'s result: the PTX assembler may fuse each such
    pair into one FMA (PTX's rule for ``mul``/``add`` without a rounding modifier), whatever NVVM left unfused."""
    products = set(re.findall(r"^\s*mul\.f64\s+(%fd\d+),", ptx, re.MULTILINE))
    sums = re.findall(r"^\s*(?:add|sub)\.f64\s+%fd\d+,\s*([^;]+);", ptx, re.MULTILINE)
    return sum(1 for operands in sums for x in operands.split(",") if x.strip() in products)


def nvdisasm() -> str | None:
    """The ``nvdisasm`` of the pip package nvidia-cuda-nvdisasm (or ``$NVDISASM``, or on PATH), None if absent."""
    if os.environ.get("NVDISASM"):
        return os.environ["NVDISASM"]
    try:
        import nvidia.cu13  # noqa: PLC0415

        for root in nvidia.cu13.__path__:
            if (Path(root) / "bin" / "nvdisasm").is_file():
                return str(Path(root) / "bin" / "nvdisasm")
    except ImportError:
        pass
    return shutil.which("nvdisasm")


def sass_fmas(ptx: str, cc: tuple[int, int], tool: str) -> int:
    """How many FP64 FMAs (``DFMA``) the machine code has: the PTX assembled by nvJitLink for ``cc``, disassembled."""
    from cuda.bindings import nvjitlink  # noqa: PLC0415

    handle = nvjitlink.create(1, [f"-arch=sm_{cc[0]}{cc[1]}"])
    try:
        data = ptx.encode()
        nvjitlink.add_data(handle, nvjitlink.InputType.PTX, data, len(data), "reconstruct.ptx")
        nvjitlink.complete(handle)
        cubin = bytearray(nvjitlink.get_linked_cubin_size(handle))
        nvjitlink.get_linked_cubin(handle, cubin)
    finally:
        nvjitlink.destroy(handle)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        sass = subprocess.run([tool, f.name], capture_output=True, text=True, check=True).stdout
    return len(re.findall(r"\bDFMA\b", sass))


def report(count: int, from_products: bool, cc: tuple[int, int], digit: Any = None) -> dict[str, Any]:
    """One build's counts: ``fused`` in the course's build, ``explicit`` and ``implicit`` in the marked one."""
    kernel = "reconstruct, digits read late" if from_products else "reconstruct, digits read early"
    marked = ptx_of(count, from_products, cc, fma=marked_fma, digit=digit)
    course = ptx_of(count, from_products, cc, digit=digit)
    tool = nvdisasm()
    return {
        "kernel": kernel + (", digit stand-in" if digit is not None else ""),
        "count": count,
        "target": f"sm_{cc[0]}{cc[1]}",
        "fused": count_of(course, "fma.rn.f64"),
        "explicit": count_of(marked, "fma.rz.f64"),
        "implicit": count_of(marked, "fma.rn.f64"),
        "fused_f32": count_of(marked, "fma.rn.f32"),
        "contractible": contractible(course),
        "sass_fused": sass_fmas(course, cc, tool) if tool else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, action="append", help=f"a count of moduli (default: {COUNTS})")
    parser.add_argument("--sm", type=int, action="append", help="a target, 80 or 90 (default: both)")
    args = parser.parse_args()
    targets = [(sm // 10, sm % 10) for sm in args.sm] if args.sm else TARGETS
    for cc in targets:
        for count in args.count or COUNTS:
            print(json.dumps(report(count, False, cc)))
            print(json.dumps(report(count, True, cc)))
            print(json.dumps(report(count, True, cc, digit=no_digit)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

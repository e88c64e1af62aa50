"""Compile the course's plain numba kernels to PTX for several GPUs, without a GPU (real numba, no simulator).

Catches what the simulator cannot: typing errors (non-constant shapes, unsupported calls) in kernels that
only ever run on a device. Used by tests/test_tooling_compile_kernels.py; prints one line per kernel and target.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

os.environ.pop("NUMBA_ENABLE_CUDASIM", None)

from types import SimpleNamespace  # noqa: E402

import numba.cuda.dispatcher  # noqa: E402
from numba import cuda, types  # noqa: E402

from utilities import precision_gpu as stats  # noqa: E402
from utilities.machinery import cp_async  # noqa: E402
from utilities.ozaki import simt as kernels  # noqa: E402
from utilities.ozaki2 import simt as kernels2  # noqa: E402

# numba-cuda asks the current device for its compute capability when it compiles a device function called
# from a kernel; without a GPU, answer with the target being compiled for.
TARGET = SimpleNamespace(compute_capability=(9, 0))
numba.cuda.dispatcher.get_current_device = lambda: TARGET

WAIT_ONE = cp_async.wait_prior(1)


@cuda.jit
def cp_async_groups_kernel(x):
    """Two commits and a wait for all but the newest group: the persistent back-to-back kernel's pattern."""
    cp_async.commit()
    cp_async.commit()
    WAIT_ONE()
    x[0] = 1.0


f64_2d, i32_3d, i32_1d, f64_1d = types.float64[:, ::1], types.int32[:, :, ::1], types.int32[::1], types.float64[::1]
i64_1d, i64_2d, i64_3d, f64_3d = types.int64[::1], types.int64[:, ::1], types.int64[:, :, ::1], types.float64[:, :, ::1]
u8_1d = types.uint8[::1]
STATS = (f64_2d, i64_2d, f64_2d, i64_2d, i32_1d)
CHOICE2 = stats.make_choice_kernels(kernels2.line_offset)
CHOICE1 = stats.make_choice_kernels(kernels.choice_offset)
KERNELS = {
    "slice_rows_kernel": (kernels.make_slice_rows_kernel(8192, 8192, 7), (f64_2d, i32_3d, i32_1d)),
    "col_max_kernel": (kernels.make_col_max_kernel(), (f64_2d, f64_1d, i32_1d)),
    "shifts_from_max_kernel": (kernels.shifts_from_max_kernel, (f64_1d, i32_1d, i32_1d)),
    "slice_cols_kernel": (kernels.make_slice_cols_kernel(7), (f64_2d, i32_1d, i32_3d)),
    "slice_cols_kernel, 12 slices": (kernels.make_slice_cols_kernel(12), (f64_2d, i32_1d, i32_3d)),
    "ozaki_epilogue_kernel": (
        kernels.make_epilogue_kernel(),
        (types.int32[:, :, ::1], i32_1d, i32_1d, i32_1d, types.float64, types.float64, f64_2d, f64_2d),
    ),
    "cp_async_groups_kernel": (cp_async_groups_kernel, (f64_1d,)),
    "ozaki2 residue_rows_kernel, 15 moduli": (
        kernels2.make_residue_rows_kernel(8192, 8192, 15),
        (f64_2d, i32_3d, i32_1d),
    ),
    "ozaki2 residue_rows_kernel, 20 moduli": (
        kernels2.make_residue_rows_kernel(8192, 8192, 20),
        (f64_2d, i32_3d, i32_1d),
    ),
    "ozaki2 residue_known_rows_kernel, 15 moduli": (
        kernels2.make_residue_known_rows_kernel(8192, 8192, 15),
        (f64_2d, i64_2d, i32_3d, i32_1d),
    ),
    "ozaki2 transpose_kernel": (kernels2.make_transpose_kernel(), (f64_2d, f64_2d)),
    "ozaki2 residue_cols_kernel, 15 moduli": (
        kernels2.make_residue_cols_kernel(15),
        (f64_2d, i64_2d, i32_3d, i32_1d),
    ),
    "ozaki2 residue_cols_kernel, 20 moduli": (
        kernels2.make_residue_cols_kernel(20),
        (f64_2d, i64_2d, i32_3d, i32_1d),
    ),
    "ozaki2 digits_kernel, 15 moduli": (kernels2.make_digits_kernel(15), (i32_1d, types.int64, u8_1d)),
    "ozaki2 residue_values_kernel, 20 moduli (the checker's)": (
        kernels2.make_residue_values_kernel(20),
        (f64_1d, types.float64[:, ::1]),
    ),
    "ozaki2 reconstruct_kernel, 15 moduli": (
        kernels2.make_reconstruct_kernel(15),
        (types.uint8[:, :, ::1], i32_1d, i32_1d, f64_2d, f64_2d, types.float64, types.float64, f64_2d, f64_2d),
    ),
    "ozaki2 reconstruct_kernel from products, 15 moduli": (
        kernels2.make_reconstruct_kernel(15, True),
        (i32_3d, i32_1d, i32_1d, f64_2d, f64_2d, types.float64, types.float64, f64_2d, f64_2d),
    ),
    "row_stats_kernel": (stats.make_row_stats_kernel(8192, 8192), (f64_2d, f64_1d, f64_2d, i64_2d, i32_1d)),
    "row_stats_kernel, weights staged": (
        stats.make_row_stats_kernel(8192, 8192, staged=True),
        (f64_2d, f64_1d, f64_2d, i64_2d, i32_1d),
    ),
    "col_chunk_kernel": (stats.make_col_chunk_kernel(), (f64_2d, f64_1d, f64_3d, i64_3d)),
    "col_chunk_kernel, norms only": (stats.make_col_chunk_kernel(False, False), (f64_2d, f64_1d, f64_3d, i64_3d)),
    "row_stats_kernel, norms only": (
        stats.make_row_stats_kernel(8192, 8192, weighted=False, terms=False),
        (f64_2d, f64_1d, f64_2d, i64_2d, i32_1d),
    ),
    "col_combine_kernel": (stats.col_combine_kernel, (f64_3d, i64_3d, f64_2d, i64_2d, i32_1d)),
    "normalize_kernel": (stats.normalize_kernel, (f64_2d, i64_2d, i32_1d, f64_1d)),
    "choice sums_kernel, Ozaki-II": (CHOICE2[0], (*STATS, i64_1d, types.int64, f64_2d)),
    "choice ratios_kernel, Ozaki-II": (CHOICE2[1], (*STATS, i64_1d, f64_1d, types.int64, f64_2d, f64_2d)),
    "choice pick_kernel": (CHOICE2[2], (f64_2d, types.float64, f64_1d)),
    "choice ratios_kernel, Ozaki-I": (CHOICE1[1], (*STATS, i64_1d, f64_1d, types.int64, f64_2d, f64_2d)),
}


def main() -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    for cc in ((8, 0), (9, 0)):
        TARGET.compute_capability = cc
        for name, (kernel, sig) in KERNELS.items():
            ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=cc)
            extra = ""
            if name == "cp_async_groups_kernel":  # the two instructions, as written
                commits, waits = ptx.count("cp.async.commit_group;"), ptx.count("cp.async.wait_group 1;")
                extra = f", {commits} commit_group, {waits} wait_group 1"
            if name.startswith(("ozaki2 residue_rows_kernel", "ozaki2 residue_known_rows_kernel")):
                ties = len(re.findall(r"setp\.gt\.f64\s+%p\d+, %fd\d+, 0d405FC00000000000;", ptx))
                extra = f", {ties} tie tests (r > 127)"  # only p = 256 has ties: one test an entry of a run
            if name.startswith(("row_stats_kernel", "ozaki2 residue_rows_kernel")):  # a chunk's reductions
                found = [ptx.count(f"redux.sync.{op} ") for op in ("max.s32", "add.u32")]
                extra += f", redux: {found[0]} max, {found[1]} add"
            if name == "ozaki_epilogue_kernel":  # how C = alpha x + beta c rounds (utilities.rounding.epilogue_bound)
                steps = re.findall(r"^\s*((?:mul|fma|add|sub)(?:\.rn)?\.f64)\s", ptx, re.MULTILINE)
                extra = f", C from {' then '.join(steps[-2:])}"
            print(f"{name} sm_{cc[0]}{cc[1]}: {len(ptx)} bytes of PTX{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

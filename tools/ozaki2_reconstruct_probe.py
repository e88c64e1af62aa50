"""Developer tool (issue 43): what bounds Ozaki-II's reconstruction, its loads or its arithmetic, and what its loop
over the moduli costs.

Run on a GPU: ``python tools/ozaki2_reconstruct_probe.py [--size 8192] [--moduli 15] [--repeats 10] [--json F]``.

A plan with fixed moduli runs once on random operands (its int32 products, digits and shifts are then real), and
each kernel below is timed alone (CUDA events, ``utilities.bench``) on those buffers, late (int32 products, each
reduced to its CRT digit in the kernel) and early (uint8 digits):

- ``course``: ``simt.make_reconstruct_kernel``, one entry a thread, blocks of 32 x 8, its loop over the moduli
  written out (``utilities.written_out``: the body once a modulus, ``t`` a literal in each, no table loads);
- ``loop kept`` (late): the course's source with its loop kept (``tools/unrolled_variants.py``, ``looped_simt``: the
  course's kernel before 2026-11-30); ``unrolled by numba``: the loop over ``numba.cuda.literal_unroll``. Each
  one's C must equal the course kernel's bit for bit;
- ``loads only``: the planes read and summed as integers, one store: the floor of this access pattern;
- ``arithmetic only``: one plane read, its value reduced and summed as for every modulus: the arithmetic alone;
  ``integer arithmetic only``: the same with each digit found in 32-bit integers (:func:`make_integer_digit`, one
  multiply-high a reduction) instead of FP64.

Beside each: the bytes it moves at this run's copy rate (its floor) and how far the time is from it. Retired after
the runs of 2026-11-29 (``results/nvidia-h200-ozaki2-reconstruct-probe.json`` holds their rows): the whole kernel
with integer digits, the loop written out by hand from a template, and two and four entries a thread.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
from numba import cuda, float64, int32, int64, uint32  # noqa: E402  (module globals: the simulator swaps them)
from numba.cuda import libdevice  # noqa: E402

BLOCK = (32, 8)


def integer_tables(count: int) -> dict[str, np.ndarray]:
    """The constants of :func:`make_integer_digit`, per modulus: p, y, 2^16 mod p, ceil(2^32 / p), p - (2^31 mod p)."""
    from utilities.ozaki2 import simt

    ps = [int(p) for p in simt.tables(count)["p"]]
    ys = [int(y) for y in simt.tables(count)["y"]]
    return {
        "p": np.array(ps, np.uint32),
        "y": np.array(ys, np.uint32),
        "m16": np.array([pow(2, 16, p) for p in ps], np.uint32),
        "magic": np.array([-(-(2**32) // p) for p in ps], np.uint32),
        "shift": np.array([p - pow(2, 31, p) for p in ps], np.uint32),
    }


def make_integer_digit(count: int):
    """``digit(v, t)``: the CRT digit of the int32 product v in [0, p) as a double, in 32-bit integer arithmetic
    (one multiply-high a reduction, no FP64 operation but the exact conversion of a byte)."""
    T = integer_tables(count)
    P, Y, M16, MAGIC, SHIFT = T["p"], T["y"], T["m16"], T["magic"], T["shift"]

    @cuda.jit(device=True)
    def digit(v, t):
        w = uint32(v) ^ uint32(0x80000000)
        x = uint32(uint32(w >> uint32(16)) * M16[t] + uint32(w & uint32(0xFFFF)))
        r = uint32(x - uint32(libdevice.umulhi(x, MAGIC[t]) * P[t]))
        u = uint32(uint32(r + SHIFT[t]) * Y[t])
        u = uint32(u - uint32(libdevice.umulhi(u, MAGIC[t]) * P[t]))
        return libdevice.hiloint2double(int32(0x43300000), int32(u)) - 4503599627370496.0  # 2^52 + u, exact

    return digit


def diagnostics(count: int, late: bool):
    """The two halves of the reconstruction alone: its loads (summed as integers) and its arithmetic (one plane)."""
    from utilities.ozaki2 import simt
    from utilities.simt import fma

    T = simt.tables(count)
    N, C1 = count, T["c1"]
    digit = simt.make_digit(count)

    @cuda.jit
    def loads_only(planes, out):
        j, i = cuda.grid(2)
        if i >= out.shape[0] or j >= out.shape[1]:
            return
        s = int64(0)
        for t in range(N):
            s += int64(planes[t, i, j])
        out[i, j] = float64(s)

    @cuda.jit
    def arithmetic_only(planes, out):
        j, i = cuda.grid(2)
        if i >= out.shape[0] or j >= out.shape[1]:
            return
        v = float64(planes[0, i, j])
        s = 0.0
        for t in range(N):
            u = digit(v + t, t) if late else v + t
            s = fma(u, C1[t], s)
        out[i, j] = s

    integer = make_integer_digit(count)

    @cuda.jit
    def integer_arithmetic_only(planes, out):
        j, i = cuda.grid(2)
        if i >= out.shape[0] or j >= out.shape[1]:
            return
        v = planes[0, i, j]
        s = 0.0
        for t in range(N):
            s = fma(integer(v + t, t), C1[t], s)
        out[i, j] = s

    return loads_only, arithmetic_only, integer_arithmetic_only


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=8192, help="m = n = k (default 8192)")
    parser.add_argument("--moduli", type=int, default=15)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    import cupy as cp  # after the arguments: --help needs no GPU

    from utilities import bench, inputs
    from utilities.machinery import launch
    from utilities.ozaki2 import simt
    from utilities.ozaki2.tensorcore import Ozaki2Gemm
    from utilities.peaks import measure_copy_bandwidth

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import unrolled_variants

    size, count = args.size, args.moduli
    a, b = cp.asarray(inputs.normal(size, size, 0)), cp.asarray(inputs.normal(size, size, 1))
    c = cp.asarray(inputs.normal(size, size, 2))
    copy_tbs = measure_copy_bandwidth()
    rows: list[dict] = []
    for late in (True, False):
        plan = Ozaki2Gemm(size, size, size, count, digits="late" if late else "early")
        want = cp.empty((size, size))
        plan(a, b, c, 1.0, 0.5, out=want)
        planes = plan.products_buffer[:count] if late else plan.digits[:count]
        scalars = (1.0, 0.5)
        moved = planes.nbytes + 2 * want.nbytes  # the planes, C read (beta != 0) and written
        out = cp.empty_like(want)
        kernels: dict[str, tuple] = {}
        course = simt.reconstruct_launch(size, size, count, from_products=late)
        kernels["course"] = (
            course.kernel,
            course.grid,
            course.block,
            (planes, plan.mu, plan.nu, a, b, *scalars, c, out),
        )
        grid = (-(-size // BLOCK[0]), -(-size // BLOCK[1]))
        if late:
            by_numba = unrolled_variants.unrolled_simt()["make_reconstruct_kernel"](count, True)
            kernels["unrolled by numba"] = (by_numba, grid, BLOCK, kernels["course"][3])
            looped = unrolled_variants.looped_simt()["make_reconstruct_kernel"](count, True)
            kernels["loop kept"] = (looped, grid, BLOCK, kernels["course"][3])
        loads, arithmetic, integer_arithmetic = diagnostics(count, late)
        kernels["loads only"] = (loads, grid, BLOCK, (planes, out))
        kernels["arithmetic only"] = (arithmetic, grid, BLOCK, (planes, out))
        if late:
            kernels["integer arithmetic only"] = (integer_arithmetic, grid, BLOCK, (planes, out))
        for name, (kernel, grid, block, kargs) in kernels.items():
            out.fill(cp.nan)
            launch.launch(kernel, grid, block, 0, *kargs)
            same = None
            if name in ("course", "unrolled by numba", "loop kept"):
                same = bool(cp.array_equal(out, want))
            record = bench.bench(
                lambda kernel=kernel, grid=grid, block=block, kargs=kargs: launch.launch(
                    kernel, grid, block, 0, *kargs
                ),
                m=size,
                n=size,
                k=size,
                name=name,
                repeats=args.repeats,
                bytes_moved=moved,
            )
            bytes_here = moved if "arithmetic only" not in name else planes.nbytes // count + want.nbytes
            floor_ms = bytes_here / (copy_tbs * 1e12) * 1e3
            rows.append(
                {
                    "digits": "late" if late else "early",
                    "kernel": name,
                    "ms": record.time.median,
                    "floor_ms": floor_ms,
                    "bytes": bytes_here,
                    "equal_to_plan": same,
                }
            )
        del plan
        cp.get_default_memory_pool().free_all_blocks()
    print(f"{size}^2 C, {count} moduli, copy rate {copy_tbs:.2f} TB/s (bytes moved / rate = floor)")
    print(f"{'digits':<6} {'kernel':<16} {'ms':>8} {'floor ms':>9} {'x floor':>8} {'C as the plan':>14}")
    for r in rows:
        same = "-" if r["equal_to_plan"] is None else ("yes" if r["equal_to_plan"] else "NO")
        print(
            f"{r['digits']:<6} {r['kernel']:<16} {r['ms']:8.3f} {r['floor_ms']:9.3f} "
            f"{r['ms'] / r['floor_ms']:8.2f} {same:>14}"
        )
    if args.json:
        from ozaki2_scaling_probe import report_head

        head = report_head("ozaki2_reconstruct_probe.py")
        Path(args.json).write_text(
            json.dumps({**head, "size": size, "moduli": count, "copy_tbs": copy_tbs, "rows": rows}, indent=1) + "\n"
        )


if __name__ == "__main__":
    main()

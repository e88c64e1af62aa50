"""Developer tool (issue 43): what bounds Ozaki-II's reconstruction, its loads or its arithmetic, and whether more
entries a thread help.

Run on a GPU: ``python tools/ozaki2_reconstruct_probe.py [--size 8192] [--moduli 15] [--repeats 10] [--json F]``.

A plan with fixed moduli runs once on random operands (its int32 products, digits and shifts are then real), and
each kernel below is timed alone (CUDA events, ``utilities.bench``) on those buffers, late (int32 products, each
reduced to its CRT digit in the kernel) and early (uint8 digits):

- ``course``: ``simt.make_reconstruct_kernel``, one entry a thread, blocks of 32 x 8;
- ``entries=E``: the same arithmetic, E entries of a row a thread (columns ``j + 32 e``, still coalesced), so that
  each thread has E independent chains in flight; its C must equal the course kernel's bit for bit;
- ``loads only``: the planes read and summed as integers, one store: the floor of this access pattern;
- ``arithmetic only``: one plane read, its value reduced and summed as for every modulus: the arithmetic alone.

Beside each: the bytes it moves at this run's copy rate (its floor) and how far the time is from it.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from numba import cuda, float64, int64  # noqa: E402  (module globals: numba's simulator swaps them in a kernel)

BLOCK = (32, 8)


def entries_factory(entries: int):
    """``factory(count, from_products=False)``: the course's reconstruction with ``entries`` columns a thread."""
    from utilities.operands import NONFINITE_SHIFT
    from utilities.ozaki2 import reference as ref
    from utilities.ozaki2 import simt
    from utilities.simt import fma, scale2

    def factory(count: int, from_products: bool = False):
        T = simt.tables(count)
        N, LATE, E, TX = count, from_products, entries, BLOCK[0]
        C1, C2, C3 = T["c1"], T["c2"], T["c3"]
        crt = ref.crt(count)
        P_HI, P_LO = crt.product_hi, crt.product_lo
        digit = simt.make_digit(count)

        @cuda.jit(device=True)
        def finish(s1, s2, s3, shift, alpha, beta, c, i, j, out):
            q = math.floor(s1 + 0.5)
            a = s1 - q
            h = a + s2
            back = h - a
            low = ((a - (h - back)) + (s2 - back)) + s3
            value = fma(h, P_HI, fma(low, P_HI, h * P_LO))
            value = alpha * scale2(value, shift)
            if beta != 0.0:
                value = fma(beta, c[i, j], value)
            out[i, j] = value

        @cuda.jit
        def kernel(planes, mu, nu, a, b, alpha, beta, c, out):
            i = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
            j0 = cuda.blockIdx.x * (TX * E) + cuda.threadIdx.x
            if i >= out.shape[0]:
                return
            sums = cuda.local.array((3, E), float64)
            for e in range(E):
                sums[0, e] = 0.0
                sums[1, e] = 0.0
                sums[2, e] = 0.0
            for t in range(N):
                for e in range(E):
                    j = j0 + TX * e
                    if j < out.shape[1]:
                        u = digit(float64(planes[t, i, j]), t) if LATE else float64(planes[t, i, j])
                        sums[0, e] = fma(u, C1[t], sums[0, e])
                        sums[1, e] = fma(u, C2[t], sums[1, e])
                        sums[2, e] = fma(u, C3[t], sums[2, e])
            for e in range(E):
                j = j0 + TX * e
                if j >= out.shape[1]:
                    continue
                if mu[i] == NONFINITE_SHIFT or nu[j] == NONFINITE_SHIFT:
                    native = 0.0
                    for col in range(a.shape[1]):
                        native = fma(a[i, col], b[col, j], native)
                    native *= alpha
                    if beta != 0.0:
                        native = fma(beta, c[i, j], native)
                    out[i, j] = native
                else:
                    finish(sums[0, e], sums[1, e], sums[2, e], -int(mu[i] + nu[j]), alpha, beta, c, i, j, out)

        return kernel

    return factory


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

    return loads_only, arithmetic_only


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=8192, help="m = n = k (default 8192)")
    parser.add_argument("--moduli", type=int, default=15)
    parser.add_argument("--entries", default="2,4", help="entries a thread of the variants (default 2,4)")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    import cupy as cp  # after the arguments: --help needs no GPU

    from utilities import bench, inputs
    from utilities.machinery import launch
    from utilities.ozaki2 import simt
    from utilities.ozaki2.tensorcore import Ozaki2Gemm
    from utilities.peaks import measure_copy_bandwidth

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
        for e in (int(x) for x in args.entries.split(",") if x):
            kernel = entries_factory(e)(count, late)
            grid = (-(-size // (BLOCK[0] * e)), -(-size // BLOCK[1]))
            kernels[f"entries={e}"] = (kernel, grid, BLOCK, (planes, plan.mu, plan.nu, a, b, *scalars, c, out))
        loads, arithmetic = diagnostics(count, late)
        grid = (-(-size // BLOCK[0]), -(-size // BLOCK[1]))
        kernels["loads only"] = (loads, grid, BLOCK, (planes, out))
        kernels["arithmetic only"] = (arithmetic, grid, BLOCK, (planes, out))
        for name, (kernel, grid, block, kargs) in kernels.items():
            out.fill(cp.nan)
            launch.launch(kernel, grid, block, 0, *kargs)
            same = None
            if name == "course" or name.startswith("entries"):
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
            bytes_here = moved if name != "arithmetic only" else planes.nbytes // count + want.nbytes
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
        name = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"]
        head = {
            "gpu": name.decode() if isinstance(name, bytes) else str(name),
            "date": time.strftime("%Y-%m-%d"),
            "command": shlex.join(["python3", "tools/ozaki2_reconstruct_probe.py", *sys.argv[1:]]),
        }
        Path(args.json).write_text(
            json.dumps({**head, "size": size, "moduli": count, "copy_tbs": copy_tbs, "rows": rows}, indent=1) + "\n"
        )


if __name__ == "__main__":
    main()

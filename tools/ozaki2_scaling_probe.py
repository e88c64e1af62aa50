"""Developer tool (issue 43): where Ozaki-II's scaling spends its time, each of its two kernels alone.

Run on a GPU: ``python tools/ozaki2_scaling_probe.py [--size 8192] [--counts 2,4,8,15] [--repeats 10]``.

The automatic plan's scaling: A's residues from the row statistics the choice found (``residue_known_rows_kernel``) and
B's, transposed, from its column statistics, in one pass (``residue_cols_kernel``, the course's default
``columns="direct"``) or by B^T's rows (``transpose_kernel``, then the rows kernel, ``columns="by-rows"``; ``--by-rows``
times it, each part alone too; ``--row-threads N`` times A's rows kernel with N threads a row too; ``--columns
1,2`` times B's one-pass kernel with other groups of row tiles in consecutive blocks,
``simt.make_residue_cols_kernel``'s ``group``). Each is timed alone
(CUDA events, ``utilities.bench``) at several moduli counts (with ``--looped``, ``--written-out`` and ``--unrolled``,
beside each the same kernel with its loops over the moduli kept, all written out, or unrolled by numba,
``tools/unrolled_variants.py``; every variant's words and shifts must equal the one-pass kernel's; the course writes out
both kernels' loops), and its times are fitted as ``a + b N``: ``a`` is the pass over the operand (its loads and the
split of each entry), ``b`` one modulus's residues and their stores. Beside each: the bytes it moves at this run's copy
rate (its floor), and how far the time is from it. The residues are not checked here (the tests and the checkers do
that)."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def fit(counts: list[int], ms: list[float]) -> tuple[float, float]:
    """Least-squares ``a + b N`` through the points (``a`` alone with one count)."""
    if len(counts) == 1:
        return ms[0], 0.0
    mean_n, mean_t = sum(counts) / len(counts), sum(ms) / len(ms)
    slope = sum((n - mean_n) * (t - mean_t) for n, t in zip(counts, ms, strict=True)) / sum(
        (n - mean_n) ** 2 for n in counts
    )
    return mean_t - slope * mean_n, slope


def report_head(tool: str) -> dict[str, str]:
    """A probe report's first fields: the GPU's name, the date and the command that ran ``tools/<tool>``."""
    import cupy as cp

    name = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"]
    return {
        "gpu": name.decode() if isinstance(name, bytes) else str(name),
        "date": time.strftime("%Y-%m-%d"),
        "command": shlex.join(["python3", f"tools/{tool}", *sys.argv[1:]]),
    }


def beside(kernels: dict, same: dict, name: str, step: Any, args: tuple, moved: int) -> None:
    """Another launch of a course kernel, timed beside the course's (``kernels``), into copies of its words and
    shifts that must equal the course's (``same``): ``args`` are the course launch's (x, istats, words, shifts)."""
    import cupy as cp

    from utilities.machinery import launch

    x, istats, words, shifts = args
    words_copy, shifts_copy = cp.empty_like(words), cp.empty_like(shifts)
    kernels[name] = (
        lambda: launch.launch(step.kernel, step.grid, step.block, 0, x, istats, words_copy, shifts_copy),
        moved,
    )
    course = "rows (A, statistics known)" if name.startswith("rows") else "columns (B), one pass"
    same[name] = (course, words, words_copy, shifts, shifts_copy)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=8192, help="m = n = k (default 8192)")
    parser.add_argument("--counts", default="2,4,8,15", help="moduli counts, comma-separated (default 2,4,8,15)")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument(
        "--unrolled", action="store_true", help="also each kernel with its moduli loops over numba's literal_unroll"
    )
    parser.add_argument(
        "--written-out", action="store_true", help="also each kernel with every moduli loop written out in its source"
    )
    parser.add_argument("--looped", action="store_true", help="also each kernel with every moduli loop kept")
    parser.add_argument(
        "--columns",
        default="",
        help="also B's one-pass kernel with these groups, comma-separated (its words must be the course's)",
    )
    parser.add_argument("--by-rows", action="store_true", help="also B's residues by its transpose and the rows kernel")
    parser.add_argument(
        "--row-threads",
        type=int,
        default=0,
        help="also A's rows kernel with this many threads a row (a multiple of 32; its words must be the course's)",
    )
    args = parser.parse_args()
    from utilities.ozaki2 import reference

    try:  # before the GPU: 2..20 moduli
        counts = sorted({reference.check_moduli(int(c)) for c in args.counts.split(",")})
    except (ValueError, reference.ModuliError) as error:
        parser.error(f"--counts {args.counts}: {error}")
    import cupy as cp  # after the arguments: --help needs no GPU

    from utilities import bench, inputs
    from utilities.machinery import launch
    from utilities.ozaki2 import simt
    from utilities.ozaki2.tensorcore import Ozaki2Gemm
    from utilities.peaks import measure_copy_bandwidth

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import unrolled_variants

    size = args.size
    a, b = cp.asarray(inputs.normal(size, size, 0)), cp.asarray(inputs.normal(size, size, 1))
    plan = Ozaki2Gemm(size, size, size, "auto", columns="by-rows" if args.by_rows else "direct")  # by-rows: its B^T
    plan.choose(a, b)  # the statistics both kernels read
    copy_tbs = measure_copy_bandwidth()
    kp = plan.kp
    rows: list[dict] = []
    for count in counts:
        a_words, b_words = plan.a_res[:count].view(cp.int32), plan.b_res[:count].view(cp.int32)
        known = simt.residue_known_launch(size, size, kp, count)
        cols = simt.residue_cols_launch(size, size, kp, count)
        moved_a, moved_b = a.nbytes + count * size * kp, b.nbytes + count * size * kp
        kernels = {
            "rows (A, statistics known)": (
                lambda known=known, a_words=a_words: launch.launch(
                    known.kernel, known.grid, known.block, 0, a, plan.stats.rows_i, a_words, plan.mu
                ),
                a.nbytes + count * size * kp,
            ),
            "columns (B), one pass": (
                lambda cols=cols, b_words=b_words: launch.launch(
                    cols.kernel, cols.grid, cols.block, 0, b, plan.stats.cols_i, b_words, plan.nu
                ),
                b.nbytes + count * size * kp,
            ),
        }
        same: dict[str, tuple] = {}
        modes = {
            "loop kept": (args.looped, unrolled_variants.looped_simt),
            "written out": (args.written_out, unrolled_variants.written_out_simt),
            "unrolled": (args.unrolled, unrolled_variants.unrolled_simt),
        }
        for mode, (wanted, variant) in modes.items():  # the same kernels, the moduli loops treated otherwise
            if not wanted:
                continue
            ns = variant()
            known_u = ns["make_residue_known_rows_kernel"](size, kp, count, known.block)
            cols_u = ns["make_residue_cols_kernel"](count)
            a_copy, b_copy = cp.empty_like(a_words), cp.empty_like(b_words)
            mu_copy, nu_copy = cp.empty_like(plan.mu), cp.empty_like(plan.nu)
            rows_name, cols_name = f"rows (A, statistics known), {mode}", f"columns (B), one pass, {mode}"
            kernels[rows_name] = (
                lambda a_copy=a_copy, mu_copy=mu_copy, known_u=known_u, known=known: launch.launch(
                    known_u, known.grid, known.block, 0, a, plan.stats.rows_i, a_copy, mu_copy
                ),
                a.nbytes + count * size * kp,
            )
            kernels[cols_name] = (
                lambda b_copy=b_copy, nu_copy=nu_copy, cols_u=cols_u, cols=cols: launch.launch(
                    cols_u, cols.grid, cols.block, 0, b, plan.stats.cols_i, b_copy, nu_copy
                ),
                b.nbytes + count * size * kp,
            )
            same[rows_name] = ("rows (A, statistics known)", a_words, a_copy, plan.mu, mu_copy)
            same[cols_name] = ("columns (B), one pass", b_words, b_copy, plan.nu, nu_copy)
            for name in (rows_name, cols_name):  # numba may refuse to unroll a loop (literal_unroll's limits)
                try:
                    kernels[name][0]()
                except Exception as error:  # noqa: BLE001 (a variant never stops the probe)
                    print(f"{name}: not built ({type(error).__name__}: {str(error).splitlines()[0][:160]})")
                    del kernels[name], same[name]
        if args.row_threads:  # A's rows kernel with another block: no reduction, so the same words at any width
            wide = simt.residue_known_launch(size, size, kp, count, threads=args.row_threads)
            name = f"rows (A, statistics known), {args.row_threads} threads a row"
            beside(kernels, same, name, wide, (a, plan.stats.rows_i, a_words, plan.mu), moved_a)
        for spec in filter(None, args.columns.split(",")):  # B's one pass in another order of its blocks
            other = simt.residue_cols_launch(size, size, kp, count, group=int(spec))
            name = f"columns (B), one pass, {spec} row tiles a column tile"
            beside(kernels, same, name, other, (b, plan.stats.cols_i, b_words, plan.nu), moved_b)
        if args.by_rows:  # B's residues through its transpose and the rows kernel (the design before the one pass)
            transpose, by_rows, bt = simt.transpose_launch(size, size), known, plan.b_t  # the plan's own B^T
            b_copy, nu_copy = cp.empty_like(b_words), cp.empty_like(plan.nu)

            def flip(transpose=transpose, bt=bt) -> None:
                launch.launch(transpose.kernel, transpose.grid, transpose.block, 0, b, bt)

            def residues(by_rows=by_rows, bt=bt, b_copy=b_copy, nu_copy=nu_copy) -> None:
                launch.launch(by_rows.kernel, by_rows.grid, by_rows.block, 0, bt, plan.stats.cols_i, b_copy, nu_copy)

            name = "columns (B), by rows of B^T (course)"
            kernels["B transposed alone"] = (flip, 2 * b.nbytes)
            kernels["rows kernel on B^T alone"] = (residues, b.nbytes + count * size * kp)
            both = 3 * b.nbytes + count * size * kp  # B read, B^T written and read, the words written
            kernels[name] = (lambda flip=flip, residues=residues: (flip(), residues()), both)
            same[name] = ("columns (B), one pass", b_words, b_copy, plan.nu, nu_copy)
        for name, (fn, moved) in kernels.items():
            record = bench.bench(fn, m=size, n=size, k=size, name=name, repeats=args.repeats, bytes_moved=moved)
            floor_ms = moved / (copy_tbs * 1e12) * 1e3
            ms = record.time.median
            row = {"kernel": name, "moduli": count, "ms": ms, "floor_ms": floor_ms, "bytes": moved}
            if name in same:  # the course's kernel ran last into the plan's buffers
                course, words, copy, shifts, shifts_copy = same[name]
                kernels[course][0]()
                row["same_as_course"] = bool(cp.array_equal(words, copy)) and bool(cp.array_equal(shifts, shifts_copy))
            rows.append(row)
    print(f"{size}^3, copy rate {copy_tbs:.2f} TB/s (bytes moved / rate = floor)")
    print(f"{'kernel':<38} {'moduli':>6} {'ms':>8} {'floor ms':>9} {'x floor':>8}  same words")
    for r in rows:
        same = {True: "yes", False: "NO"}.get(r.get("same_as_course"), "-")
        print(
            f"{r['kernel']:<38} {r['moduli']:>6} {r['ms']:8.3f} {r['floor_ms']:9.3f} "
            f"{r['ms'] / r['floor_ms']:8.2f}  {same}"
        )
    for name in dict.fromkeys(r["kernel"] for r in rows):
        mine = [r for r in rows if r["kernel"] == name]
        a0, slope = fit([r["moduli"] for r in mine], [r["ms"] for r in mine])
        print(f"{name}: {a0:.3f} ms a pass + {slope:.3f} ms a modulus")
    if args.json:
        report = {**report_head("ozaki2_scaling_probe.py"), "size": size, "copy_tbs": copy_tbs, "rows": rows}
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()

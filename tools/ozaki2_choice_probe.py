"""Developer tool (issue 43): where Ozaki-II's automatic choice spends its time, each of its passes alone.

Run on a GPU: ``python tools/ozaki2_choice_probe.py [--size 8192] [--repeats 10] [--json F]``.

``GemmStatistics.compute`` makes four passes over the operands (A by column chunks, B by rows, A by rows, B by
column chunks, each column-chunk pass ending with the kernel that combines a column's chunks, also timed alone; a
small normalizing kernel after the first two), and ``choose`` three small kernels and one copy of
the estimates to the host. Each is timed alone (CUDA events, ``utilities.bench``) on the buffers of an automatic
plan at ``--size``, then ``compute`` and ``plan.choose`` whole. Beside each pass: the bytes it reads at this run's
copy rate (its floor) and how far the time is from it. The statistics are not checked here (the tests and the
checkers do that); the count chosen is printed, to compare with the plan's.

``--timeline`` also records a CUDA event before and after every launch of ``plan.choose`` (the launches of the
course's launcher, and the copy to the host), over ``--repeats`` calls: each kernel's time in the call as it runs,
and the time the GPU waited between them (the host's launches, when they fall behind).

Every row and the timeline run the passes on one stream, one after another; where the plan runs B's passes on a
second stream (``GemmStatistics.concurrent``, ``Ozaki2Gemm.concurrent``), more rows time ``compute``,
``plan.choose`` and the scaling after the choice (``plan.scale``, also timed on one stream) that way.

``--queued`` also times each pass on the GPU's own clock: twenty calls queued behind a 2 ms CuPy kernel, events
around the twenty (a row's ``queued_ms``), so that the host's launches (about 0.04 ms each through the course's
launcher) hide behind the GPU's work as they do inside a plan; calls that end in a copy to the host still wait.

``--split`` also times each of the two weighted passes with one part of its work left out: the exponents and S
alone (no weights), the weighted norms alone (no S), and neither (the norms only, as the first two passes): the
differences say what S (two ``frexp`` and an int64 term an entry, a warp's reductions a chunk) and the weights cost.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=8192, help="m = n = k (default 8192)")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--split", action="store_true", help="also the weighted passes with S or the weights left out")
    parser.add_argument("--timeline", action="store_true", help="also each launch of plan.choose in the call")
    parser.add_argument("--queued", action="store_true", help="also each pass queued: the GPU's own time a call")
    args = parser.parse_args()
    import cupy as cp  # after the arguments: --help needs no GPU

    from utilities import bench, inputs
    from utilities.ozaki2.tensorcore import Ozaki2Gemm
    from utilities.peaks import measure_copy_bandwidth

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from ozaki2_scaling_probe import report_head

    size = args.size
    a, b = cp.asarray(inputs.normal(size, size, 0)), cp.asarray(inputs.normal(size, size, 1))
    plan = Ozaki2Gemm(size, size, size, "auto")
    choice = plan.choose(a, b)
    st = plan.stats
    ta, tb = st.tops[0:1], st.tops[1:2]
    copy_tbs = measure_copy_bandwidth()
    passes = {  # what GemmStatistics.compute runs, in its order, each with the bytes it reads
        "A by column chunks (col_chunk + col_combine)": (
            lambda: st._col_chunks(a, st.r, st.a_chunks, st.a_cols_f, st.a_cols_i, ta, weighted=False, terms=False),
            a.nbytes,
        ),
        "normalize A's columns": (lambda: st._normalize(st.a_cols_f, st.a_cols_i, ta, st.q), 0),
        "B by rows (norms)": (
            lambda: st._rows(b, st.q, st.b_rows_f, st.b_rows_i, tb, weighted=False, terms=False),
            b.nbytes,
        ),
        "normalize B's rows": (lambda: st._normalize(st.b_rows_f, st.b_rows_i, tb, st.r), 0),
        "A by rows (weighted, exponents)": (
            lambda: st._rows(a, st.r, st.rows_f, st.rows_i, ta, weighted=True),
            a.nbytes,
        ),
        "B by column chunks (weighted, exponents)": (
            lambda: st._col_chunks(b, st.q, st.b_chunks, st.cols_f, st.cols_i, tb, weighted=True),
            b.nbytes,
        ),
        "B's chunks combined alone (col_combine)": (
            lambda: st._combine(st.b_chunks, st.cols_f, st.cols_i, tb),
            st.b_chunks[0].nbytes + st.b_chunks[1].nbytes,
        ),
        "compute (the four passes)": (lambda: st.compute(a, b), 2 * a.nbytes + 2 * b.nbytes),
        "choose (three kernels and the copy)": (lambda: st.choose(plan.tables), 0),
        "plan.choose (compute and choose)": (lambda: plan.choose(a, b), 2 * a.nbytes + 2 * b.nbytes),
    }
    if args.split:  # the same two passes with a part left out (their outputs are overwritten; choose() runs again)
        parts = {"exponents and S only": (False, True), "weights only": (True, False), "norms only": (False, False)}
        for part, (weighted, terms) in parts.items():
            passes[f"A by rows, {part}"] = (
                lambda weighted=weighted, terms=terms: st._rows(a, st.r, st.rows_f, st.rows_i, ta, weighted, terms),
                a.nbytes,
            )
            passes[f"B by column chunks, {part}"] = (
                lambda weighted=weighted, terms=terms: st._col_chunks(
                    b, st.q, st.b_chunks, st.cols_f, st.cols_i, tb, weighted=weighted, terms=terms
                ),
                b.nbytes,
            )
    concurrent = st.concurrent  # the plan's default: B's passes on a second stream
    both = 2 * a.nbytes + 2 * b.nbytes
    scaled = (8 + choice.count) * (a.size + b.size)  # the scaling reads A and B, writes a byte an entry a modulus
    passes["plan.scale after the choice (A's rows, B's columns)"] = (
        lambda: plan.scale(a, b, columns_known=True, rows_known=True),
        scaled,
    )
    if concurrent:
        passes["compute, B's passes on a second stream"] = (lambda: st.compute(a, b), both)
        passes["plan.choose, B's passes on a second stream"] = (lambda: plan.choose(a, b), both)
        passes["plan.scale, B's columns on a second stream"] = (
            lambda: plan.scale(a, b, columns_known=True, rows_known=True),
            scaled,
        )
    rows: list[dict] = []
    for name, (fn, moved) in passes.items():
        # every other row on one stream, one launch after another
        st.concurrent = plan.concurrent = "second stream" in name
        record = bench.bench(fn, m=size, n=size, k=size, name=name, repeats=args.repeats, bytes_moved=moved or None)
        floor_ms = moved / (copy_tbs * 1e12) * 1e3
        rows.append({"pass": name, "ms": record.time.median, "floor_ms": floor_ms, "bytes": moved})
        if args.queued:
            rows[-1]["queued_ms"] = queued_ms(fn, args.repeats)
    st.concurrent = plan.concurrent = False  # the timeline's events are on one stream: so must its launches be
    timeline = launch_timeline(lambda: plan.choose(a, b), args.repeats) if args.timeline else []
    st.concurrent = plan.concurrent = concurrent
    again = plan.choose(a, b)
    print(f"{size}^3, copy rate {copy_tbs:.2f} TB/s; {choice.count} moduli chosen, {again.count} after the runs")
    print(f"{'pass':<46} {'ms':>8} {'floor ms':>9} {'x floor':>8}" + (f" {'queued ms':>10}" if args.queued else ""))
    for r in rows:
        ratio = f"{r['ms'] / r['floor_ms']:8.2f}" if r["floor_ms"] else f"{'-':>8}"
        queued = f" {r['queued_ms']:10.3f}" if "queued_ms" in r else ""
        print(f"{r['pass']:<46} {r['ms']:8.3f} {r['floor_ms']:9.3f} {ratio}{queued}")
    if timeline:
        print(f"\nplan.choose launch by launch (median of {args.repeats} calls)")
        print(f"{'launch':<46} {'ms':>8} {'gap ms':>9}")
        for t in timeline:
            print(f"{t['launch']:<46} {t['ms']:8.4f} {t['gap_ms']:9.4f}")
        kernels, gaps = sum(t["ms"] for t in timeline), sum(t["gap_ms"] for t in timeline)
        print(f"{'sum (kernels, gaps)':<46} {kernels:8.4f} {gaps:9.4f}")
    if args.json:
        report = {**report_head("ozaki2_choice_probe.py"), "size": size, "copy_tbs": copy_tbs, "rows": rows,
                  "count": choice.count, "count_after": again.count, "timeline": timeline}  # fmt: skip
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")


def queued_ms(call, repeats: int, calls: int = 20) -> float:
    """The median over ``repeats`` rounds of ``calls`` calls queued behind about 2 ms of GPU work (a CuPy kernel
    over 128 MiB, forty times), timed by events around the ``calls``, divided by them: the GPU's own time a call."""
    import cupy as cp
    import numpy as np

    spin = cp.zeros(1 << 24)
    times = []
    for _ in range(repeats):
        cp.cuda.get_current_stream().synchronize()
        for _ in range(40):
            cp.sin(spin, out=spin)
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        for _ in range(calls):
            call()
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end) / calls)
    return float(np.median(times))


def launch_timeline(call, repeats: int) -> list[dict]:
    """Each launch of ``call`` (through ``utilities.machinery.launch.launch``, and the choice's copy to the host) with a
    CUDA event before and after it: per launch, in order, the median over ``repeats`` calls of its time and of the
    time since the previous launch ended (the first: since the call began)."""
    import cupy as cp

    from utilities.machinery import launch
    from utilities.precision_gpu import GemmStatistics

    original_launch, original_get = launch.launch, GemmStatistics.to_host
    marks: list[tuple[str, object, object]] = []

    def timed(name, fn, *args, **kwargs):
        before, after = cp.cuda.Event(), cp.cuda.Event()
        before.record()
        result = fn(*args, **kwargs)
        after.record()
        marks.append((name, before, after))
        return result

    def timed_launch(kernel, *args):
        name = getattr(getattr(kernel, "py_func", kernel), "__name__", "kernel")
        return timed(name, original_launch, kernel, *args)

    def timed_get(self, *args, **kwargs):
        return timed("copy to the host", original_get, self, *args, **kwargs)

    calls: list[list[tuple[str, float, float]]] = []
    launch.launch, GemmStatistics.to_host = timed_launch, timed_get
    try:
        for _ in range(repeats + 1):  # the first call warms up
            marks.clear()
            start = cp.cuda.Event()
            start.record()
            call()
            cp.cuda.get_current_stream().synchronize()
            previous, rows = start, []
            for name, before, after in marks:
                gap = cp.cuda.get_elapsed_time(previous, before)
                rows.append((name, cp.cuda.get_elapsed_time(before, after), gap))
                previous = after
            calls.append(rows)
    finally:
        launch.launch, GemmStatistics.to_host = original_launch, original_get
    import numpy as np

    return [
        {
            "launch": name,
            "ms": float(np.median([c[i][1] for c in calls[1:]])),
            "gap_ms": float(np.median([c[i][2] for c in calls[1:]])),
        }
        for i, (name, _, _) in enumerate(calls[-1])
    ]


if __name__ == "__main__":
    main()

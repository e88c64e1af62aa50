"""One ``bench()``: warm-up, CUDA events, median with a 20-80% band, providers side by side, a printed table.

The timing functions need CuPy and a GPU and import it when called; everything else (``Timing``,
``BenchRecord``, ``make_record``, ``print_table``, the recorder) is plain Python and runs anywhere.

Two ways to time, both GPU time between CUDA events:

- per call (the default): one call between a pair of events, ``repeats`` times (``cupyx.profiler.benchmark``);
  optionally with the L2 cache flushed before each call;
- held (``hold=True``): before each sample the GPU spins while the host queues ``calls`` calls, cycling through
  the callables given (several copies of the operands, say, so that they come from HBM), and the sample is the
  time between the events divided by ``calls``. For calls shorter than their host side (Python, launches, a
  library's bookkeeping), per-call events would time the host; held samples do not.

Notebooks time a kernel with ``bench()`` or several with ``compare()``, then ``record()`` the result: when
the environment variable ``COURSE_RESULTS`` names a directory, every record is appended to
``$COURSE_RESULTS/records.jsonl`` (and every build time to ``builds.jsonl``), which is how the GPU suite
collects the figures of a run into ``results/<gpu>.json`` (see ``utilities.report``).
"""

from __future__ import annotations

import functools
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np

RESULTS_ENV = "COURSE_RESULTS"
RECORDS_FILE = "records.jsonl"
BUILDS_FILE = "builds.jsonl"
BUILD_KEYS = ("first_s", "edit_s", "new_shape_s", "warm_restart_s")


@dataclass(frozen=True)
class Timing:
    """Statistics of per-run times in milliseconds; ``q20``/``q80`` bound the 20-80% band."""

    median: float
    min: float
    max: float
    repeats: int
    q20: float | None = None
    q80: float | None = None

    @classmethod
    def from_times(cls, times_ms: Iterable[float]) -> Timing:
        """Median, extremes and the 20% and 80% quantiles (linear interpolation, as Triton's ``do_bench``)."""
        t = np.asarray(list(times_ms), dtype=np.float64)
        if t.ndim != 1 or t.size == 0:
            raise ValueError("need at least one time")
        if not np.all(np.isfinite(t)) or np.any(t <= 0):
            raise ValueError(f"times must be positive and finite, got {t.tolist()}")
        q20, median, q80 = np.quantile(t, [0.2, 0.5, 0.8])
        return cls(float(median), float(t.min()), float(t.max()), int(t.size), float(q20), float(q80))

    def to_dict(self) -> dict[str, Any]:
        """The ``time_ms`` entry of the report: median, min, max, repeats, then q20 and q80 when known."""
        d: dict[str, Any] = {"median": self.median, "min": self.min, "max": self.max, "repeats": self.repeats}
        if self.q20 is not None and self.q80 is not None:
            d["q20"], d["q80"] = self.q20, self.q80
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Timing:
        return cls(
            float(d["median"]),
            float(d["min"]),
            float(d["max"]),
            int(d["repeats"]),
            None if d.get("q20") is None else float(d["q20"]),
            None if d.get("q80") is None else float(d["q80"]),
        )


@dataclass
class BenchRecord:
    """One entry of the report's ``benchmarks`` list (``tflops`` holds TOPS for integer GEMMs)."""

    name: str
    m: int
    n: int
    k: int
    time: Timing
    tflops: float
    params: dict[str, Any] = field(default_factory=dict)
    error: dict[str, Any] | None = None
    bandwidth_tbs: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "name": self.name,
            "m": self.m,
            "n": self.n,
            "k": self.k,
            "params": dict(self.params),
            "time_ms": self.time.to_dict(),
            "tflops": self.tflops,
            "error": None if self.error is None else dict(self.error),
        }
        if self.bandwidth_tbs is not None:
            d["bandwidth_tbs"] = self.bandwidth_tbs
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> BenchRecord:
        return cls(
            name=str(d["name"]),
            m=int(d["m"]),
            n=int(d["n"]),
            k=int(d["k"]),
            time=Timing.from_dict(d["time_ms"]),
            tflops=float(d["tflops"]),
            params=dict(d.get("params") or {}),
            error=None if d.get("error") is None else dict(d["error"]),
            bandwidth_tbs=None if d.get("bandwidth_tbs") is None else float(d["bandwidth_tbs"]),
        )


def error_entry(normwise: float, max_elementwise: float, against: str) -> dict[str, Any]:
    """The report's ``error`` entry: relative errors measured against ``against`` ("exact", "numpy", ...)."""
    return {"normwise": float(normwise), "max_elementwise": float(max_elementwise), "against": str(against)}


def make_record(
    name: str,
    times_ms: Iterable[float],
    *,
    m: int,
    n: int,
    k: int,
    params: Mapping[str, Any] | None = None,
    flops: float | None = None,
    bytes_moved: float | None = None,
    error: Mapping[str, Any] | None = None,
) -> BenchRecord:
    """A record from measured times; ``flops`` defaults to the GEMM count ``2*m*n*k``, rated at the median."""
    for label, v in (("m", m), ("n", n), ("k", k)):
        if isinstance(v, bool) or not isinstance(v, int | np.integer) or v <= 0:
            raise ValueError(f"{label} must be a positive integer, got {v!r}")
    timing = Timing.from_times(times_ms)
    seconds = timing.median * 1e-3
    work = 2.0 * m * n * k if flops is None else float(flops)
    bandwidth = None if bytes_moved is None else float(bytes_moved) / seconds / 1e12
    return BenchRecord(
        name=name,
        m=int(m),
        n=int(n),
        k=int(k),
        time=timing,
        tflops=work / seconds / 1e12,
        params=dict(params or {}),
        error=None if error is None else dict(error),
        bandwidth_tbs=bandwidth,
    )


# ---------------------------------------------------------------------------------------------- timing (GPU)


def _l2_flusher() -> Callable[[], None]:
    """A callable that overwrites a buffer of twice the L2 size, evicting whatever the last run left there."""
    import cupy

    l2_bytes = int(cupy.cuda.Device().attributes["L2CacheSize"])
    buf = cupy.empty(max(2 * l2_bytes, 1 << 20), dtype=cupy.uint8)

    def flush() -> None:
        buf.fill(0)

    return flush


def _event_times(
    fns: Sequence[Callable[[], object]], *, warmup: int, repeats: int, flush_l2: bool
) -> list[list[float]]:
    """Per-call GPU times (ms) of each callable, one round after another, the start rotating every round.

    The L2 flush, when asked for, runs before each call and outside its pair of events.
    """
    import cupy

    flush = _l2_flusher() if flush_l2 else None
    for fn in fns:
        for _ in range(warmup):
            fn()
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    times: list[list[float]] = [[] for _ in fns]
    for r in range(repeats):
        for j in range(len(fns)):
            i = (r + j) % len(fns)
            if flush is not None:
                flush()
            start.record()
            fns[i]()
            stop.record()
            stop.synchronize()
            times[i].append(cupy.cuda.get_elapsed_time(start, stop))
    return times


def gpu_times_ms(
    fn: Callable[[], object], *, warmup: int = 3, repeats: int = 20, flush_l2: bool = False, name: str = "fn"
) -> list[float]:
    """GPU time of each of ``repeats`` calls of ``fn`` in milliseconds, measured with CUDA events.

    Without an L2 flush this is ``cupyx.profiler.benchmark``'s ``gpu_times``; with one, the same events are
    placed by hand so that the flush stays outside them.
    """
    if warmup < 0 or repeats < 1:
        raise ValueError(f"need warmup >= 0 and repeats >= 1, got {warmup} and {repeats}")
    if flush_l2:
        return _event_times([fn], warmup=warmup, repeats=repeats, flush_l2=True)[0]
    from cupyx.profiler import benchmark

    result = benchmark(fn, n_repeat=repeats, n_warmup=warmup, name=name)
    return [float(t) * 1e3 for t in result.gpu_times[0]]


def hold_gpu(ms: float) -> None:
    """Keep the current stream busy for about ``ms`` (one thread spinning on the SM clock), so that the host can
    queue the calls that follow before the GPU reaches them."""
    import cupy

    khz = cupy.cuda.Device().attributes["ClockRate"]
    _spin_kernel()((1,), (1,), (np.int64(ms * khz),))


@functools.cache
def _spin_kernel() -> Any:
    """One thread spinning on the SM clock for a number of cycles (NVRTC, which CuPy needs for its own elementwise
    kernels anyway)."""
    import cupy

    source = (
        'extern "C" __global__ void spin(long long cycles) {'
        " long long start = clock64(); while (clock64() - start < cycles) { } }"
    )
    return cupy.RawKernel(source, "spin")


HOLD_MS = 4.0  # the GPU spins this long before each held sample: time for the host to queue its calls
CALLS = 10  # calls per held sample


def held_times_ms(fns: Sequence[Callable[[], object]], *, repeats: int = 10, calls: int = CALLS) -> list[float]:
    """GPU time per call (ms): ``calls`` calls (cycling through ``fns``) between two events, ``repeats`` times.

    Before each sample the GPU spins while the host queues the calls, so that the time between the events is
    the GPU's. A sample whose calls took the host more than most of the spin is dropped and the spin
    lengthened, so that no sample is host-bound.
    """
    import cupy

    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    for fn in fns:
        fn()
    times: list[float] = []
    hold_ms = HOLD_MS
    while len(times) < repeats:
        hold_gpu(hold_ms)
        queued = time.perf_counter()
        start.record()
        for i in range(calls):
            fns[i % len(fns)]()
        stop.record()
        queued_ms = (time.perf_counter() - queued) * 1e3
        stop.synchronize()
        if queued_ms > 0.8 * hold_ms:  # the GPU may have caught up with the host: spin longer and measure again
            hold_ms = 2 * queued_ms
            continue
        times.append(cupy.cuda.get_elapsed_time(start, stop) / calls)
    return times


def copies_for(nbytes: int) -> int:
    """How many operand sets of ``nbytes`` to cycle through so that together they span three L2 caches."""
    import cupy

    l2 = int(cupy.cuda.Device().attributes["L2CacheSize"])
    return max(1, math.ceil(3 * l2 / nbytes))


def bench(
    fn: Callable[[], object] | Sequence[Callable[[], object]],
    *,
    m: int,
    n: int,
    k: int,
    name: str | None = None,
    params: Mapping[str, Any] | None = None,
    warmup: int = 3,
    repeats: int = 20,
    flush_l2: bool = False,
    hold: bool = False,
    calls: int = CALLS,
    flops: float | None = None,
    bytes_moved: float | None = None,
    error: Mapping[str, Any] | None = None,
) -> BenchRecord:
    """Time the zero-argument GPU callable ``fn`` and rate it as an ``m x n x k`` product (see ``make_record``).

    ``hold=True`` times held samples (:func:`held_times_ms`); ``fn`` may then be a list of callables doing the
    same work on different operands, called in turn.
    """
    fns = list(fn) if isinstance(fn, Sequence) else [fn]
    label = name or getattr(fns[0], "__name__", "fn")
    if hold:
        times = held_times_ms(fns, repeats=repeats, calls=calls)
    elif len(fns) == 1:
        times = gpu_times_ms(fns[0], warmup=warmup, repeats=repeats, flush_l2=flush_l2, name=label)
    else:
        raise ValueError("several callables are timed held only: pass hold=True")
    return make_record(label, times, m=m, n=n, k=k, params=params, flops=flops, bytes_moved=bytes_moved, error=error)


def compare(
    providers: Mapping[str, Callable[[], object]],
    *,
    m: int,
    n: int,
    k: int,
    params: Mapping[str, Any] | None = None,
    warmup: int = 3,
    repeats: int = 20,
    flush_l2: bool = False,
    flops: float | None = None,
    interleave: bool = True,
    show: bool = True,
) -> list[BenchRecord]:
    """Time several providers of the same product in one call, interleaved, and print them side by side.

    Interleaving (one call of each provider per round, the first of the round rotating) exposes every provider
    to the same drift of clocks and temperature. It also puts each provider right after the others, which can
    cost (``instructor-notes/machinery.md``, "Timing"). ``interleave=False`` times each provider's runs back to
    back instead.
    """
    if not providers:
        raise ValueError("no providers")
    names = list(providers)
    if interleave:
        times = _event_times([providers[p] for p in names], warmup=warmup, repeats=repeats, flush_l2=flush_l2)
    else:
        times = [gpu_times_ms(providers[p], warmup=warmup, repeats=repeats, flush_l2=flush_l2, name=p) for p in names]
    records = [make_record(p, t, m=m, n=n, k=k, params=params, flops=flops) for p, t in zip(names, times, strict=True)]
    if show:
        print_table(records)
    return records


# ---------------------------------------------------------------------------------------------- table


def against_prediction(what: str, predicted: float | None, measured: float, unit: str = "") -> str:
    """One line for a notebook: the measurement beside the attendee's prediction, or a reminder to write one."""
    u = f" {unit}" if unit else ""
    if predicted is None:
        return f"{what}: measured {measured:.3g}{u} (no prediction: write yours in the cell before the measurement)"
    ratio = f"{measured / predicted:.2f}x your prediction" if predicted else "your prediction was 0"
    return f"{what}: you predicted {predicted:.3g}{u}, measured {measured:.3g}{u} ({ratio})"


class Printed(str):
    """Text a call already printed: IPython shows no ``Out`` value for it (the cell's output is the printed text)."""

    def _ipython_display_(self) -> None:
        pass


@dataclass(frozen=True)
class Claim:
    """Whether a takeaway held (``bool(claim)``); IPython shows nothing for it, as :func:`claim` printed its line."""

    statement: str
    held: bool

    def __bool__(self) -> bool:
        return self.held

    def _ipython_display_(self) -> None:
        pass


def claim(statement: str, holds: bool, otherwise: str = "") -> Claim:
    """A takeaway checked against this run's numbers, printed as one line: ``✓ <statement>`` when it holds, else
    ``✗ not on this GPU today: <otherwise>`` (what was measured instead, and where the notebook says why). Returns
    whether it held (a :class:`Claim`, true when it held); it never raises: a takeaway that does not hold on another
    GPU or another day is a finding, not an error."""
    line = f"✓ {statement}" if holds else f"✗ not on this GPU today: {otherwise or statement}"
    print(line)
    return Claim(statement, bool(holds))


def _fmt(v: float) -> str:
    return f"{v:.4g}" if abs(v) < 1e4 else f"{v:.0f}"


def print_table(records: Sequence[BenchRecord], *, metric: str = "tflops", file: TextIO | None = None) -> Printed:
    """Print (and return, as :class:`Printed` text) one row per size and one column per provider, Triton
    ``perf_report`` style.

    ``metric`` is "tflops" (median rate, TOPS for integer GEMMs) or "ms" (median time). A provider measured
    twice at one size shows its last measurement.
    """
    if metric not in ("tflops", "ms"):
        raise ValueError(f"metric must be 'tflops' or 'ms', got {metric!r}")
    names: list[str] = []
    rows: dict[tuple[int, int, int], dict[str, float]] = {}
    for r in records:
        if r.name not in names:
            names.append(r.name)
        rows.setdefault((r.m, r.n, r.k), {})[r.name] = r.tflops if metric == "tflops" else r.time.median
    header = ["m", "n", "k", *names]
    body = [[str(m), str(n), str(k), *(_fmt(c[p]) if p in c else "-" for p in names)] for (m, n, k), c in rows.items()]
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    unit = "TFLOP/s (TOPS for int8), median" if metric == "tflops" else "ms, median"
    lines = [unit, "  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in body]
    text = "\n".join(lines)
    print(text, file=file or sys.stdout)
    return Printed(text)


# ---------------------------------------------------------------------------------------------- recorder


def _append_jsonl(path: Path, entry: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(entry, allow_nan=False) + "\n")


def build_entry(
    kernel: str,
    first_s: float | None = None,
    edit_s: float | None = None,
    new_shape_s: float | None = None,
    warm_restart_s: float | None = None,
) -> dict[str, Any]:
    """The report's ``builds`` entry: seconds to build the first time, after an edit, for a new shape, warm."""
    entry: dict[str, Any] = {"kernel": str(kernel)}
    for key, v in zip(BUILD_KEYS, (first_s, edit_s, new_shape_s, warm_restart_s), strict=True):
        if v is not None and (isinstance(v, bool) or not math.isfinite(float(v)) or float(v) < 0):
            raise ValueError(f"{key} must be a non-negative number of seconds or None, got {v!r}")
        entry[key] = None if v is None else float(v)
    return entry


class Recorder:
    """Collects the records and builds of a session; mirrors each to JSON lines under ``directory``.

    ``directory`` defaults to ``$COURSE_RESULTS``, read at each write, so that setting the variable after
    import works; with neither, nothing is written until ``save()``.
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.directory = None if directory is None else Path(directory)
        self.records: list[BenchRecord] = []
        self.builds: list[dict[str, Any]] = []

    def _target(self, filename: str) -> Path | None:
        if self.directory is not None:
            return self.directory / filename
        env = os.environ.get(RESULTS_ENV)
        return Path(env) / filename if env else None

    def record(self, rec: BenchRecord | Iterable[BenchRecord]) -> None:
        """Keep one record or several (``compare()``'s list) and append each as a line of ``records.jsonl``."""
        recs = [rec] if isinstance(rec, BenchRecord) else list(rec)
        for r in recs:
            if not isinstance(r, BenchRecord):
                raise TypeError(f"expected a BenchRecord, got {type(r).__name__}")
            self.records.append(r)
            target = self._target(RECORDS_FILE)
            if target is not None:
                _append_jsonl(target, r.to_dict())

    def record_build(
        self,
        kernel: str,
        first_s: float | None = None,
        edit_s: float | None = None,
        new_shape_s: float | None = None,
        warm_restart_s: float | None = None,
    ) -> dict[str, Any]:
        """Keep the build times of ``kernel`` (seconds, None where not measured) and append them to builds.jsonl."""
        entry = build_entry(kernel, first_s, edit_s, new_shape_s, warm_restart_s)
        self.builds.append(entry)
        target = self._target(BUILDS_FILE)
        if target is not None:
            _append_jsonl(target, entry)
        return entry

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write ``{"benchmarks": [...], "builds": [...]}`` to ``path`` as JSON."""
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        data = {"benchmarks": [r.to_dict() for r in self.records], "builds": list(self.builds)}
        out.write_text(json.dumps(data, indent=2, allow_nan=False) + "\n", encoding="utf-8")
        return out

    def clear(self) -> None:
        self.records.clear()
        self.builds.clear()


DEFAULT_RECORDER = Recorder()


def record(rec: BenchRecord | Iterable[BenchRecord]) -> None:
    """Record into the session's default recorder (see ``Recorder.record``)."""
    DEFAULT_RECORDER.record(rec)


def record_build(
    kernel: str,
    first_s: float | None = None,
    edit_s: float | None = None,
    new_shape_s: float | None = None,
    warm_restart_s: float | None = None,
) -> dict[str, Any]:
    """Record build times into the session's default recorder (see ``Recorder.record_build``)."""
    return DEFAULT_RECORDER.record_build(kernel, first_s, edit_s, new_shape_s, warm_restart_s)

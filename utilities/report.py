"""The GPU report: ``results/<gpu-slug>.json`` in the format of RESULTS.md, and a readable ``.md`` beside it.

``merge_jsonl`` reads what the notebooks recorded (``utilities.bench``: ``$COURSE_RESULTS/*.jsonl``),
``write_report`` validates and writes the report, ``load_report`` and ``validate_report`` read it back.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from .bench import BUILD_KEYS, BUILDS_FILE, RECORDS_FILE, BenchRecord
from .peaks import gpu_slug

TOP_KEYS = ("gpu", "compute_capability", "date", "command", "versions", "benchmarks", "builds")
BENCH_KEYS = ("name", "m", "n", "k", "params", "time_ms", "tflops", "error")
TIME_KEYS = ("median", "min", "max", "repeats")
ERROR_KEYS = ("normwise", "max_elementwise", "against")

# report key -> distributions that may provide it, first found wins
PACKAGES = {
    "nvmath-python": ("nvmath-python",),
    "numba-cuda": ("numba-cuda",),
    "cupy": ("cupy-cuda13x", "cupy-cuda12x", "cupy"),
    "numpy": ("numpy",),
    "libmathdx": ("nvidia-libmathdx-cu13", "nvidia-libmathdx-cu12"),
}


class ReportError(ValueError):
    """A report that does not follow RESULTS.md; the message names the offending key."""


# ---------------------------------------------------------------------------------------------- validation


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _need(d: Any, where: str, keys: Sequence[str]) -> None:
    if not isinstance(d, dict):
        raise ReportError(f"{where}: expected an object, got {type(d).__name__}")
    missing = [k for k in keys if k not in d]
    if missing:
        raise ReportError(f"{where}: missing key(s) {missing}")


def _check(cond: bool, where: str, what: str, value: Any) -> None:
    if not cond:
        raise ReportError(f"{where}: expected {what}, got {value!r}")


def _validate_benchmark(b: Any, where: str) -> None:
    _need(b, where, BENCH_KEYS)
    _check(isinstance(b["name"], str) and b["name"] != "", f"{where}.name", "a non-empty string", b["name"])
    for key in ("m", "n", "k"):
        _check(_is_int(b[key]) and b[key] > 0, f"{where}.{key}", "a positive integer", b[key])
    _check(isinstance(b["params"], dict), f"{where}.params", "an object", b["params"])
    t = b["time_ms"]
    _need(t, f"{where}.time_ms", TIME_KEYS)
    for key in ("median", "min", "max"):
        _check(_is_number(t[key]) and t[key] >= 0, f"{where}.time_ms.{key}", "a non-negative number", t[key])
    _check(_is_int(t["repeats"]) and t["repeats"] > 0, f"{where}.time_ms.repeats", "a positive integer", t["repeats"])
    _check(t["min"] <= t["median"] <= t["max"], f"{where}.time_ms", "min <= median <= max", t)
    _check(_is_number(b["tflops"]) and b["tflops"] >= 0, f"{where}.tflops", "a non-negative number", b["tflops"])
    e = b["error"]
    if e is not None:
        _need(e, f"{where}.error", ERROR_KEYS)
        for key in ("normwise", "max_elementwise"):
            _check(_is_number(e[key]) and e[key] >= 0, f"{where}.error.{key}", "a non-negative number", e[key])
        _check(isinstance(e["against"], str), f"{where}.error.against", "a string", e["against"])


def _validate_build(b: Any, where: str) -> None:
    if isinstance(b, Mapping) and b.get("kernel") == "prebuild":  # RESULTS.md: {"kernel": "prebuild", "prebuild_s"}
        _need(b, where, ("kernel", "prebuild_s"))
        _check(
            _is_number(b["prebuild_s"]) and b["prebuild_s"] > 0, f"{where}.prebuild_s", "seconds (> 0)", b["prebuild_s"]
        )
        return
    _need(b, where, ("kernel", *BUILD_KEYS))
    _check(isinstance(b["kernel"], str) and b["kernel"] != "", f"{where}.kernel", "a non-empty string", b["kernel"])
    for key in BUILD_KEYS:
        v = b[key]
        _check(v is None or (_is_number(v) and v >= 0), f"{where}.{key}", "seconds (>= 0) or null", v)


def validate_report(report: Any) -> None:
    """Raise ``ReportError`` unless ``report`` has every key of RESULTS.md with the right type.

    ``error`` of a benchmark and the build times may be null (not measured); other keys may be added.
    """
    _need(report, "report", TOP_KEYS)
    for key in ("gpu", "command"):
        _check(isinstance(report[key], str) and report[key] != "", key, "a non-empty string", report[key])
    cc = report["compute_capability"]
    _check(isinstance(cc, str) and re.fullmatch(r"\d+\.\d+", cc) is not None, "compute_capability", '"9.0"', cc)
    date = report["date"]
    try:
        ok = re.fullmatch(r"\d{4}-\d{2}-\d{2}", date) is not None and bool(datetime.date.fromisoformat(date))
    except (TypeError, ValueError):
        ok = False
    _check(ok, "date", "an ISO date such as 2026-11-23", date)
    versions = report["versions"]
    _check(isinstance(versions, dict), "versions", "an object", versions)
    for key, v in versions.items():
        _check(v is None or isinstance(v, str), f"versions.{key}", "a string or null", v)
    for key in ("benchmarks", "builds"):
        _check(isinstance(report[key], list), key, "a list", report[key])
    for i, b in enumerate(report["benchmarks"]):
        _validate_benchmark(b, f"benchmarks[{i}]")
    for i, b in enumerate(report["builds"]):
        _validate_build(b, f"builds[{i}]")


TEST_RUN_KEYS = ("gpu", "date", "command", "commit", "passed", "failed", "errors", "skipped", "seconds", "failures")


def validate_test_runs(data: Any) -> None:
    """Raise ``ReportError`` unless ``data`` is a run of the GPU tests as RESULTS.md has it (one object, or
    ``{"runs": [...]}``), each with its counts, its time and the failed tests' ids."""
    runs = data["runs"] if isinstance(data, dict) and "runs" in data else [data]
    _check(isinstance(runs, list) and bool(runs), "runs", "a non-empty list", runs)
    for i, run in enumerate(runs):
        where = f"runs[{i}]"
        _need(run, where, TEST_RUN_KEYS)
        for key in ("gpu", "date", "command", "commit"):
            _check(isinstance(run[key], str) and run[key] != "", f"{where}.{key}", "a non-empty string", run[key])
        for key in ("passed", "failed", "errors", "skipped"):
            _check(_is_int(run[key]) and run[key] >= 0, f"{where}.{key}", "a count (>= 0)", run[key])
        _check(_is_number(run["seconds"]) and run["seconds"] >= 0, f"{where}.seconds", "seconds (>= 0)", run["seconds"])
        failures = run["failures"]
        _check(
            isinstance(failures, list) and all(isinstance(f, str) for f in failures),
            f"{where}.failures",
            "a list of test ids",
            failures,
        )
        _check(
            len(failures) == run["failed"] + run["errors"], f"{where}.failures", "one id per failure or error", failures
        )


# ---------------------------------------------------------------------------------------------- versions


def _driver_release() -> str | None:
    """The driver's release ("580.159.04") from NVML through cuda.bindings, else from the kernel module."""
    try:
        from cuda.bindings import nvml  # type: ignore[import-not-found]

        nvml.init_v2()
        try:
            v = nvml.system_get_driver_version()
        finally:
            nvml.shutdown()
        return v.decode() if isinstance(v, bytes) else str(v)
    except Exception:
        pass
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return None
    found = re.search(r"Kernel Module(?: for x86_64| for aarch64)?\s+(\d+\.\d+(?:\.\d+)?)", text)
    return found.group(1) if found else None


def _cuda_version() -> str | None:
    """The CUDA version the driver supports ("13.0"), through cuda.bindings; None without a driver."""
    try:
        from cuda.bindings import driver  # type: ignore[import-not-found]

        err, v = driver.cuDriverGetVersion()
        if int(err) != 0:
            return None
        return f"{v // 1000}.{(v % 1000) // 10}"
    except Exception:
        return None


def compilers() -> dict[str, str | None]:
    """The compilers that generate the kernels' machine code, as this process loads them: nvJitLink's version
    ("13.0", from the library itself) and the file NVVM is loaded from (a CUDA toolkit's or a wheel's). Two
    versions give different machine code, and a GPU machine need not have compilers.txt's (README, "Why pinned").
    None where one cannot be loaded."""
    found: dict[str, str | None] = {"nvjitlink": None, "nvvm": None}
    try:
        from cuda.bindings import nvjitlink  # type: ignore[import-not-found]

        found["nvjitlink"] = "{}.{}".format(*nvjitlink.version())
    except Exception:
        pass
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib  # type: ignore[import-not-found]

        found["nvvm"] = str(load_nvidia_dynamic_lib("nvvm").abs_path)
    except Exception:
        pass
    return found


def collect_versions(*, gpu: bool = True) -> dict[str, str | None]:
    """Versions of the GPU stack: packages from their metadata, driver and CUDA when a driver answers, and the
    compilers as loaded (``compilers``).

    A package that is not installed maps to None. ``gpu=False`` skips the driver, CUDA and compiler queries.
    """
    versions: dict[str, str | None] = {}
    for key, dists in PACKAGES.items():
        versions[key] = None
        for dist in dists:
            try:
                versions[key] = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
    if gpu:
        versions["driver"] = _driver_release()
        versions["cuda"] = _cuda_version()
        versions |= compilers()
    return versions


# ---------------------------------------------------------------------------------------------- files


def _benchmark_dict(r: BenchRecord | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(r, BenchRecord):
        return r.to_dict()
    d = dict(r)
    d.setdefault("error", None)
    return d


def build_report(
    records: Iterable[BenchRecord | Mapping[str, Any]],
    builds: Iterable[Mapping[str, Any]],
    *,
    gpu: str,
    compute_capability: str | tuple[int, int],
    command: str,
    versions: Mapping[str, str | None],
    date: str | None = None,
) -> dict[str, Any]:
    """The report as a dict, validated; ``date`` defaults to today."""
    if isinstance(compute_capability, tuple):
        compute_capability = "{}.{}".format(*compute_capability)
    report = {
        "gpu": gpu,
        "compute_capability": compute_capability,
        "date": date or datetime.date.today().isoformat(),
        "command": command,
        "versions": dict(versions),
        "benchmarks": [_benchmark_dict(r) for r in records],
        "builds": [dict(b) for b in builds],
    }
    validate_report(report)
    return report


def _cell(v: Any, fmt: str = "{:.4g}") -> str:
    return "-" if v is None else fmt.format(v)


def render_markdown(report: Mapping[str, Any]) -> str:
    """A readable page: the run's header, then benchmark and build tables."""
    versions = ", ".join(f"{k} {v}" for k, v in report["versions"].items() if v is not None)
    lines = [
        f"# {report['gpu']}",
        "",
        f"Compute capability {report['compute_capability']}, {report['date']}.",
        "",
        f"Command: `{report['command']}`",
        "",
        f"Versions: {versions or '-'}",
        "",
        "## Benchmarks",
        "",
        "Median of `repeats` runs; the band is the 20-80% quantile range. Integer GEMMs count TOPS.",
        "",
        "| name | m | n | k | params | median ms | 20-80% ms | TFLOP/s | normwise error | max elementwise | against |",
        "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for b in report["benchmarks"]:
        t, e = b["time_ms"], b["error"] or {}
        band = f"{t['q20']:.4g}-{t['q80']:.4g}" if "q20" in t and "q80" in t else "-"
        params = ", ".join(f"{k}={v}" for k, v in b["params"].items()) or "-"
        lines.append(
            f"| {b['name']} | {b['m']} | {b['n']} | {b['k']} | {params} | {t['median']:.4g} | {band} "
            f"| {b['tflops']:.4g} | {_cell(e.get('normwise'), '{:.3e}')} "
            f"| {_cell(e.get('max_elementwise'), '{:.3e}')} | {e.get('against', '-')} |"
        )
    lines += [
        "",
        "## Builds",
        "",
        "Seconds: first build in a process, after an edit, for a new shape, on a warm restart. Same output: every",
        "build's output on fixed random inputs is bit for bit that of the build without the cache.",
        "",
        "| kernel | first | edit | new shape | warm restart | same output |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    prebuilds = [b for b in report["builds"] if b["kernel"] == "prebuild"]
    for b in report["builds"]:
        if b["kernel"] == "prebuild":
            continue
        same = {True: "yes", False: "**no**"}.get(b.get("same_output_as_no_cache"), "-")
        times = " | ".join(_cell(b[key], "{:.1f}") for key in BUILD_KEYS)
        lines.append(f"| {b['kernel']} | {times} | {same} |")
    for b in prebuilds:
        lines += ["", f"Prebuild: {b['prebuild_s']:.0f} s" + (f" ({b['note']})" if b.get("note") else "") + "."]
    if report.get("notes"):
        lines += ["", "## Notes", "", *(f"- {note}" for note in report["notes"])]
    return "\n".join(lines) + "\n"


def write_report(
    records: Iterable[BenchRecord | Mapping[str, Any]],
    builds: Iterable[Mapping[str, Any]],
    *,
    gpu: str,
    compute_capability: str | tuple[int, int],
    command: str,
    versions: Mapping[str, str | None],
    out_dir: str | os.PathLike[str] = "results",
    date: str | None = None,
    notes: Iterable[str] = (),
) -> tuple[Path, Path]:
    """Validate, then write ``<out_dir>/<gpu-slug>.json`` (RESULTS.md format) and ``.md``; return both paths."""
    report = build_report(
        records, builds, gpu=gpu, compute_capability=compute_capability, command=command, versions=versions, date=date
    )
    if notes := list(notes):
        report["notes"] = notes  # an extra key: what the run checked besides the figures
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path = out / f"{gpu_slug(gpu)}.json"
    md_path = json_path.with_suffix(".md")
    json_path.write_text(json.dumps(report, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    md_path.write_text(render_markdown(report), encoding="utf-8")
    return json_path, md_path


def load_report(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a report and validate it."""
    report = json.loads(Path(path).read_text(encoding="utf-8"))
    validate_report(report)
    return report


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    entries = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entries.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ReportError(f"{path}:{i}: not JSON ({exc.msg})") from None
    return entries


def merge_jsonl(directory: str | os.PathLike[str]) -> tuple[list[BenchRecord], list[dict[str, Any]]]:
    """The records and builds that the recorder appended under ``directory`` (missing files read as empty)."""
    d = Path(directory)
    records = []
    for i, entry in enumerate(_read_jsonl(d / RECORDS_FILE), start=1):
        _validate_benchmark(entry, f"{d / RECORDS_FILE} entry {i}")
        records.append(BenchRecord.from_dict(entry))
    builds = _read_jsonl(d / BUILDS_FILE)
    for i, entry in enumerate(builds, start=1):
        _validate_build(entry, f"{d / BUILDS_FILE} entry {i}")
    return records, builds

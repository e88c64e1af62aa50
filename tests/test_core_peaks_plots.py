"""Data-sheet peaks, GPU names, and every plot rendered to a PNG (no GPU, no display)."""

from __future__ import annotations

from pathlib import Path

import pytest
from matplotlib.figure import Figure

from utilities import peaks, plots
from utilities.bench import make_record

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("device", "row"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM 80GB"),
        ("NVIDIA A100-SXM4-40GB", "A100 SXM 40GB"),
        ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA B200", "B200"),
        ("NVIDIA L4", "L4"),
    ],
)
def test_detect_known_devices(device: str, row: str) -> None:
    found = peaks.detect(device)
    assert found is not None and found.name == row


@pytest.mark.parametrize("device", ["NVIDIA L40", "NVIDIA GeForce RTX 4090", "NVIDIA H100 NVL", "NVIDIA GB200", ""])
def test_detect_unknown_devices(device: str) -> None:
    assert peaks.detect(device) is None


def test_h100_sxm_row_matches_the_data_sheet() -> None:
    h = peaks.PEAKS["H100 SXM"]
    assert (h.fp64_tflops, h.fp64_tensor_tflops, h.fp16_tensor_tflops) == (34.0, 67.0, 989.5)
    assert (h.int8_tensor_tops, h.bandwidth_tbs, h.sms) == (1979.0, 3.35, 132)
    assert peaks.PEAKS["H200"].bandwidth_tbs == 4.8


@pytest.mark.parametrize("p", list(peaks.PEAKS.values()), ids=list(peaks.PEAKS))
def test_peaks_rows_are_consistent(p: peaks.Peaks) -> None:
    # int8 dense tensor rate is twice the fp16 one on every generation listed (L40S's sheet: 362.05 and 733)
    assert p.int8_tensor_tops == pytest.approx(2 * p.fp16_tensor_tflops, rel=0.015)
    assert p.fp64_tensor_tflops is None or p.fp64_tensor_tflops >= p.fp64_tflops
    assert 0 < p.bandwidth_tbs < 10 and 50 <= p.sms <= 160
    assert p.source


def test_gpu_slug() -> None:
    assert peaks.gpu_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert peaks.gpu_slug("NVIDIA A100-SXM4-80GB") == "nvidia-a100-sxm4-80gb"
    assert peaks.gpu_slug("  NVIDIA  L40S ") == "nvidia-l40s"
    with pytest.raises(ValueError):
        peaks.gpu_slug("--")


def test_measured_ceilings_take_the_best_baseline_of_the_run() -> None:
    recs = [
        make_record("cublas.dgemm", [20.0], m=8192, n=8192, k=8192),
        make_record("cublas.dgemm", [40.0], m=8192, n=8192, k=8192),
        make_record("cublas.igemm", [1.0], m=8192, n=8192, k=8192),
        make_record("ozaki.fused", [0.5], m=8192, n=8192, k=8192),
    ]
    c = peaks.measured_ceilings(recs, copy_tbs=3.0)
    assert c.dgemm_tflops == pytest.approx(recs[0].tflops)
    assert c.igemm_tops == pytest.approx(recs[2].tflops)
    assert c.copy_tbs == 3.0
    assert peaks.measured_ceilings([r.to_dict() for r in recs]) == peaks.MeasuredCeilings(
        c.dgemm_tflops, c.igemm_tops, None
    )
    assert set(c.roofs()) == {"cuBLAS DGEMM", "cuBLAS int8 GEMM"}
    assert peaks.MeasuredCeilings(igemm_tops=900.0).roofs() == {"cuBLAS int8 GEMM": 900.0}


# ---------------------------------------------------------------------------------------------- plots


def _saved(fig: Figure, path: Path) -> None:
    assert isinstance(fig, Figure)
    assert path.read_bytes()[:8] == PNG_MAGIC


def _labels(fig: Figure) -> list[str]:
    return [t.get_text() for t in fig.axes[0].get_legend().get_texts()]


def test_throughput_vs_size(tmp_path: Path) -> None:
    recs = []
    for n in (1024, 2048, 4096):
        recs.append(make_record("cublas.dgemm", [1.0 * n / 1024, 1.1 * n / 1024, 1.3 * n / 1024], m=n, n=n, k=n))
        recs.append(make_record("ozaki.fused", [4.0 * n / 1024], m=n, n=n, k=n).to_dict())
    path = tmp_path / "throughput.png"
    fig = plots.throughput_vs_size(recs, path=path)
    _saved(fig, path)
    assert _labels(fig) == ["cublas.dgemm", "ozaki.fused"]
    ax = fig.axes[0]
    assert list(ax.lines[0].get_xdata()) == [1024, 2048, 4096]
    assert len(ax.collections) == 2  # a band per provider
    with pytest.raises(ValueError):
        plots.throughput_vs_size(recs, x="size")


def test_accuracy_plots(tmp_path: Path) -> None:
    slices = [3, 4, 5, 6, 7]
    errors = {"ozaki.fused": [1e-5, 1e-8, 1e-11, 1e-14, 2e-16], "ozaki.unfused": [1e-5, 1e-8, 1e-11, 1e-14, 2e-16]}
    path = tmp_path / "slices.png"
    fig = plots.accuracy_vs_slices(slices, errors, native=3e-16, path=path)
    _saved(fig, path)
    assert fig.axes[0].get_yscale() == "log"
    assert _labels(fig) == ["ozaki.fused", "ozaki.unfused", "native DGEMM", "fp64 unit roundoff 2^-53"]
    path = tmp_path / "phi.png"
    fig = plots.accuracy_vs_phi(
        [0.5, 1, 2, 4], {"7 slices": [1e-16, 1e-15, 1e-13, 1e-9]}, native={"dgemm": 2e-16}, path=path
    )
    _saved(fig, path)
    assert "dgemm" in _labels(fig)
    with pytest.raises(ValueError, match="errors for"):
        plots.accuracy_vs_slices([1, 2], {"x": [1e-3]})


def test_roofline(tmp_path: Path) -> None:
    ceilings = peaks.MeasuredCeilings(dgemm_tflops=55.0, igemm_tops=964.0, copy_tbs=3.0)
    points = {"ozaki.fused": (300.0, 15.0), "ozaki.slicing": (0.5, 0.2)}
    path = tmp_path / "roofline.png"
    fig = plots.roofline(points, ceilings, peaks=peaks.PEAKS["H100 SXM"], path=path)
    _saved(fig, path)
    labels = _labels(fig)
    assert "ozaki.fused" in labels and "ozaki.slicing" in labels
    assert sum(label.startswith("cuBLAS") for label in labels) == 2
    roof = fig.axes[0].lines[0]  # DGEMM roof: bandwidth-bound at low intensity, flat at 55 at high
    assert max(roof.get_ydata()) == 55.0
    assert min(roof.get_ydata()) == pytest.approx(3.0 * min(roof.get_xdata()))
    fig = plots.roofline([("k", 10.0, 5.0)], peaks.MeasuredCeilings(copy_tbs=3.0), path=tmp_path / "bw.png")
    _saved(fig, tmp_path / "bw.png")
    with pytest.raises(ValueError):
        plots.roofline({"bad": (0.0, 1.0)}, ceilings)


def test_time_breakdown_stacks_stages(tmp_path: Path) -> None:
    variants = {
        "unfused": {"slicing": 9.4, "products": 60.0, "epilogue": 12.0},
        "fused": {"slicing": 9.4, "products": 55.0},
    }
    path = tmp_path / "breakdown.png"
    fig = plots.time_breakdown(variants, path=path)
    _saved(fig, path)
    assert _labels(fig) == ["slicing", "products", "epilogue"]
    tops = {}
    for bar in fig.axes[0].patches:
        x = round(bar.get_x(), 3)
        tops[x] = max(tops.get(x, 0.0), bar.get_y() + bar.get_height())
    assert sorted(tops.values()) == pytest.approx([64.4, 81.4])


def test_registers_occupancy(tmp_path: Path) -> None:
    sweep = [
        {"F": f, "registers": 96 + 32 * f, "spills": max(0, 64 * (f - 3)), "occupancy": 1 / f, "tflops": 100.0 * f}
        for f in (4, 1, 2, 3)
    ]
    path = tmp_path / "sweep.png"
    fig = plots.registers_occupancy(sweep, path=path)
    _saved(fig, path)
    assert len(fig.axes) == 4
    assert list(fig.axes[0].lines[0].get_xdata()) == [1, 2, 3, 4]
    with pytest.raises(KeyError, match="spills"):
        plots.registers_occupancy([{"F": 1, "registers": 1, "occupancy": 1, "tflops": 1}])


def test_path_rows_compare_every_path_with_the_fused_one() -> None:
    from utilities.roofline import Traffic, format_rows, path_rows

    fused = Traffic("fused", 2 * 10**9, 10**9, 10**11, 1)  # 3 GB, 0.1 TFLOP: memory-bound at 1 TB/s and 100 TFLOP/s
    unfused = Traffic("unfused", 5 * 10**9, 10**9, 10**11, 2)
    rows = path_rows([fused, unfused], bandwidth_tbs=1.0, tflops=100.0)
    assert [r["path"] for r in rows] == ["fused", "unfused"]
    assert rows[0]["floor_us"] == pytest.approx(3000.0) and rows[0]["bound"] == "memory"
    assert rows[1]["vs_fused"] == pytest.approx(2.0) and rows[0]["vs_fused"] == 1.0
    by_bytes = path_rows([fused, unfused], bandwidth_tbs=1.0, tflops=1.0, ratio="bytes")  # compute-bound: 0.1 s
    assert by_bytes[1]["bytes_vs_fused"] == pytest.approx(2.0) and by_bytes[1]["bound"] == "compute"
    assert "floor/fused" in format_rows(rows) and "bytes/fused" in format_rows(by_bytes)
    with pytest.raises(ValueError, match="ratio must be one of"):
        path_rows([fused], bandwidth_tbs=1.0, tflops=1.0, ratio="time")

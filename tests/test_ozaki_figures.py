"""The Ozaki-I figures render from a run's records (synthetic records here; the GPU suite passes real ones)."""

from __future__ import annotations

from utilities.bench import make_record
from utilities.ozaki.figures import breakdown, save_plots, timed_alone


def synthetic_records():
    recs = []
    for size, scale in ((2048, 1 / 64), (4096, 1 / 8), (8192, 1.0)):
        recs.append(make_record("cublas.dgemm", [20.0 * scale] * 3, m=size, n=size, k=size))
        recs.append(make_record("ozaki.fused", [37.0 * scale] * 3, m=size, n=size, k=size, params={"slices": 7}))
    recs.append(make_record("ozaki.slicing", [1.0] * 3, m=8192, n=8192, k=8192, params={"slices": 7}))
    recs.append(make_record("ozaki.fused.kernel", [36.0] * 3, m=8192, n=8192, k=8192, params={"slices": 7}))
    for variant, products in (("unfused", 40.0), ("partial", 42.0)):
        recs.append(make_record(f"ozaki.{variant}", [products + 6] * 3, m=8192, n=8192, k=8192))
        recs.append(make_record(f"ozaki.{variant}.products", [products] * 3, m=8192, n=8192, k=8192))
        recs.append(make_record(f"ozaki.{variant}.epilogue", [4.0] * 3, m=8192, n=8192, k=8192))
    for slices in range(3, 11):
        error = {"normwise": 10.0 ** (-3 - slices), "max_elementwise": 1e-9, "against": "double-double"}
        recs.append(make_record("ozaki.fused", [1.0], m=2048, n=2048, k=2048, params={"slices": slices, "phi": 0.0},
                                error=error))  # fmt: skip
    native = {"normwise": 5e-16, "max_elementwise": 1e-10, "against": "double-double"}
    recs.append(make_record("cublas.dgemm", [1.0], m=2048, n=2048, k=2048, params={"phi": 0.0}, error=native))
    return recs


def test_breakdown_has_every_variant_and_dgemm():
    parts = breakdown([r for r in synthetic_records() if r.m == 8192 and "phi" not in r.params])
    assert set(parts) == {"unfused", "partial", "fused", "cuBLAS DGEMM"}
    assert parts["unfused"] == {"slicing": 1.0, "products": 40.0, "epilogue": 4.0}
    assert parts["fused"] == {"slicing": 1.0, "products + epilogue": 36.0}


def test_save_plots_writes_three_pngs(tmp_path):
    paths = save_plots(synthetic_records(), str(tmp_path))
    assert len(paths) == 3
    for path in paths:
        data = open(path, "rb").read()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_interleaved_headline_and_sweeps_stay_out_of_the_breakdown():
    headline = make_record(
        "ozaki.fused", [99.0] * 3, m=8192, n=8192, k=8192, params={"slices": 7, "timing": "interleaved"}
    )
    recs = [*synthetic_records(), headline]
    alone = timed_alone(recs)
    assert headline not in alone and not any("phi" in r.params for r in alone)
    assert breakdown([r for r in alone if r.m == 8192])["fused"]["products + epilogue"] == 36.0

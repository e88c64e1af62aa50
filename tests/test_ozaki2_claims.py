"""The accuracy claims of the Ozaki-II track (``utilities.ozaki2.precision.accuracy_claims``), fed records as the
GPU runs write them: a square sweep (4b's) and a long-K sweep (``tools/ozaki2_report.py --accuracy-k``) in one list,
each case judged against DGEMM on its own inputs only."""

from __future__ import annotations

from utilities.bench import BenchRecord, Timing
from utilities.ozaki2.precision import accuracy_claims


def _record(name: str, m: int, k: int, phi: float, error: float, **params) -> BenchRecord:
    return BenchRecord(
        name=name,
        m=m,
        n=m,
        k=k,
        time=Timing.from_times([1.0]),
        tflops=1.0,
        params={"phi": phi, **params},
        error={"normwise": error},
    )


def _sweep() -> list[BenchRecord]:
    return [
        _record("ozaki2.fixed", 2048, 2048, 0.0, 9e-14, moduli=12, auto=False),  # a fixed count is no claim
        _record("cublas.dgemm", 2048, 2048, 0.0, 3e-15),
        _record("ozaki2.auto", 2048, 2048, 0.0, 3e-16, moduli=15, auto=True),
        _record("ozaki.auto", 2048, 2048, 0.0, 4e-15, slices=7, auto=True),
        _record("cublas.dgemm", 1024, 16384, 0.0, 8e-15),
        _record("ozaki2.auto", 1024, 16384, 0.0, 7e-16, moduli=16, auto=True),
        _record("cublas.dgemm", 1024, 16384, 4.0, 2e-15),
        _record("ozaki2.auto", 1024, 16384, 4.0, 5e-15, moduli=17, auto=True),
    ]


def test_each_case_is_judged_against_dgemm_on_its_own_inputs():
    claims = {statement: (held, what) for statement, held, what in accuracy_claims(_sweep())}
    assert list(claims) == [
        "ozaki2.auto no less accurate than DGEMM at phi = 0.0",
        "ozaki.auto no less accurate than DGEMM at phi = 0.0",
        "ozaki2.auto no less accurate than DGEMM at phi = 0.0, k = 16384 (m = n = 1024)",
        "ozaki2.auto no less accurate than DGEMM at phi = 4.0, k = 16384 (m = n = 1024)",
    ]
    assert claims["ozaki2.auto no less accurate than DGEMM at phi = 0.0"] == (
        True,
        "ozaki2.auto at phi = 0.0: 15 moduli, 3.00e-16 against DGEMM's 3.00e-15",
    )
    assert claims["ozaki.auto no less accurate than DGEMM at phi = 0.0"][0] is False  # 4e-15 against 3e-15
    assert claims["ozaki2.auto no less accurate than DGEMM at phi = 0.0, k = 16384 (m = n = 1024)"][0] is True
    held, what = claims["ozaki2.auto no less accurate than DGEMM at phi = 4.0, k = 16384 (m = n = 1024)"]
    assert held is False and "17 moduli, 5.00e-15 against DGEMM's 2.00e-15" in what


def test_an_equal_error_holds_and_a_fixed_count_is_never_a_claim():
    records = [
        _record("ozaki2.fixed", 512, 512, 0.0, 1.0, moduli=12, auto=False),
        _record("cublas.dgemm", 512, 512, 0.0, 2e-15),
        _record("ozaki2.auto", 512, 512, 0.0, 2e-15, moduli=14, auto=True),
    ]
    assert [(s, held) for s, held, _ in accuracy_claims(records)] == [
        ("ozaki2.auto no less accurate than DGEMM at phi = 0.0", True)
    ]

"""The Ozaki-II stage figure: each stage of the design asked for, beside its floor (CPU: records as the report
writes them)."""

from __future__ import annotations

from utilities.ozaki2 import figures


def _record(name: str, ms: float, floor_ms: float, **params: object) -> dict:
    return {
        "name": name,
        "m": 8192,
        "n": 8192,
        "k": 8192,
        "params": {"moduli": 15, "floor_ms": floor_ms, **params},
        "time_ms": {"median": ms, "min": ms, "max": ms, "repeats": 3, "q20": ms, "q80": ms},
        "tflops": 1.0,
        "error": None,
    }


RECORDS = [
    _record("ozaki2.choice", 1.8, 0.38),
    _record("ozaki2.scaling", 4.3, 0.86),  # the same in every design: its params name none
    _record("ozaki2.products", 15.8, 13.0, products="per-modulus", digits="early", overlap=True),
    _record("ozaki2.products", 17.6, 13.0, products="batched", digits="early", overlap=False),
    _record("ozaki2.products", 13.0, 11.8, products="per-modulus", digits="late", overlap=True),
    _record("ozaki2.reconstruct", 1.1, 0.37, products="per-modulus", digits="early", overlap=True),
    _record("ozaki2.reconstruct", 3.2, 1.08, products="per-modulus", digits="late", overlap=True),
]


def _bars(fig) -> dict[str, tuple[float, float]]:
    """Each stage's (measured, floor) bar heights, by the tick labels."""
    ax = fig.axes[0]
    names = [t.get_text() for t in ax.get_xticklabels()]
    measured, floor = ax.containers[0], ax.containers[1]
    return {n: (m.get_height(), f.get_height()) for n, m, f in zip(names, measured, floor, strict=True)}


def test_each_design_shows_its_own_products_and_reconstruction_beside_the_shared_stages():
    early = _bars(figures.stages_against_floors(RECORDS))
    late = _bars(figures.stages_against_floors(RECORDS, digits="late"))
    assert list(early) == list(late) == ["choice", "scaling", "products", "reconstruct"]
    assert early["choice"] == late["choice"] == (1.8, 0.38) and early["scaling"] == late["scaling"] == (4.3, 0.86)
    assert early["products"] == (15.8, 13.0) and early["reconstruct"] == (1.1, 0.37)  # never the batched one
    assert late["products"] == (13.0, 11.8) and late["reconstruct"] == (3.2, 1.08)

"""Calibration of the automatic precision: estimates beside measured errors, on the GPU sweep's own inputs.

    python tools/precision_calibration.py             # n = 2048, seed 4: the inputs of the H100 accuracy sweep
    python tools/precision_calibration.py --size 512  # a quicker look

For each phi it chooses the Ozaki-I slices and Ozaki-II moduli (``slices_needed``, ``moduli_needed``) and, for the
chosen count and the one below, prints: the estimate for the worst row or column of C (what the choice uses), the
estimate for the whole matrix, and the normwise error measured on the sampled rows against the exact product
(double-double), beside NumPy's FP64 GEMM on the same rows. The references are row by row (a row of the result
depends on that row of A and on all of B), so only the sampled rows are computed; on the H100 the GPU stages gave
these references' results bit for bit (``tests/test_ozaki*_gpu.py``). Writes ``results/precision-calibration.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from utilities import errors, exact, inputs  # noqa: E402
from utilities.inputs import sample_rows  # noqa: E402
from utilities.ozaki import ozaki_gemm_ref  # noqa: E402
from utilities.ozaki import precision as p1  # noqa: E402
from utilities.ozaki.slicing import col_shifts, row_shifts  # noqa: E402
from utilities.ozaki2 import precision as p2  # noqa: E402
from utilities.ozaki2 import reference as r2  # noqa: E402
from utilities.precision import LineNorms  # noqa: E402

U = 2.0**-53


def whole_matrix_estimate(row_eps2: np.ndarray, col_eps2: np.ndarray, norms: LineNorms, dropped: float = 0.0) -> float:
    """The error of the whole of C against ||C||_F (what the worst row or column replaced), in u: representation,
    plus ``dropped`` times the sum of the eps^2 products (Ozaki-I's dropped diagonal)."""
    err = (row_eps2.sum() * norms.b_cols.sum() + norms.a_rows.sum() * col_eps2.sum()) / 3
    err += dropped * row_eps2.sum() * col_eps2.sum()
    return float(np.sqrt(err / norms.c_rows.sum()) / U)


def calibrate(size: int, seed: int, phis: list[float]) -> list[dict]:
    rows = sample_rows(size, count=16, seed=seed)
    out = []
    for phi in phis:
        if phi == 0:
            a, b = inputs.normal(size, size, seed), inputs.normal(size, size, seed + 1)
        else:
            a, b = inputs.exponent_spread(size, size, phi, seed + 2), inputs.exponent_spread(size, size, phi, seed + 3)
        hi, lo = exact.matmul_dd(a[rows], b)
        native = errors.normwise_relative_error(a[rows] @ b, hi, lo) / U
        norms = LineNorms.of(a, b)
        one, two = p1.slices_needed(a, b), p2.moduli_needed(a, b)
        e, f = row_shifts(a).astype(np.int64), col_shifts(b).astype(np.int64)
        terms = r2.line_terms(a, 1), r2.line_terms(b, 0)
        for choice, run in ((one, ozaki_gemm_ref), (two, r2.ozaki2_gemm_ref)):
            for count in (choice.count - 1, choice.count):
                if count not in choice.tried:
                    continue
                if choice.scheme == "Ozaki-I":
                    dropped = np.ldexp(size * (count - 1) * p1.DIGIT_RMS_SQ, 16 * count)
                    row_eps2 = np.ldexp(1.0, 2 * (e - norms.ea - 8 * count))
                    col_eps2 = np.ldexp(1.0, 2 * (f - norms.eb - 8 * count))
                    whole = whole_matrix_estimate(row_eps2, col_eps2, norms, dropped)
                else:
                    t = r2.crt(count).t
                    mu, nu = r2.exponent_from_terms(*terms[0], t), r2.exponent_from_terms(*terms[1], t)
                    whole = whole_matrix_estimate(
                        np.ldexp(1.0, -2 * (mu + norms.ea)), np.ldexp(1.0, -2 * (nu + norms.eb)), norms
                    )
                measured = errors.normwise_relative_error(run(a[rows], b, count), hi, lo) / U
                entry = {
                    "phi": phi,
                    "scheme": choice.scheme,
                    "count": count,
                    "chosen": count == choice.count,
                    "worst_line_estimate_u": choice.tried[count],
                    "whole_matrix_estimate_u": whole,
                    "measured_u": measured,
                    "fp64_gemm_u": native,
                    "target_u": choice.target,
                }
                out.append(entry)
                print(
                    f"phi {phi:3}  {choice.scheme:8} {count:2} {'chosen' if entry['chosen'] else 'below ':6}  "
                    f"worst line {choice.tried[count]:10.3g} u  whole {whole:10.3g} u  measured {measured:10.3g} u  "
                    f"FP64 GEMM {native:6.3g} u  target {choice.target:5.3g} u",
                    flush=True,
                )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=2048, help="m = n = k (default 2048, the H100 sweep's)")
    parser.add_argument("--seed", type=int, default=4, help="the sweep's seed (default 4)")
    parser.add_argument("--json", default=str(ROOT / "results" / "precision-calibration.json"))
    args = parser.parse_args(argv)
    start = time.perf_counter()
    entries = calibrate(args.size, args.seed, [0.0, 0.5, 1.0, 2.0, 4.0])
    command = f"python tools/precision_calibration.py --size {args.size} --seed {args.seed}"
    seconds = round(time.perf_counter() - start)
    data = {"command": command, "date": time.strftime("%Y-%m-%d"), "seconds": seconds, "entries": entries}
    Path(args.json).write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Accuracy of the NumPy Ozaki-I reference against a double-double A @ B, beside native FP64 (NumPy) DGEMM.

Usage: python tools/measure_reference_accuracy.py [--size 512]
Prints three tables: seeds 0..2 at 7 slices; 3..10 slices at seed 0; exponent spreads phi at 7 slices.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from utilities import inputs  # noqa: E402
from utilities.errors import error_report  # noqa: E402
from utilities.exact import matmul_dd  # noqa: E402
from utilities.ozaki import ozaki_gemm_ref  # noqa: E402

HEADER = f"{'normwise emu':>13} {'normwise fp64':>13} {'ratio':>8} {'max elem emu':>13} {'max elem fp64':>13}"


def row(a: np.ndarray, b: np.ndarray, slices: int, reference: tuple[np.ndarray, np.ndarray]) -> str:
    """One table row: normwise and max elementwise errors of the emulation and of a @ b, and their normwise ratio."""
    emulated = error_report(ozaki_gemm_ref(a, b, slices), *reference)
    native = error_report(a @ b, *reference)
    ratio = emulated["normwise"] / native["normwise"]
    return (
        f"{emulated['normwise']:13.3e} {native['normwise']:13.3e} {ratio:8.3g} "
        f"{emulated['max_elementwise']:13.3e} {native['max_elementwise']:13.3e}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=512, help="m = k = n (default 512)")
    size = parser.parse_args().size
    print(f"Ozaki-I NumPy reference vs native FP64, {size}^3, errors against matmul_dd (double-double)\n")

    print(f"normal inputs, 7 slices\n{'seed':>5} {HEADER}")
    for seed in range(3):
        a, b = inputs.normal(size, size, 2 * seed), inputs.normal(size, size, 2 * seed + 1)
        print(f"{seed:>5} {row(a, b, 7, matmul_dd(a, b))}")

    print(f"\nnormal inputs, seed 0\n{'S':>5} {HEADER}")
    a, b = inputs.normal(size, size, 0), inputs.normal(size, size, 1)
    reference = matmul_dd(a, b)
    for slices in range(3, 11):
        print(f"{slices:>5} {row(a, b, slices, reference)}")

    print(f"\nexponent_spread(phi) inputs, seed 0, 7 slices\n{'phi':>5} {HEADER}")
    for phi in (0.0, 0.5, 1.0, 2.0, 4.0):
        a, b = inputs.exponent_spread(size, size, phi, 0), inputs.exponent_spread(size, size, phi, 1)
        print(f"{phi:>5} {row(a, b, 7, matmul_dd(a, b))}")


if __name__ == "__main__":
    main()

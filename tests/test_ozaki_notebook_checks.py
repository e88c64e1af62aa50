"""The GPU test of Ozaki-I's variants covers every shape and slice count the notebooks' end-to-end checks use (3b's
unfused variant once failed its own check at a shape no GPU test ran)."""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat
import pytest
from test_ozaki_gpu import NOTEBOOK_CHECKS

ROOT = Path(__file__).resolve().parent.parent


def checked(stem: str) -> list[tuple[tuple[int, int, int], int]]:
    """The ``(shape, slices)`` pairs a notebook's end-to-end check loops over (``for shape, slices in [...]``)."""
    nb = nbformat.read(ROOT / "solutions" / f"{stem}.ipynb", as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and "check_ozaki_gemm" in cell.source:
            for node in ast.walk(ast.parse(cell.source)):
                if isinstance(node, ast.For) and ast.unparse(node.target) == "(shape, slices)":
                    return ast.literal_eval(node.iter)
    raise AssertionError(f"{stem}: no end-to-end check loop 'for shape, slices in [...]' found")


@pytest.mark.parametrize("stem", ["3b_ozaki_unfused", "3c_ozaki_partial", "3d_ozaki_fused"])
def test_every_check_of_a_notebook_runs_on_the_gpu_test(stem):
    missing = [case for case in checked(stem) if tuple(case) not in {tuple(c) for c in NOTEBOOK_CHECKS}]
    assert not missing, f"{stem} checks {missing}: add them to tests/test_ozaki_gpu.py's NOTEBOOK_CHECKS"

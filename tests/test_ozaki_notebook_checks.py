"""The GPU test of Ozaki-I's variants covers every shape and slice count the notebooks' end-to-end checks use (3b's
unfused variant once failed its own check at a shape no GPU test ran)."""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat
import pytest
from test_ozaki_gpu import NOTEBOOK_CHECKS

ROOT = Path(__file__).resolve().parent.parent


def checked(stem: str) -> list[tuple[tuple[int, int, int], int, str]]:
    """The ``(shape, slices, block)`` a notebook's end-to-end check loops over (``for shape, slices, block in
    [...]``): ``block`` is "" for the plan's own tile, else the source of the one it builds (``check.OTHER_TILE``)."""
    nb = nbformat.read(ROOT / "solutions" / f"{stem}.ipynb", as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and "check_ozaki_gemm" in cell.source:
            for node in ast.walk(ast.parse(cell.source)):
                if isinstance(node, ast.For) and ast.unparse(node.target) == "(shape, slices, block)":
                    out = []
                    for case in node.iter.elts:
                        shape, slices, block = case.elts
                        tile = "" if isinstance(block, ast.Constant) and block.value is None else ast.unparse(block)
                        out.append((ast.literal_eval(shape), ast.literal_eval(slices), tile))
                    return out
    raise AssertionError(f"{stem}: no end-to-end check loop 'for shape, slices, block in [...]' found")


@pytest.mark.parametrize("stem", ["3b_ozaki_unfused", "3c_ozaki_partial", "3d_ozaki_fused"])
def test_every_check_of_a_notebook_runs_on_the_gpu_test(stem):
    """Each (shape, slices) at the plan's tile runs in tests/test_ozaki_gpu.py; the one at the contract's other tile
    (issue 41) in tests/test_course_parameters_gpu.py, at GEMM_SHAPES[1] and 7 slices."""
    from utilities.ozaki import check

    cases = checked(stem)
    own = [(shape, slices) for shape, slices, tile in cases if not tile]
    missing = [case for case in own if tuple(case) not in {tuple(c) for c in NOTEBOOK_CHECKS}]
    assert not missing, f"{stem} checks {missing}: add them to tests/test_ozaki_gpu.py's NOTEBOOK_CHECKS"
    other = [(shape, slices, tile) for shape, slices, tile in cases if tile]
    assert other == [(check.GEMM_SHAPES[1], 7, "check.OTHER_TILE")], other

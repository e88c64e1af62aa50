"""A check cell's output is its one-line verdict: no ``Out`` value under it that repeats the verdict as
``CheckResult(...)``, ``True`` or a table printed twice (what an attendee would read as more output)."""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "solutions").glob("*.ipynb")) + sorted((ROOT / "notebooks").glob("*.ipynb"))
# The calls a cell may end with: they print what they have to say and return nothing IPython shows (None, or a value
# whose ``_ipython_display_`` shows nothing: a check's result, a claim, a printed table), or they display by design.
QUIET_CALLS = {"claim", "print_table", "record", "display", "print", "preflight", "free_all_blocks", "show", "reveal"}


def last_call(source: str) -> str | None:
    """The dotted name of the call a cell ends with, "" when it ends with another expression, None when it ends
    with a statement (nothing shown)."""
    try:
        body = ast.parse(source).body
    except SyntaxError:  # a cell with IPython magics: none in the course
        return None
    if not body or not isinstance(body[-1], ast.Expr):
        return None
    value = body[-1].value
    return ast.unparse(value.func) if isinstance(value, ast.Call) else ""


def shows_nothing(name: str) -> bool:
    return name.startswith("check.") or name.rsplit(".", 1)[-1] in QUIET_CALLS


def test_the_rule_sees_what_a_cell_ends_with() -> None:
    assert last_call("x = 1") is None
    assert last_call("check.check_slicing(run)") == "check.check_slicing"
    assert last_call("ok = f()\nok") == ""
    assert last_call("cp.get_default_memory_pool().free_all_blocks()") == "cp.get_default_memory_pool().free_all_blocks"
    assert shows_nothing("check.check_epilogue") and shows_nothing("bench.claim")
    assert not shows_nothing("buildcache.install")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[f"{p.parent.name}/{p.stem}" for p in NOTEBOOKS])
def test_no_cell_ends_with_a_value_that_shows_as_out(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    loud = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        name = last_call(cell.source)
        if name is not None and not shows_nothing(name):
            loud.append(f"cell {index} ends with {name or 'an expression'}")
    assert not loud, f"{path.relative_to(ROOT)}: an Out value would show under the cell's output: " + "; ".join(loud)


def test_a_check_result_a_claim_and_a_table_show_no_out_value_in_a_kernel(tmp_path: Path) -> None:
    cells = [
        "from utilities import bench\nfrom utilities.checker import passed\npassed('stage', 3, 1)",
        "bench.claim('it held', True, '')",
        "bench.print_table([])",
        "1 + 1",  # the control: a plain value does show
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    results = [[o for o in cell.outputs if o.output_type == "execute_result"] for cell in nb.cells]
    assert results[:3] == [[], [], []]
    assert results[3] and results[3][0]["data"]["text/plain"] == "2"
    printed = "".join(o.get("text", "") for o in nb.cells[0].outputs)
    assert "✓ stage: passed on 3 inputs" in printed  # the verdict is still there, once

"""Every parameter exercised (issue 41, item 2): each kernel exercise is checked at two values of every size its
factory's Matmul takes (tile heights and widths, K stages, threads, pipeline depth, and 2b's N0, N1 and keep_d0), at
shapes where a size held in an index gives a wrong result; the contract (each check module's constant) says which.

Without a GPU: the contracts differ in every field, the checks' shapes hold several tiles of each block along every
axis, each notebook's check cell builds its plans from the contract, and NumPy stand-ins of kernels that hold one
block's size in an index pass at that block and are rejected at the other, named where the checker recomputes it.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest

from utilities.checker import CheckFailure
from utilities.conv import check as conv
from utilities.conv.layout import PipeConfig
from utilities.fusion import check as fusion
from utilities.fusion import reference as fref
from utilities.guard import Canvas
from utilities.multipass import check as multipass
from utilities.multipass.config import PassConfig
from utilities.ozaki import check as ozaki
from utilities.ozaki.simt import tile_config
from utilities.primer import check as primer
from utilities.primer.reference import product

ROOT = Path(__file__).resolve().parents[1]


def _gpu_tool():
    spec = importlib.util.spec_from_file_location("mutation_gpu_cells", ROOT / "tools" / "mutation_gpu.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _fields(configs) -> dict[str, set]:
    out: dict[str, set] = {}
    for config in configs:
        for key, value in config.items():
            out.setdefault(key, set()).add(value)
    return out


def _differ_everywhere(configs) -> list[str]:
    """The fields that take one value only (every config must name the same fields)."""
    assert len({tuple(sorted(c)) for c in configs}) == 1, configs
    return [key for key, values in _fields(configs).items() if len(values) < 2]


def test_every_contract_takes_two_values_of_every_field():
    assert _differ_everywhere(primer.CONFIGS) == []
    assert _differ_everywhere(fusion.GEMM_CONFIGS) == []
    assert _differ_everywhere(conv.CONV_CONFIGS) == []
    b2b = [
        {**c["block"], "n0": c["shape"][2], "n1": c["shape"][3], "keep_d0": c["keep_d0"]} for c in fusion.B2B_CONFIGS
    ]
    assert _differ_everywhere(b2b) == []
    pipe = [dict(tile_m=p.tile_m, tile_k=p.tile_k, threads=p.threads, depth=p.depth)
            for p in (PipeConfig(tile_n=64, **c) for c in conv.CONV_B2B_CONFIGS)]  # fmt: skip
    assert _differ_everywhere(pipe) == []
    passes = [PassConfig(dtype, **fields) for dtype, fields in multipass.CONFIGS.items()]
    sizes = [dict(tile_m=p.tile_m, tile_n=p.tile_n, threads=p.threads, phase_k=p.phase_k) for p in passes]
    assert _differ_everywhere(sizes) == []
    for cc in ((8, 0), (9, 0)):  # the GPUs whose tile is 128 deep; sm_86/89's is 64 deep, as OTHER_TILE's
        course = tile_config("unfused", cc)
        same = [key for key, value in ozaki.OTHER_TILE.items() if getattr(course, key) == value]
        assert same == [], (cc, same)


def _tiles(size: int, tile: int) -> int:
    """Tiles along an axis of an Ozaki plan, which pads its operands to whole tiles."""
    return -(-size // tile)


def test_the_checks_shapes_hold_several_tiles_of_every_block_along_every_axis():
    m, n = 2 * 128, 3 * 128  # the primer's cell: 2 TM x 3 TN of the course's block
    for c in primer.CONFIGS:
        assert m % c["tile_m"] == 0 and n % c["tile_n"] == 0 and m // c["tile_m"] >= 2 and n // c["tile_n"] >= 2
    for c in fusion.GEMM_CONFIGS:
        m, n, k = 384, 256, 192  # 2a's cell
        assert (m % c["tile_m"], n % c["tile_n"], k % c["tile_k"]) == (0, 0, 0)
        assert min(m // c["tile_m"], n // c["tile_n"], k // c["tile_k"]) >= 2
    for c in fusion.B2B_CONFIGS:
        m, k0, _, _ = c["shape"]
        assert m % c["block"]["tile_m"] == 0 and m // c["block"]["tile_m"] >= 2 and k0 // c["block"]["tile_k"] >= 2
    s = conv.CONV_SHAPE
    for c in conv.CONV_CONFIGS:
        assert s.m % c["tile_m"] == 0 and s.c_out % c["tile_n"] == 0 and s.c_in % c["tile_k"] == 0
        assert s.m // c["tile_m"] >= 2 and s.c_out // c["tile_n"] >= 2
    s = conv.B2B_SHAPE
    for c in conv.CONV_B2B_CONFIGS:
        tile_m = PipeConfig(tile_n=s.c_mid, **c).tile_m
        assert s.m % tile_m == 0 and s.m // tile_m >= 2
    for dtype, fields in multipass.CONFIGS.items():
        cfg = PassConfig(dtype, **fields)
        shapes = multipass.pass_gemm_shapes(cfg.phase_k, (cfg.tile_m, cfg.tile_n))
        assert all(m % cfg.tile_m == 0 and n % cfg.tile_n == 0 for m, n, _ in shapes)
        assert max(m // cfg.tile_m for m, _, _ in shapes) >= 2 and max(n // cfg.tile_n for _, n, _ in shapes) >= 2
    m, n, k = ozaki.GEMM_SHAPES[1]
    t = ozaki.OTHER_TILE
    assert min(_tiles(m, t["tile_m"]), _tiles(n, t["tile_n"]), _tiles(k, t["tile_k"])) >= 2


CONTRACTS = {  # exercise of tools/mutation_gpu.py -> the contract its check cell must build its plans from
    "0 primer": "CONFIGS",
    "1 multipass": "CONFIGS",
    "2a gemm_bias_relu": "GEMM_CONFIGS",
    "2b b2b": "B2B_CONFIGS",
    "2c conv epilogue": "CONV_CONFIGS",
    "2d b2b epilogues": "CONV_B2B_CONFIGS",
    "3b products": "OTHER_TILE",
    "3c diagonals": "OTHER_TILE",
    "3d fused": "OTHER_TILE",
}


@pytest.mark.parametrize("exercise", list(CONTRACTS))
def test_each_kernel_exercise_is_checked_at_its_contracts_blocks(exercise):
    """The check cell reads the contract (``check.<NAME>``) and hands each plan's block to the check (``block=`` or
    the multi-pass tile), so that the messages and the race run name it."""
    cells = _gpu_tool().GPU_EXERCISES
    cell = cells[exercise]
    nb = nbformat.read(ROOT / "solutions" / f"{cell.stem}.ipynb", as_version=4)
    source = next(c.source for c in nb.cells if c.get("id") == cell.check)
    tree = ast.parse(source)
    names = {ast.unparse(node) for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    assert f"check.{CONTRACTS[exercise]}" in names, source
    keywords = {kw.arg for node in ast.walk(tree) if isinstance(node, ast.Call) for kw in node.keywords}
    assert {"block"} <= keywords or {"tile"} <= keywords, keywords


def test_every_kernel_exercise_of_the_gpu_tool_has_a_contract():
    kernels = {name for name in _gpu_tool().GPU_EXERCISES if not name.startswith("4b")}  # 4b: device functions
    assert kernels == set(CONTRACTS)  # 4b's factories take the count and the path: checked at 2..20, both paths


# --- NumPy stand-ins of kernels that hold one block's size in an index ---------------------------------------


def gemm_bias_relu(tile_n: int, held: int | None = None):
    """relu(a @ b + bias) as the kernel computes it with blocks ``tile_n`` wide; ``held``: a width written into the
    bias's column offset (block j reads bias[held j + c]; past the bias, zeros)."""

    def run(a, b, bias):
        acc = a.astype(np.float32) @ b.astype(np.float32)
        n = acc.shape[1]
        cols = np.arange(n)
        at = (held or tile_n) * (cols // tile_n) + cols % tile_n
        read = np.where(at < n, bias[np.minimum(at, n - 1)].astype(np.float32), np.float32(0))
        return np.maximum(acc + read, 0).astype(np.float16)

    return run


def test_a_width_held_in_the_bias_offset_passes_its_own_block_and_fails_the_other_named():
    wide, narrow = (c["tile_n"] for c in sorted(fusion.GEMM_CONFIGS, key=lambda c: -c["tile_n"]))
    shape = (384, 256, 192)
    for seed in (1, 2, 3):
        assert fusion.check_gemm_bias_relu(gemm_bias_relu(wide, wide), shape=shape, seed=seed, block={"tile_n": wide})
        with pytest.raises(fusion.CheckFailure) as info:
            fusion.check_gemm_bias_relu(gemm_bias_relu(narrow, wide), shape=shape, seed=seed, block={"tile_n": narrow})
        assert f"a block width of {wide} hard-coded" in str(info.value), str(info.value)


def tile_gemm(tile: tuple[int, int], held: tuple[int, int] | None = None):
    """C = A @ B block by block, into a guard band, each block storing its tile at (i TM, j TN); ``held``: the tile
    size written into the offsets instead (a block of the grid may then store past C)."""

    def run(a, b):
        m, n = a.shape[0], b.shape[1]
        c = Canvas((m, n), np.float32, fill=np.nan)
        want = product(a, b)
        tm, tn = tile
        hm, hn = held or tile
        flat = c.buffer[c.guard :]
        for i in range(m // tm):
            for j in range(n // tn):
                for r in range(tm):  # row by row, as the block's stores land in the flat buffer
                    at = (i * hm + r) * n + j * hn
                    if 0 <= at and at + tn <= flat.size:
                        flat[at : at + tn] = want[i * tm + r, j * tn : j * tn + tn]
        return c.written()

    return run


def test_a_tile_size_held_in_a_blocks_offsets_passes_its_own_block_and_fails_the_other():
    shape = (256, 384, 64)
    big, small = sorted(((c["tile_m"], c["tile_n"]) for c in primer.CONFIGS), reverse=True)
    assert primer.check_tile_gemm(tile_gemm(big, big), shape=shape, tile=big, seed=1)
    with pytest.raises(CheckFailure) as info:
        primer.check_tile_gemm(tile_gemm(small, big), shape=shape, tile=small, seed=1)
    assert info.value.stage in ("C", "store"), str(info.value)


def test_d0s_fragment_held_at_one_blocks_size_is_seen_by_the_other_plan():
    """2b's second plan (N0 128, N1 64, D0 not kept) runs the whole chain: a D1 from the first plan's sizes (its
    N0 columns of D0 alone) fails it."""
    other = next(c for c in fusion.B2B_CONFIGS if not c["keep_d0"])
    m, k0, n0, n1 = other["shape"]
    held_n0 = next(c for c in fusion.B2B_CONFIGS if c["keep_d0"])["shape"][2]

    def run(a0, b0, b1, c1, alpha0, alpha1, beta1):
        d0, _ = fref.b2b_fp16(a0, b0, b1, c1, alpha0, alpha1, beta1)
        d0 = np.array(d0, copy=True)
        d0[..., held_n0:] = 0  # only the first plan's N0 columns of D0 reach GEMM 1
        acc = alpha1 * (d0.astype(np.float32) @ b1.astype(np.float32))
        if beta1 != 0:
            acc = acc + np.float32(beta1) * c1.astype(np.float32)
        return np.maximum(acc, 0).astype(np.float16)

    with pytest.raises(fusion.CheckFailure):
        fusion.check_back_to_back(run, shape=other["shape"], block=other["block"], seed=1)


@pytest.mark.parametrize("stem", sorted(p.stem for p in (ROOT / "solutions").glob("*.ipynb")))
def test_no_solution_function_loops_to_a_size_written_as_a_number(stem):
    """A check of a kernel with a contract fails at once on a loop bound written as a number of a block's sizes
    (``checker.hard_coded_bounds``): no function of a solution, which a check may be handed, has one."""
    from utilities.checker import literal_bounds

    nb = nbformat.read(ROOT / "solutions" / f"{stem}.ipynb", as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and "def " in cell.source:
            assert literal_bounds(cell.source) == [], cell.source[:200]
    assert literal_bounds("for i in range(F0):\n    pass\nfor i in range(64):\n    pass\n") == ["for i in range(64):"]

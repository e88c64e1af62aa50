"""2c's semantic mistakes (tools/mistakes/conv.py): each applies once to its exercise's source; on the CPU, the
index map's checker rejects every mistake on every seed and accepts every alternative."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from utilities import mutants
from utilities.conv import check
from utilities.notebooks import extract_definition

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(not hasattr(mutants, "Mistake"), reason="utilities.mutants has no Mistake yet")

SOURCES = {
    "2c neighbor (device function)": ("utilities/conv/simt.py", "neighbor"),
    "2c conv epilogue": ("utilities/conv/tensorcore.py", "make_conv_kernel"),
    "2d b2b epilogues": ("utilities/conv/tensorcore_persistent.py", "make_conv_b2b_kernel"),
}


def data():
    spec = importlib.util.spec_from_file_location("conv_mistakes", ROOT / "tools" / "mistakes" / "conv.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def source(exercise: str) -> str:
    path, name = SOURCES[exercise]
    return extract_definition((ROOT / path).read_text(), name)


def neighbor_from(text: str):
    namespace: dict = {}
    exec(text.replace("@cuda.jit(device=True)\n", ""), namespace)
    return namespace["neighbor"]


def test_every_replacement_applies_once():
    d = data()
    for item in [*d.MISTAKES, *d.CORRECT]:
        assert source(item.exercise).count(item.old) == 1, item


def test_index_map_mistakes_are_rejected_on_every_seed_and_alternatives_pass():
    d = data()
    for item in d.MISTAKES:
        if item.exercise == "2c neighbor (device function)":
            fn = neighbor_from(source(item.exercise).replace(item.old, item.new, 1))
            for seed in range(6):
                with pytest.raises(check.CheckFailure):
                    check.check_neighbor(fn, seed=seed)
    for item in d.CORRECT:
        if item.exercise == "2c neighbor (device function)":
            fn = neighbor_from(source(item.exercise).replace(item.old, item.new, 1))
            assert all(check.check_neighbor(fn, seed=seed).status == "passed" for seed in range(6))

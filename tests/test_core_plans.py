"""One plan shape (``utilities.plans``): every tile configuration is a ``TileConfig`` taken as ``cfg=``, every set of
replaceable kernels a ``Kernels`` taken as ``kernels=``, with the course's factories as the fallback.

The GPU modules cannot be imported here (nvmath.device needs a driver): their plans are read from the source."""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import FrozenInstanceError, dataclass
from pathlib import Path
from typing import Any

import pytest

from utilities import plans
from utilities.conv.layout import PipeConfig
from utilities.multipass.config import PassConfig, PipelineConfig

ROOT = Path(__file__).resolve().parent.parent
UTILITIES = ROOT / "utilities"
# plans that take no tile configuration, and why
NO_CFG = {"Ozaki2Gemm": "its products are cuBLAS calls: it has no tile", "UnfusedConvB2B": "it passes cfg on"}
OLD_KEYWORDS = {"tile", "threads", "kernel_factory", "neighbor", "depth"}


def _classes() -> dict[str, tuple[Path, ast.ClassDef]]:
    found = {}
    for path in sorted(UTILITIES.rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef):
                found[f"{path.relative_to(UTILITIES).with_suffix('')}.{node.name}"] = (path, node)
    return found


CLASSES = _classes()


def _bases(node: ast.ClassDef) -> list[str]:
    return [ast.unparse(b).split(".")[-1] for b in node.bases]


def _methods(node: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    """The class's own methods and those it inherits from classes of the course (found by name), its own first."""
    own = {f.name: f for f in node.body if isinstance(f, ast.FunctionDef)}
    by_name = {n.name: n for _, n in CLASSES.values()}
    for base in _bases(node):
        if base in by_name and by_name[base] is not node:
            own = {**_methods(by_name[base]), **own}
    return own


def _plans() -> dict[str, list[str]]:
    """Every class of a tensor-core module with ``__call__`` (its own or a base's, the launch the persistent plans
    share) and a constructor of its own: its constructor's argument names (none: a plan that inherits its
    constructor). A base that only shares ``__call__`` is no plan."""
    found = {}
    for name, (path, node) in CLASSES.items():
        own = {f.name for f in node.body if isinstance(f, ast.FunctionDef)}
        methods = _methods(node)
        if path.stem.startswith("tensorcore") and "__call__" in methods and "__init__" in methods:
            init = methods["__init__"] if "__init__" in own else None
            found[name] = [a.arg for a in (*init.args.args, *init.args.kwonlyargs)] if init else []
    return found


PLANS = _plans()


def test_the_plans_are_found() -> None:
    names = {name.rsplit(".", 1)[1] for name in PLANS}
    assert {
        "PassGemm",
        "GemmBiasRelu",
        "BackToBack",
        "Conv3x3",
        "ConvB2B",
        "OzakiGemm",
        "Ozaki2Gemm",
        "TileGemm",
        "StackSum",
        "PipelinedBackToBack",
        "PipelinedConv",
        "PipelineGemm",
        "HaloConv",
        "HaloConvB2B",
    } <= names
    assert not {"PersistentConv", "PersistentB2B"} & names, "a base that only shares the launch is no plan"


@pytest.mark.parametrize("plan", sorted(PLANS))
def test_every_plan_takes_its_tiles_as_cfg_and_its_kernels_as_kernels(plan: str) -> None:
    args = PLANS[plan]
    short = plan.rsplit(".", 1)[1]
    if not args:  # a plan that inherits its constructor
        return
    assert "cfg" in args or short in NO_CFG, f"{plan}({', '.join(args)}) takes no cfg="
    old = sorted(OLD_KEYWORDS & set(args))
    assert not old, f"{plan} takes {old}: tiles go in cfg=, kernels in kernels="


def test_every_tile_configuration_is_a_tile_config() -> None:
    configs = {name: node for name, (_, node) in CLASSES.items() if name.endswith("Config") and "plans." not in name}
    assert len(configs) >= 8, sorted(configs)
    names = {"TileConfig"} | {name.rsplit(".", 1)[1] for name in configs}
    for name, node in configs.items():
        bases = _bases(node)
        assert bases and all(b in names for b in bases), f"{name} derives from {bases}, not from TileConfig"


def test_every_kernels_class_extends_the_core_one_and_names_the_course_factories() -> None:
    kernels = {name: node for name, (_, node) in CLASSES.items() if name.endswith(".Kernels") and "plans." not in name}
    assert len(kernels) == 6, sorted(kernels)  # primer, multipass, fusion, conv, ozaki, ozaki2
    for name, node in kernels.items():
        assert _bases(node) == ["Kernels"], f"{name} derives from {_bases(node)}"
        fields = [ast.unparse(s.target) for s in node.body if isinstance(s, ast.AnnAssign)]
        types = {ast.unparse(s.annotation) for s in node.body if isinstance(s, ast.AnnAssign)}
        assert fields and types == {"Callable[..., Any] | None"}, f"{name}: {types}"
        course = next(f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "course")
        returned = next(n.value for n in ast.walk(course) if isinstance(n, ast.Return))
        assert [ast.unparse(k).strip("'\"") for k in returned.keys] == fields, f"{name}: course() names {fields}"


@dataclass(frozen=True, kw_only=True)
class Deep(plans.TileConfig):
    depth: int = 2


@dataclass(frozen=True)
class Two(plans.Kernels):
    first: Callable[..., Any] | None = None
    second: Callable[..., Any] | None = None

    def course(self) -> dict[str, Callable[..., Any]]:
        return {"first": course_first, "second": course_second}


def course_first() -> str:
    return "course's first"


def course_second() -> str:
    return "course's second"


def test_a_tile_config_takes_keywords_and_describes_itself() -> None:
    cfg = Deep(tile_m=64, depth=3)
    assert cfg.tile == (64, 128, 64) and cfg.extras() == {"depth": 3}
    assert cfg.describe() == "64x128x64 tile, 128 threads, depth 3"
    assert plans.TileConfig(tile_n=None).describe() == "128xallx64 tile, 128 threads"
    with pytest.raises(TypeError):
        Deep(64)  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        cfg.tile_m = 32  # type: ignore[misc]
    assert hash(cfg) == hash(Deep(tile_m=64, depth=3)) and cfg != Deep(tile_m=64)  # a cache key


def test_the_track_configs_keep_their_own_fields() -> None:
    c = PassConfig("float16", 8, 2, tile_m=64)
    assert (c.dtype, c.passes, c.fused, c.tile_m, c.tile_k, c.threads) == ("float16", 8, 2, 64, 128, 256)
    assert c.with_fused(4).tile_k == c.tile_k and c.with_fused(4).phase_k == 64
    assert PipelineConfig().describe() == "128x128xdefault tile, 256 threads, depth 3"
    p = PipeConfig.parse("128x64x32-t256-d4-g3-r")
    assert (p.tile, p.threads, p.depth, p.group, p.resident) == ((128, 64, 32), 256, 4, 3, True)
    assert isinstance(p, plans.TileConfig) and PipeConfig.parse(p.spec) == p


def test_kernels_fall_back_to_the_course_and_list_what_was_given() -> None:
    def mine() -> str:
        return "mine"

    assert Two().factory("first") is course_first and Two().given() == []
    k = Two(second=mine)
    assert k.factory("first") is course_first and k.factory("second") is mine and k.given() == [mine]
    assert Two(first=mine, second=course_second).given() == [mine, course_second]  # stage order
    with pytest.raises(AttributeError):
        k.factory("third")
    with pytest.raises(NotImplementedError, match="names no course factories"):
        plans.Kernels().course()  # the base has no fields: a subclass names its course's factories

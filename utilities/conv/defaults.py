"""The plans' default blocks on this GPU: the tensor-copy kernel's (Hopper, row tiles that are boxes), else the
gathering one's. The speed run (``benchmarks``) and notebooks 2c and 2d time what these name; CPU-safe (the GPU is
asked only through ``machinery.tma.unavailable``)."""

from __future__ import annotations

from typing import Any

from . import reference as ref


def copies_left_out(shape: ref.ConvShape, cfg: Any = None) -> str | None:
    """Why the tensor-copy kernel cannot run at ``shape`` here (a GPU before Hopper, row tiles of ``cfg``'s block,
    default the plan's, that are not boxes), or None."""
    from ..machinery import tma
    from .layout import TmaConfig

    copies = cfg or TmaConfig()
    try:
        tma.box_of(shape.height, shape.width, copies.tile_m, copies.tile_k)
    except ValueError as exc:
        return str(exc)
    return tma.unavailable()


def default_configs(shape: ref.ConvShape) -> list[Any]:
    """The plans' default blocks at ``shape``: the tensor-copy kernel's first where this GPU has tensor copies
    and the shape's row tiles are boxes (:func:`copies_left_out`), then the gathering pipelined kernel's."""
    from .layout import PipeConfig, with_tensor_copies

    tile_n = 64 if shape.c_out % 64 == 0 else 32
    gathers = PipeConfig(tile_n=tile_n)
    return [gathers] if copies_left_out(shape) else [with_tensor_copies(gathers), gathers]


def default_b2b_config(shape: ref.B2BShape) -> Any:
    """The back-to-back plan's default block at ``shape`` on this GPU: ``layout.b2b_config``'s, on tensor copies
    (``layout.with_tensor_copies``) where this GPU has them and the row tiles are boxes."""
    from .layout import b2b_config, with_tensor_copies

    cfg = b2b_config(shape.c_mid, shape.c_out)
    return cfg if copies_left_out(shape.first, cfg) else with_tensor_copies(cfg)

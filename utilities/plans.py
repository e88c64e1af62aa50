"""What every plan shares (plain Python, no GPU): its tile configuration and the kernels an attendee can replace.

A *plan* holds one problem's buffers and kernels (``PassGemm``, ``GemmBiasRelu``, ``BackToBack``, ``Conv3x3``,
``OzakiGemm``, ``Ozaki2Gemm``, ...). Every plan with tiles takes them as ``cfg=``: a :class:`TileConfig`, or the
track's subclass of it, which adds the fields that only its kernels have (pipeline depth, fused passes, resident
filters). Every plan whose kernels an attendee writes takes them as ``kernels=``: the track's subclass of
:class:`Kernels`, one field per kernel factory, ``None`` for the course's own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True, kw_only=True)
class TileConfig:
    """A block's tile: ``tile_m`` x ``tile_n`` of the output, ``tile_k`` of K a stage, on ``threads`` threads.

    ``tile_n`` is None where a block holds whole rows of the output (the back-to-back kernels). Fields are keyword
    arguments; a track's subclass adds its own after these four.
    """

    tile_m: int = 128
    tile_n: int | None = 128
    tile_k: int = 64
    threads: int = 128

    @property
    def tile(self) -> tuple[int, int | None, int]:
        """(tile_m, tile_n, tile_k)."""
        return self.tile_m, self.tile_n, self.tile_k

    def extras(self) -> dict[str, Any]:
        """The fields a subclass adds, by name."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _TILE_FIELDS}

    def describe(self) -> str:
        """One line: the tile, the threads, then what the subclass adds."""
        n = "all" if self.tile_n is None else self.tile_n  # whole rows
        k = "default" if self.tile_k is None else self.tile_k  # a subclass's default for its dtype
        extra = "".join(f", {name} {value}" for name, value in self.extras().items())
        return f"{self.tile_m}x{n}x{k} tile, {self.threads} threads{extra}"


_TILE_FIELDS = frozenset(f.name for f in fields(TileConfig))


@dataclass(frozen=True)
class Kernels:
    """Kernel factories a plan uses instead of the course's: the exercises pass the attendee's.

    A track's subclass declares one field per replaceable kernel, in the order its stages run (the order a checker
    reads their TODO regions in), each ``Callable[..., Any] | None``, and says which factory is the course's in
    :meth:`course`. A plan asks :meth:`factory` for each stage: the one given, else the course's.
    """

    def course(self) -> dict[str, Callable[..., Any]]:
        """The course's factory of every field."""
        raise NotImplementedError(f"{type(self).__name__} names no course factories")

    def factory(self, stage: str) -> Callable[..., Any]:
        """The factory of ``stage``: the one given, else the course's."""
        given = getattr(self, stage)
        return given if given is not None else self.course()[stage]

    def given(self) -> list[Callable[..., Any]]:
        """The factories given, in stage order (for a checker's ``exercise=``)."""
        return [f for f in (getattr(self, field.name) for field in fields(self)) if f is not None]

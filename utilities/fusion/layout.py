"""Shared-memory plans of the block-fusion kernels (plain Python: testable without a GPU).

Sizes and offsets are in FP16 elements, segments 1 KiB aligned (``utilities.smem``). The kernels of
``utilities.fusion.tensorcore`` and ``tensorcore_persistent`` feed these the sizes of their cuBLASDx layouts.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import smem
from ..smem import ceil_to

SMEM_ALIGN = smem.ALIGN_BYTES // 2  # FP16 elements: 1 KiB


segments = smem.fp16_segments  # offsets (FP16 elements) of 1 KiB aligned segments, and where the last one ends


def c_buffers_needed(stages: int, depth: int) -> int:
    """C1 / D1 tiles the persistent kernel keeps, so that no C1 load lands on a tile still in use.

    A row tile's C1 is loaded with its first A0 stage, ``depth - 1`` stages of the stream before that stage is
    computed. While the block works on row tile t, loads are issued up to row tile t + ceil((depth - 1) /
    stages); tile t's own buffer is still needed for its epilogue, and tile t - 1's is free (its epilogue is
    done). So ceil((depth - 1) / stages) + 1 buffers, used round robin, suffice.
    """
    if stages < 1 or depth < 2:
        raise ValueError(f"need stages >= 1 and depth >= 2, got stages={stages}, depth={depth}")
    return -(-(depth - 1) // stages) + 1


@dataclass(frozen=True)
class PersistentLayout:
    """Offsets of the persistent back-to-back kernel's shared memory (FP16 elements)."""

    b0: int  # B0 as ``stages`` stages of TK rows, ``b0_stage`` apart
    b0_stage: int
    b1: int
    d0: int  # this row tile's D0, GEMM 1's A operand
    a0: int  # ``depth`` buffers of one A0 stage, ``a0_stage`` apart
    a0_stage: int
    c: int  # ``c_buffers`` C1 / D1 tiles, ``c_tile`` apart
    c_tile: int
    c_buffers: int
    end: int

    @property
    def nbytes(self) -> int:
        return 2 * self.end


def persistent_layout(
    a_stage: int, b_stage: int, d0: int, b1: int, c_tile: int, *, stages: int, depth: int
) -> PersistentLayout:
    """Where the persistent kernel keeps B0 (all ``stages``), B1, D0, ``depth`` A0 stages and its C1 / D1 tiles,
    given each one's size (a cuBLASDx layout's cosize)."""
    b0_step, a0_step, c_step = ceil_to(b_stage, SMEM_ALIGN), ceil_to(a_stage, SMEM_ALIGN), ceil_to(c_tile, SMEM_ALIGN)
    cb = c_buffers_needed(stages, depth)
    (at_b0, at_b1, at_d0, at_a0, at_c), end = segments(stages * b0_step, b1, d0, depth * a0_step, cb * c_step)
    return PersistentLayout(at_b0, b0_step, at_b1, at_d0, at_a0, a0_step, at_c, c_step, cb, end)


def after_pipeline(pipeline_bytes: int, *sizes: int) -> tuple[list[int], int]:
    """Offsets (FP16 elements) of segments placed after a cuBLASDx pipeline's ``pipeline_bytes`` at the start of
    shared memory, each 1 KiB aligned, and where the last one ends: the pipelined back-to-back kernel's D0, B1 and
    C1 / D1 tile."""
    start = ceil_to(-(-pipeline_bytes // 2), SMEM_ALIGN)
    offsets, end = segments(*sizes)
    return [start + o for o in offsets], start + end

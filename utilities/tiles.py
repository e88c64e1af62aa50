"""The block GEMM every tensor-core track builds on: one factory of cuBLASDx ``Matmul`` descriptors (GPU only:
nvmath.device needs a CUDA driver, so only the tracks' GPU modules import this one).

A row-major, C row-major, B row-major or column-major (``b``); 16-byte alignment of every operand; a static block
size. ``pipeline=True`` asks for a descriptor that a device pipeline can stream (TMA + WGMMA where the GPU has
them): what ``DevicePipeline`` and ``reset_tile`` need.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from nvmath.device import Matmul

PRECISION = {"int8": (np.int8, np.int8, np.int32), "float16": (np.float16, np.float16, np.float32)}
OUT_DTYPE = {"int8": np.int32, "float16": np.float32}  # the accumulator's type
PIPELINE_TILE_K = {"int8": 128, "float16": 64}  # a device pipeline's stage depth (32 KiB a stage)


@functools.cache
def block_matmul(
    dtype: str,
    size: tuple[int, int, int],
    threads: int,
    *,
    b: str = "col_major",
    pipeline: bool = False,
    sm: Any = None,
    leading_dimension: tuple[int, int, int] | None = None,
) -> Matmul:
    """The block-level ``Matmul`` of a (tile_m, tile_n, tile_k) tile: ``dtype`` "int8" or "float16" operands
    (int32 or FP32 accumulator), B in the ``b`` arrangement, ``pipeline`` for a device pipeline;
    ``leading_dimension`` (A's, B's, C's) for the shared-memory layouts of ``get_layout_smem_*``."""
    if dtype not in PRECISION:
        raise ValueError(f"dtype must be one of {sorted(PRECISION)}, got {dtype!r}")
    streaming = {"with_pipeline": True, "enable_input_streaming": True} if pipeline else {}
    return Matmul(
        size=tuple(size),
        precision=PRECISION[dtype],
        data_type="real",
        arrangement=("row_major", b, "row_major"),
        execution="Block",
        block_size=threads,
        alignment=(16, 16, 16),
        static_block_dim=True,
        sm=sm,
        **streaming,
        **({"leading_dimension": tuple(leading_dimension)} if leading_dimension else {}),
    )


def pipeline_matmul(
    dtype: str, tile_m: int = 128, tile_n: int = 128, threads: int = 256, sm: Any = None, tile_k: int | None = None
) -> Matmul:
    """The pipelined block GEMM of track 1's library reference and of the Ozaki-I kernels: K stages of
    ``PIPELINE_TILE_K`` (unless ``tile_k``), A row-major, B column-major (both K-contiguous), C row-major."""
    return block_matmul(dtype, (tile_m, tile_n, tile_k or PIPELINE_TILE_K[dtype]), threads, pipeline=True, sm=sm)

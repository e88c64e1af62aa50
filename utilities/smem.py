"""Shared-memory arithmetic of the course's kernels: segments on 1 KiB boundaries (plain Python, no GPU).

Every kernel that carves its dynamic shared memory into buffers uses :func:`segments`, in bytes or in elements
of one type (``align`` in the same unit): 1 KiB is enough for any swizzled layout cuBLASDx suggests.
"""

from __future__ import annotations

ALIGN_BYTES = 1024


def ceil_to(x: int, q: int) -> int:
    """The smallest multiple of ``q`` that is at least ``x``."""
    return -(-x // q) * q


def segments(*sizes: int, align: int = ALIGN_BYTES) -> tuple[list[int], int]:
    """Offsets of consecutive segments of these sizes, each starting on a multiple of ``align``, and where the last
    one ends (rounded up to ``align``)."""
    offsets, end = [], 0
    for size in sizes:
        offsets.append(end)
        end = ceil_to(end + size, align)
    return offsets, end


def fp16_segments(*sizes: int) -> tuple[list[int], int]:
    """:func:`segments` in FP16 elements (2 bytes each): offsets and end of segments of these many elements."""
    return segments(*sizes, align=ALIGN_BYTES // 2)

"""Shared-memory arithmetic of the block-fusion kernels (``utilities.fusion.layout``), on CPU."""

from __future__ import annotations

import itertools

import pytest

from utilities.fusion import layout


def _c_conflicts(stages: int, depth: int, buffers: int, tiles: int = 12) -> list[tuple[int, int]]:
    """(stage computed, tile loaded) pairs where a C1 load would land in a buffer still in use.

    While the block computes stream stage q (row tile q // stages), the copies of stage q + depth - 1 start; if
    that is a row tile's first stage, its C1 goes to buffer tile % buffers. Every tile from the current one
    up to the one being loaded holds its buffer: the current one until its epilogue, the later ones from their
    own loads on. Earlier tiles are done (their epilogues ran before this K loop).
    """
    bad = []
    for q in range(stages * tiles):
        issued = q + depth - 1
        if issued % stages or issued // stages >= tiles:
            continue  # not a tile's first stage: no C1 load
        tile = issued // stages
        if any(tile % buffers == held % buffers for held in range(q // stages, tile)):
            bad.append((q, tile))
    return bad


@pytest.mark.parametrize(("stages", "depth"), list(itertools.product(range(1, 11), range(2, 9))))
def test_c_buffers_suffice_and_are_the_fewest(stages, depth):
    need = layout.c_buffers_needed(stages, depth)
    assert _c_conflicts(stages, depth, need) == []
    if need > 1:
        assert _c_conflicts(stages, depth, need - 1), "one buffer fewer would still do: the count is not tight"


def test_c_buffers_reject_a_pipeline_without_depth():
    with pytest.raises(ValueError, match="depth >= 2"):
        layout.c_buffers_needed(3, 1)
    with pytest.raises(ValueError, match="stages >= 1"):
        layout.c_buffers_needed(0, 3)


@pytest.mark.parametrize(
    ("sizes", "stages", "depth"),
    [
        ((64 * 64, 64 * 256, 64 * 256, 256 * 64, 64 * 64), 1, 3),  # (64, 256, 64), a 64-row tile
        ((128 * 64, 64 * 64, 128 * 64, 64 * 128, 128 * 128), 9, 3),  # (576, 64, 128), a 128-row tile
        ((1000, 3000, 700, 900, 1500), 4, 5),  # sizes that are not multiples of 1 KiB
    ],
)
def test_persistent_layout_segments_are_aligned_disjoint_and_large_enough(sizes, stages, depth):
    a, b, d0, b1, c = sizes
    lay = layout.persistent_layout(a, b, d0, b1, c, stages=stages, depth=depth)
    regions = [(lay.b0 + s * lay.b0_stage, b) for s in range(stages)]
    regions += [(lay.b1, b1), (lay.d0, d0)]
    regions += [(lay.a0 + i * lay.a0_stage, a) for i in range(depth)]
    regions += [(lay.c + i * lay.c_tile, c) for i in range(lay.c_buffers)]
    for start, size in regions:
        assert start % layout.SMEM_ALIGN == 0 and start + size <= lay.end
    ordered = sorted(regions)
    for (s0, n0), (s1, _) in itertools.pairwise(ordered):
        assert s0 + n0 <= s1, f"segments at {s0} (size {n0}) and {s1} overlap"
    assert lay.nbytes == 2 * lay.end


def test_the_benchmarked_persistent_shapes_fit_an_h100_block():
    h100_optin = 227 * 1024  # bytes of shared memory one block may opt into on an H100
    small = layout.persistent_layout(64 * 64, 64 * 256, 64 * 256, 256 * 64, 64 * 64, stages=1, depth=3)
    ex13 = layout.persistent_layout(128 * 64, 64 * 64, 128 * 64, 64 * 128, 128 * 128, stages=9, depth=3)
    assert small.nbytes == 144 * 1024 and ex13.nbytes == 216 * 1024
    assert max(small.nbytes, ex13.nbytes) <= h100_optin


@pytest.mark.parametrize("pipeline_bytes", [0, 1, 40992, 49184, 65600])
def test_segments_after_a_pipeline_start_past_it_aligned_and_disjoint(pipeline_bytes):
    sizes = (64 * 256, 256 * 64, 64 * 64)  # D0, B1, C1 / D1 of the (64, 256, 64) kernel, FP16 elements
    offsets, end = layout.after_pipeline(pipeline_bytes, *sizes)
    assert 2 * offsets[0] >= pipeline_bytes  # nothing overlaps the pipeline's stages and barriers
    assert all(o % layout.SMEM_ALIGN == 0 for o in offsets)
    for (a, size), b in zip(zip(offsets, sizes, strict=True), [*offsets[1:], end], strict=True):
        assert a + size <= b
    assert 2 * end <= 2 * offsets[0] + 2 * sum(layout.ceil_to(x, layout.SMEM_ALIGN) for x in sizes)

"""Named barriers (``utilities.machinery.named_barriers``): their checks; a producer and consumer ring compiled to
PTX with a ``bar.sync`` and a ``bar.arrive`` at each stage's two barriers and no whole-block barrier, assembled by
ptxas where it is installed; and, on a GPU (skipped without one), the same ring passing every round's values from
four warps to four others.

The ring is the handshake a warp-specialised kernel needs (issue 44): the block's last four warps write each round's
128 values into one of two stages in shared memory, the first four add them up, each side waiting only for the
other at the stage's FULL or EMPTY barrier, never for the whole block. Every eighth round the producers sleep
before they write, so that a consumer that did not wait would read the stage's old values."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest

from utilities.machinery import named_barriers

SIDE = 128  # threads a side; a stage holds one int32 for each consumer

RING_KERNEL = """
from numba import cuda, int32
from utilities.machinery import named_barriers

SIDE, ALL = 128, 256


def make_ring_kernel():
    full0, full1 = named_barriers.arrive(1, ALL), named_barriers.arrive(2, ALL)
    wait_full0, wait_full1 = named_barriers.sync(1, ALL), named_barriers.sync(2, ALL)
    empty0, empty1 = named_barriers.arrive(3, ALL), named_barriers.arrive(4, ALL)
    wait_empty0, wait_empty1 = named_barriers.sync(3, ALL), named_barriers.sync(4, ALL)

    @cuda.jit
    def ring_kernel(out, rounds):
        ring = cuda.shared.array((2, SIDE), int32)
        tid = cuda.threadIdx.x
        total = int32(0)
        for r in range(rounds):
            stage = r % 2
            if tid >= SIDE:  # a producer: the stage is free once the consumers read it, two rounds ago
                if r >= 2:
                    if stage == 0:
                        wait_empty0()
                    else:
                        wait_empty1()
                if r % 8 == 7:
                    cuda.nanosleep(4000)
                ring[stage, tid - SIDE] = int32(1000 * r + tid - SIDE)
                if stage == 0:
                    full0()
                else:
                    full1()
            else:  # a consumer: the stage is full once the producers have written it
                if stage == 0:
                    wait_full0()
                else:
                    wait_full1()
                total += ring[stage, tid] * int32(r % 7 + 1)
                if r + 2 < rounds:  # the producers wait for this stage again only if they write it again
                    if stage == 0:
                        empty0()
                    else:
                        empty1()
        if tid < SIDE:
            out[tid] = total

    return ring_kernel
"""

RING_PTX = (
    """
import os, sys
os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
from types import SimpleNamespace
import numba.cuda.dispatcher
from numba import types
numba.cuda.dispatcher.get_current_device = lambda: SimpleNamespace(compute_capability=(9, 0))
"""
    + RING_KERNEL
    + """
ptx, _ = cuda.compile_ptx(make_ring_kernel().py_func, (types.int32[::1], types.int32), cc=(9, 0))
open(sys.argv[1] + "/ring.ptx", "w").write(ptx)
print("ok")
"""
)


def expected(rounds: int) -> np.ndarray:
    """What consumer t adds up: round r's value ``1000 r + t`` weighted by ``r % 7 + 1``."""
    return np.array([sum((1000 * r + t) * (r % 7 + 1) for r in range(rounds)) for t in range(SIDE)], np.int32)


def test_ids_and_counts_are_checked_before_any_build():
    with pytest.raises(ValueError, match="0 is syncthreads'"):
        named_barriers.sync(0, 64)
    with pytest.raises(ValueError, match="from 1 to 15"):
        named_barriers.arrive(16, 64)
    with pytest.raises(ValueError, match="multiple of 32"):
        named_barriers.sync(1, 48)
    with pytest.raises(ValueError, match="up to 1024"):
        named_barriers.arrive(2, 2048)
    assert named_barriers.sync(3, 256) is named_barriers.sync(3, 256)  # one intrinsic per (op, id, count)


def test_the_ring_compiles_to_named_barriers_and_assembles(tmp_path, ptx_written):
    ptx = ptx_written(RING_PTX)["ring.ptx"]
    for barrier in range(1, 5):  # each stage's FULL and EMPTY barrier on both sides (NVVM may copy a loop body)
        assert f"bar.arrive {barrier}, 256;" in ptx and f"bar.sync {barrier}, 256;" in ptx, barrier
    assert not re.search(r"bar(rier)?\.sync(\.aligned)? 0", ptx), "the ring never waits for the whole block"
    ptxas = shutil.which("ptxas")
    if ptxas:  # the PTX ISA version numba writes may be newer than this ptxas knows: the instructions are not
        (tmp_path / "lowered.ptx").write_text(re.sub(r"^\.version \d+\.\d+", ".version 8.0", ptx, flags=re.M))
        out = subprocess.run(
            [ptxas, "-arch=sm_90", str(tmp_path / "lowered.ptx"), "-o", str(tmp_path / "k.o")],
            capture_output=True,
            text=True,
        )
        assert out.returncode == 0, out.stderr


@pytest.mark.gpu
@pytest.mark.parametrize("rounds", [1, 2, 3, 64])
def test_every_round_reaches_every_consumer_on_a_gpu(rounds):
    import cupy as cp

    namespace: dict = {}
    exec(RING_KERNEL, namespace)  # the kernel whose PTX the test above reads
    out = cp.full(SIDE, -1, dtype=np.int32)
    namespace["make_ring_kernel"]()[1, 2 * SIDE](out, np.int32(rounds))
    np.testing.assert_array_equal(cp.asnumpy(out), expected(rounds))

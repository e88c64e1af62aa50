"""The plain numba kernels compile for real GPUs (sm_80, sm_90), not only in the simulator.

The simulator runs kernels as Python, so it cannot see typing errors (a shared array shape that is not a
compile-time constant, an unsupported call) that stop a kernel on the device. This test compiles them to PTX
with numba-cuda's NVVM, in a separate process (the test session may have the simulator switched on).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from utilities.execution import python_env

ROOT = Path(__file__).resolve().parent.parent


def test_plain_kernels_compile_for_sm80_and_sm90():
    env = python_env(simulator=False)
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "compile_kernels.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0 and "nvvm" in done.stderr.lower() and "not found" in done.stderr.lower():
        pytest.skip("NVVM is not installed: pip install 'numba-cuda[cu13]==0.30.4'")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 56 and all("bytes of PTX" in line for line in lines), done.stdout  # 28 kernels, 2 targets
    groups = [line for line in lines if line.startswith("cp_async_groups_kernel")]
    assert len(groups) == 2 and all(line.endswith("2 commit_group, 1 wait_group 1") for line in groups), groups
    # the Ozaki-I epilogue's C: fl(alpha x), then beta c fused onto it (fma(beta, c, fl(alpha x))), the contraction
    # that utilities.rounding.epilogue_bound derives its bound for
    epilogues = [line for line in lines if line.startswith("ozaki_epilogue_kernel")]
    assert len(epilogues) == 2 and all(line.endswith("C from mul.f64 then fma.rn.f64") for line in epilogues), epilogues
    # Ozaki-II's residues: the tie test (r > HI[t] = 127) only for the even modulus, 256; the odd ones cannot tie, and
    # with the loop written out (EVEN[t] a constant) the compiler drops their test: 4 (one an entry of a 4-entry word)
    # a run of four entries whatever the count, not 4 a modulus; both kernels write out their four runs (k = 8192,
    # 512 threads): 16
    rows = [line for line in lines if line.startswith(("ozaki2 residue_rows_kernel", "ozaki2 residue_known_rows"))]
    assert len(rows) == 6 and all(", 16 tie tests (r > 127)" in line for line in rows), rows
    # a chunk's exponent and S by redux.sync (utilities.machinery.warp_redux): one max and two adds for each of the
    # row's four chunks (k = 8192, 512 threads), in the kernels that find S; none where S is not found
    with_s = ("row_stats_kernel sm", "row_stats_kernel, weights", "ozaki2 residue_rows")
    with_s = [line for line in lines if line.startswith(with_s)]
    assert len(with_s) == 8 and all("redux: 4 max, 8 add" in line for line in with_s), with_s
    norms = [line for line in lines if line.startswith("row_stats_kernel, norms only")]
    assert len(norms) == 2 and all("redux: 0 max, 0 add" in line for line in norms), norms


def test_wait_prior_takes_only_what_ptx_encodes():
    pytest.importorskip("llvmlite")
    from utilities.machinery import cp_async

    for bad in (-1, 8, 1.5):
        with pytest.raises(ValueError, match="0 to 7"):
            cp_async.wait_prior(bad)

"""The Triton peer of notebook 2c, run by Triton's interpreter on PyTorch CPU tensors where both are installed
(neither is a dependency of the course: skipped otherwise), through the same checker as the course's kernels."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from utilities.execution import python_env

ROOT = Path(__file__).resolve().parent.parent

PEER = """
import numpy as np, torch
from utilities.conv import check, triton_peer
from utilities.conv import reference as ref

def run(x, w, bias):
    return triton_peer.conv3x3_bias_relu(*(torch.from_numpy(v) for v in (x, w, bias)), block=(32, 32, 16)).numpy()

# 48 output channels: the last block of 32 is half outside (masked); 6 x 10 images: tiles straddle images
shape = ref.ConvShape(2, 6, 10, 32, 48)
assert check.check_conv(run, shape=shape, seed=1).status == "passed"
try:
    check.check_conv(lambda x, w, b: run(x, w, np.zeros_like(b)), shape=shape, seed=1)
except check.CheckFailure as failure:
    assert "bias missing" in str(failure), str(failure)
else:
    raise AssertionError("a peer without its bias passed")
print("ok")
"""


@pytest.mark.skipif(
    importlib.util.find_spec("triton") is None or importlib.util.find_spec("torch") is None,
    reason="Triton or PyTorch is not installed (the Triton peer is optional)",
)
def test_the_triton_peer_passes_the_course_checker_in_the_interpreter():
    env = python_env(TRITON_INTERPRET="1")
    done = subprocess.run([sys.executable, "-c", PEER], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stdout[-2000:] + done.stderr[-3000:]


def test_without_triton_the_peer_says_why():
    code = (
        "import sys; sys.modules['triton'] = None\n"
        "from utilities.conv import triton_peer\n"
        "why = triton_peer.available()\n"
        "assert 'Triton is not installed' in why, why\nprint('ok')"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]

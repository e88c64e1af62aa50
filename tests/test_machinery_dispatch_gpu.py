"""A kernel served before numba types it (``buildcache.dispatch``) computes what the kernel built the normal way
computes (skipped without a GPU).

Each case runs one script in fresh processes: the first builds (or is served) and leaves the record, the second must
be served from it, a third builds with ``COURSE_FAST_DISPATCH=off``; all three results must be identical bit for
bit. A plain numba kernel runs in a cache of its own; 2a's fused cuBLASDx kernel in the machine's cache (after the
prebuild its cubin is there, and a build of it takes seconds).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from utilities.execution import python_env

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parent.parent

PLAIN = """
import numpy as np, cupy as cp
from numba import cuda
from utilities.machinery import buildcache
buildcache.install(quiet=True)

def make(scale):
    @cuda.jit
    def axpy(x, y, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = scale * x[i] + y[i]
    return axpy

x = cp.asarray(np.linspace(-3, 3, 1000, dtype=np.float32))
y = cp.asarray(np.cos(np.arange(1000, dtype=np.float32)))
out = cp.zeros_like(x)
make(np.float32(1.75))[4, 256](x, y, out)
result = cp.asnumpy(out)
"""

FUSED = """
import numpy as np, cupy as cp
from utilities.machinery import buildcache
buildcache.install(quiet=True)
from utilities.fusion.tensorcore import GemmBiasRelu

rng = np.random.default_rng(5)
m, n, k = 384, 256, 192
a, b, bias = (cp.asarray(rng.standard_normal(s).astype(np.float16)) for s in ((m, k), (k, n), (n,)))
result = cp.asnumpy(GemmBiasRelu(m, n, k)(a, b, bias))
"""

REPORT = """
import json
from utilities.machinery.buildcache import dispatch
np.save({out!r}, result)
print("served:", json.dumps(dispatch.SERVED))
"""


def run(source: str, out: Path, **env: str) -> list[str]:
    script = source + textwrap.dedent(REPORT).format(out=str(out))
    environ = python_env(simulator=False, **env)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, env=environ)
    assert done.returncode == 0, done.stderr[-3000:]
    line = [ln for ln in done.stdout.splitlines() if ln.startswith("served:")][-1]
    return json.loads(line.split(":", 1)[1])


@pytest.mark.parametrize(
    ("source", "kernel"), [(PLAIN, "axpy"), (FUSED, "gemm_bias_relu_kernel")], ids=["plain", "fused"]
)
def test_a_served_kernel_computes_what_a_built_one_computes(source, kernel, tmp_path):
    env = {"COURSE_BUILD_CACHE": str(tmp_path / "cache")} if source is PLAIN else {}
    run(source, tmp_path / "first.npy", **env)
    served = run(source, tmp_path / "served.npy", **env)
    assert any(name.endswith(kernel) for name in served), f"{kernel} was not served from its record: {served}"
    built = run(source, tmp_path / "built.npy", COURSE_FAST_DISPATCH="off", **env)
    assert built == []
    first, again, normal = (np.load(tmp_path / f"{n}.npy") for n in ("first", "served", "built"))
    assert np.array_equal(first, normal, equal_nan=True)
    assert np.array_equal(again, normal, equal_nan=True)

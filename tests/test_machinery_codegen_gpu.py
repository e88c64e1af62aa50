"""The build cache's workers generate, byte for byte, the LTO-IR that libmathdx generates in place.

The fake binding of ``test_machinery_buildcache.py`` models libmathdx; this test asks the real one (on a GPU machine,
where the pinned stack is installed). Each run is a fresh process with its own cache: once with code generated
in place, once through two worker processes; the device functions' LTO-IR and symbols must agree.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

SCRIPT = """
import hashlib, json, sys
import numpy as np
from nvmath.bindings import mathdx
from utilities.machinery import buildcache, codegen_workers
cache_dir, workers = sys.argv[1], int(sys.argv[2])
pool = codegen_workers.Pool(workers) if workers > 1 else None
lazy = buildcache.LazyMathdx(mathdx, buildcache.DiskCache(cache_dir), {"test": "1"},
                             int(mathdx.CommondxOption.CODE_ISA), pool, int(mathdx.CublasdxDeviceFunctionTrait.SYMBOL))
lazy.install()
from nvmath.device import Matmul, cublasdx
from nvmath.device.common_cuda import CodeType, ComputeCapability
cc = ComputeCapability(9, 0)
MM = Matmul(size=(64, 64, 64), precision=(np.float16, np.float16, np.float32), data_type="real",
            arrangement=("row_major", "col_major", "row_major"), execution="Block", block_size=128, sm=cc)
ct = CodeType("lto", cc)
codes = [
    cublasdx.compile_blas_execute(MM, code_type=ct, execute_api="tensors",
                                  tensor_types=("suggested_smem_a", "suggested_smem_b", "suggested_rmem_c")),
    cublasdx.compile_blas_clear(MM.suggest_layout_rmem_c(), ct),
    cublasdx.compile_blas_copy(MM.get_layout_gmem_a(), MM.suggest_layout_smem_a(), ct),
]
pending = sum(codegen_workers.is_placeholder(c.data) for c, _ in codes)
import warnings
with warnings.catch_warnings(record=True) as caught:  # a failed worker falls back, with a warning: count them
    warnings.simplefilter("always")
    digests = [hashlib.sha256(lazy.resolve(c.data)).hexdigest() for c, _ in codes]
fallbacks = sum("generating it here" in str(w.message) for w in caught)
symbols = [s for _, s in codes]
print(json.dumps({"placeholders": pending, "fallbacks": fallbacks, "digests": digests, "symbols": symbols}))
"""


def test_workers_generate_what_libmathdx_generates_in_place(tmp_path):
    runs = {}
    for workers in (1, 2):
        cmd = [sys.executable, "-c", SCRIPT, str(tmp_path / f"cache-{workers}"), str(workers)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[workers] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert runs[1]["placeholders"] == 0
    assert runs[2]["placeholders"] == 2, "after the first (in place, for the ISA version), code comes from workers"
    assert runs[2]["fallbacks"] == 0, "every worker generated its code (none fell back to generating in place)"
    assert runs[2]["symbols"] == runs[1]["symbols"]
    assert runs[2]["digests"] == runs[1]["digests"]

"""Time the fully fused Ozaki-I kernel alone for one tile configuration (a GPU experiment; prints one JSON line).

python tools/tile_sweep.py 128x128x128:256:4     # tile MxNxK : threads : pipeline depth
"""

from __future__ import annotations

import json
import sys

import cupy as cp

from utilities import bench, buildcache, inputs
from utilities.gpu.ozaki import OzakiGemm, TileConfig


def main() -> None:
    tile, threads, depth = sys.argv[1].split(":")
    size = int(sys.argv[2]) if len(sys.argv) > 2 else 8192
    tm, tn, tk = (int(x) for x in tile.split("x"))
    cfg = TileConfig(tm, tn, tk, int(threads), int(depth))
    buildcache.install()
    a, b = cp.asarray(inputs.normal(size, size, 0)), cp.asarray(inputs.normal(size, size, 1))
    plan = OzakiGemm(size, size, size, 7, "fused", cfg=cfg)
    c = plan(a, b)
    rec = bench.bench(lambda: plan.fused(c, c, 1.0, 0.0), m=size, n=size, k=size, name="ozaki.fused.kernel", repeats=10)
    print(json.dumps({"config": sys.argv[1], "median_ms": rec.time.median, "tflops": rec.tflops}), flush=True)


if __name__ == "__main__":
    main()

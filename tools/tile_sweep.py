"""Time the fully fused Ozaki-I kernel alone for one tile configuration (a GPU experiment; prints one JSON line).

python tools/tile_sweep.py 128x128x128:256:4 [8192]     # tile MxNxK : threads : pipeline depth, then the size
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", help="tile MxNxK:threads:depth, e.g. 128x128x128:256:3")
    parser.add_argument("size", type=int, nargs="?", default=8192, help="m = n = k (default 8192)")
    args = parser.parse_args()
    tile, threads, depth = args.config.split(":")
    tm, tn, tk = (int(x) for x in tile.split("x"))
    import cupy as cp  # after the arguments: --help needs no GPU

    from utilities import bench, inputs
    from utilities.machinery import buildcache
    from utilities.ozaki.tensorcore import OzakiConfig, OzakiGemm

    cfg = OzakiConfig(tile_m=tm, tile_n=tn, tile_k=tk, threads=int(threads), depth=int(depth))
    buildcache.install()
    size = args.size
    a, b = cp.asarray(inputs.normal(size, size, 0)), cp.asarray(inputs.normal(size, size, 1))
    plan = OzakiGemm(size, size, size, 7, "fused", cfg=cfg)
    c = plan(a, b)
    rec = bench.bench(lambda: plan.fused(c, c, 1.0, 0.0), m=size, n=size, k=size, name="ozaki.fused.kernel", repeats=10)
    print(json.dumps({"config": args.config, "median_ms": rec.time.median, "tflops": rec.tflops}), flush=True)


if __name__ == "__main__":
    main()

"""A planted race, found by the checkers' sanitizer run (``utilities.sanitizer``) on a GPU.

    python tools/sanitizer_race.py          # exit 0: the race found, the same kernel with its barrier clean

The kernel has two warps: each thread writes its entry of a shared array, then reads the entry of a thread of the
other warp. Without a ``cuda.syncthreads()`` between the write and the read, the read may come first: a race that
most runs never show in the result, and that racecheck reports ("Race reported between Write access ... and Read
access ..."). The tool runs both kernels through the same path as a check's ``sanitize=True`` (the factory's source
and its imports in a script, under racecheck, synccheck and memcheck) and prints what it found. Exit 1 when the race
is missed or the clean kernel is not clean, 2 when there is no compute-sanitizer or no GPU (nothing was run).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from numba import cuda, float32  # noqa: E402

from utilities import sanitizer  # noqa: E402

THREADS = 64  # two warps


def make_exchange_kernel(barrier: bool):
    """``exchange_kernel[1, 64](out)``: out[t] = the value thread 63 - t wrote to shared memory (another warp's);
    with ``barrier`` a ``cuda.syncthreads()`` separates the writes from the reads, without it they race."""
    BARRIER = barrier

    @cuda.jit
    def exchange_kernel(out):
        shared = cuda.shared.array(THREADS, float32)
        t = cuda.threadIdx.x
        shared[t] = float32(t)
        if BARRIER:
            cuda.syncthreads()
        out[t] = shared[THREADS - 1 - t]

    return exchange_kernel


DRIVER = """
    import numpy as np
    from numba import cuda
    out = cuda.to_device(np.zeros({threads}, np.float32))
    make_exchange_kernel({barrier})[1, {threads}](out)
    cuda.synchronize()
    print("exchanged:", out.copy_to_host()[:4])
"""


def run(barrier: bool) -> tuple[bool, str]:
    """(clean, message) of the exchange kernel's sanitized run."""
    driver = DRIVER.format(threads=THREADS, barrier=barrier)
    return sanitizer.sanitize("exchange kernel", [make_exchange_kernel], driver)


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    if sanitizer.find_binary() is None:
        print(sanitizer.MISSING)
        return 2
    if not cuda.is_available():
        print("no GPU: the planted race needs one")
        return 2
    racy_clean, racy = run(barrier=False)
    clean, fixed = run(barrier=True)
    print("without the barrier:\n" + racy)
    print("with the barrier:\n" + fixed)
    found = not racy_clean and any(text in racy for text in ("Race reported", "hazard detected"))
    ok = found and clean
    print("planted race found, fixed kernel clean" if ok else "FAILED: the race was missed or the fix was not clean")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""The tensor-core fusion course's package: one subpackage per track, a shared core, and the build machinery.

Every track has the same shape: the same file name holds the same role in each of them.

| role | file in each track |
| --- | --- |
| NumPy reference, inputs, error bounds | ``reference.py`` (Ozaki-I: and its stages ``slicing``, ``products``, ...) |
| the exercises' checkers | ``check.py`` |
| bytes, operations, performance model | ``model.py`` |
| plots | ``figures.py`` |
| plain numba (SIMT) kernels | ``simt.py`` (where the track has them) |
| tensor-core kernels and their plans (GPU) | ``tensorcore.py`` (and ``tensorcore_<variant>.py``) |
| library baselines (GPU) | ``baselines.py`` (where the track has its own) |
| benchmarks (GPU) | ``benchmarks.py`` |

Tracks: ``multipass`` (1), ``fusion`` (2a, 2b), ``ozaki`` (3a-3d), ``ozaki2`` (4). Importing a track imports its CPU
modules only; GPU modules are imported by name, after the preflight.

The core, importable with NumPy and Matplotlib alone: ``checker`` (how checkers compare and report, the
placeholder marker), ``bench`` (timing, records, tables), ``report`` (the GPU report), ``plots``, ``peaks``,
``inputs``, ``exact`` (double-double products), ``errors``, ``smem`` (shared-memory segments), ``operands``
(checks on GPU arrays), ``cublas`` (cuBLAS baselines), ``preflight``. Course tooling: ``notebooks`` (exercises
from solutions), ``mutants`` (how ``tools/mutation_test.py`` proves the checkers), ``gpu_suite`` and ``bench_all``
(the GPU report), ``workshop`` (the run-through of the day).

``machinery`` is apart: the build cache, code-generation workers, the prebuild, the fast launch path, aligned
copies and cp.async intrinsics, the only code that reaches into nvmath-python's and numba-cuda's internals,
behind the version pins of ``machinery.versions``.
"""

__version__ = "0.1.0"

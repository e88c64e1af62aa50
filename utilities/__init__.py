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

Tracks: ``primer`` (0), ``multipass`` (1), ``fusion`` (2a, 2b), ``conv`` (2c, 2d), ``ozaki`` (3a-3d), ``ozaki2``
(4a, 4b); the primer holds only the roles it needs. Importing a track imports its CPU modules only; GPU modules are
imported by name, after the preflight.

The house has four floors, and an import never climbs (``tests/test_course_layout.py`` holds it so):

1. ``machinery``: the build cache, code-generation workers, shape-generic device pipelines, the fast launch path,
   aligned copies and cp.async intrinsics: the only code that reaches into nvmath-python's and numba-cuda's
   internals, behind the version pins of ``machinery.versions``. It imports nothing else of the course.
2. the core, what more than one track needs. Importable with NumPy and Matplotlib alone: ``checker`` (how
   checkers compare and report, the placeholder marker), ``guard`` (outputs written inside a poisoned guard band,
   so that a write outside them is placed), ``sanitizer`` (an exercise's kernels run under compute-sanitizer, its
   reports read), ``bench`` (timing, records, tables), ``report`` (the GPU
   report), ``plots``, ``peaks``, ``inputs``, ``exact`` (double-double products), ``errors`` (error measures,
   sampled errors), ``rounding`` (unit roundoffs, gamma, shared error bounds), ``roofline`` (operations, bytes and
   the floor they set), ``precision`` (the emulations' precision search), ``smem`` (shared-memory segments),
   ``operands`` (checks on operands), ``cublas`` (library baselines), ``plans`` (what every plan takes: its tile
   configuration as ``cfg=``, the kernels an attendee replaces as ``kernels=``), ``preflight``. For GPU modules only:
   ``tiles`` (the block-GEMM factory), ``simt`` (device helpers) and
   ``precision_gpu`` (the precision search's statistics, and the count chosen on the device).
3. the tracks: each imports the core and the machinery, never another track.
4. course tooling: ``notebooks`` (exercises from solutions), ``execution`` (a notebook in a fresh Jupyter kernel),
   ``mutants`` (how ``tools/mutation_test.py`` proves the checkers), ``gpu_suite`` and ``bench_all`` (the GPU
   report), ``gpu_proof`` (the course's GPU tests and notebooks on a GPU, with a verdict on each target),
   ``emulations`` (Ozaki-I as the Ozaki-II benchmarks compare with it), ``workshop`` (the run-through of the day),
   ``ledger`` (which GPU notebooks passed on a GPU with their current code), ``prebuild`` (every course kernel built
   ahead of a workshop, and the build cache exported to or imported from a bundle, whose format is
   ``machinery.buildcache.bundle``'s).
"""

__version__ = "0.1.0"

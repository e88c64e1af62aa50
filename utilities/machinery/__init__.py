"""The machinery that makes the course's kernels build fast and launch cheaply: the only code that reaches into
nvmath-python's and numba-cuda's internals.

- ``versions``: the stack verified together (one place for the pins) and the guard every reach into private
  internals goes through; with other versions each piece falls back to the public path and says so once;
- ``buildcache``: the on-disk cache of libmathdx code, traits and linked cubins (``python -m
  utilities.machinery.buildcache`` shows or clears it), split by job: ``store``, ``interposer``, ``linking``,
  ``progress``;
- ``codegen_workers``: libmathdx code generation in worker processes;
- ``launch``: large dynamic shared memory, and a launch path that packs arguments itself;
- ``pipelines``: cuBLASDx device pipelines with run-time shapes, so that one kernel build serves every shape;
- ``aligned_copy``: global-memory layouts that promise cuBLASDx 16-byte alignment;
- ``cp_async``: ``cp.async`` commit and wait-group intrinsics for numba;
- ``padded_layouts``: shared-memory layouts with a leading dimension in cuBLASDx's tensor API (nvmath drops it);
- ``cpu_build``: course kernels built on a machine without a GPU (a stand-in driver), never launched;
- ``streams``: a second CUDA stream beside CuPy's current one (work after what was queued, a join back);
- ``cubin``: a cubin's sections and each function's registers and stack, read in plain Python;
- ``simulator``: numba's CUDA simulator without its per-call locks for device functions that never name ``cuda``
  (the tests install it: the Ozaki-II kernels' simulated runs stalled on those locks).

Nothing here is imported by the course's CPU code (the tests install ``simulator``).
"""

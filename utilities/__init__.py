"""Shared utilities of the tensor-core fusion course.

Split by dependency, so that a machine without a GPU can import everything but ``utilities.gpu``:

- ``utilities.ozaki``: the NumPy reference of Ozaki-I, stage by stage, and its plain numba kernels.
- ``utilities.exact``, ``utilities.errors``, ``utilities.inputs``: exact products, error measures, seeded inputs.
- ``utilities.check``: the checkers that the exercises call.
- ``utilities.bench``, ``utilities.peaks``, ``utilities.plots``, ``utilities.report``: timing, ceilings, plots,
  the GPU report.
- ``utilities.preflight``: what this machine can run, and how to fix what it cannot.
- ``utilities.notebooks``: builds the exercise notebooks from the solutions.
- ``utilities.gpu``: launchers that need CUDA (numba-cuda, cupy, nvmath-python); imported lazily.
"""

__version__ = "0.1.0"

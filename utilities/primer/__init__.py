"""Notebook 0, the primer: the nvmath.device objects an attendee meets during the day, where each one lives, and one
block GEMM tile to write.

Modules (the roles keep the tracks' file names; the primer needs no model and no benchmarks):

- ``reference``: the exercise's inputs (small integers in FP16, so that every product is exact) and the product;
- ``check``: the exercise's checker;
- ``figures``: the picture of where each object lives (global memory, shared memory, registers);
- ``tensorcore`` (GPU): the exercise's kernel (one tile per block: load, execute, store) and its plan, and a
  small device-pipeline kernel (``get_tile``, ``execute``, ``reset_tile``) with its plan.

Importing this package imports nothing: import the module you need.
"""

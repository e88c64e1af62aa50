"""Mutation scores of the CPU exercises: syntactic and semantic mutants of each solution, through its checker.

    python tools/mutation_test.py                 # every exercise, a table, and results/mutation-cpu.json
    python tools/mutation_test.py --only 3a       # exercises whose name contains 3a (their entries updated)
    python tools/mutation_test.py --semantic      # the mistakes and alternatives of tools/mistakes/ only

Syntactic mutants (every single change of a solution region): one is rejected when the checker raises CheckFailure
(naming the stage); it survives when the checker passes although some valid input (more and other inputs than the
checker's) gives a different result; it is equivalent when no such input was found (``utilities.mutants``).

Semantic mutants: the realistic mistakes of ``tools/mistakes/*.py`` (``MISTAKES``), each run through the checker on
several seeds: rejected only when every seed rejects it with a message that holds the mistake's ``message`` text;
"some seeds" and "missed" are holes, "misnamed" a message that names another mistake. The correct alternatives
(``CORRECT``) must pass on every seed.

The exercises whose code is a device function run here compiled for the CPU (``numba.njit`` of its Python body,
with the device's integer semantics), in the course's own kernels' place; the exercises that are whole SIMT kernels
run in numba's CUDA simulator (this tool selects it), or, for kernels without barriers or shared memory, their
Python body once per thread in a plain loop (``_ThreadLoopCuda``: the same results, many times faster).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
if __name__ == "__main__":  # before numba.cuda is imported: the SIMT kernels run in the simulator (under pytest,
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")  # conftest.py chooses: the simulator without a GPU)

from utilities import inputs, mutants  # noqa: E402

MISTAKES = ROOT / "tools" / "mistakes"
SEEDS = (1, 2, 3, 4, 5)  # every semantic mutant runs on each; a checker's verdict must not depend on the seed


def notebook_function(stem: str, name: str) -> str:
    """The source of the solution cell of ``solutions/<stem>.ipynb`` that defines ``name`` (its markers kept)."""
    cells = json.loads((ROOT / "solutions" / f"{stem}.ipynb").read_text())["cells"]
    for cell in cells:
        text = "".join(cell["source"])
        if cell["cell_type"] == "code" and f"def {name}(" in text:
            start = text.index(f"def {name}(")
            body = text[start:].split("\n\n\n")[0]
            return body
    raise KeyError(f"no cell of {stem} defines {name}")


def module_function(module: Any, name: str) -> str:
    from utilities.notebooks import extract_definition

    return extract_definition(Path(module.__file__).read_text(), name)


class _CpuCuda:
    """Stands in for ``numba.cuda`` in a device function's module: ``cuda.jit(device=True)`` compiles for the CPU
    with ``numba.njit``, so that a mutant runs with the device's integer semantics (int64 wraps, where a Python
    int would not); with bounds checks, so that a mutant's stray index raises instead of corrupting memory."""

    def jit(self, *args: Any, **kwargs: Any) -> Any:
        import numba

        if args and callable(args[0]):
            return numba.njit(args[0], boundscheck=True)
        return lambda fn: numba.njit(fn, boundscheck=True)


class _Dim3:
    def __init__(self) -> None:
        self.x = self.y = self.z = 0


class _ThreadLoopCuda:
    """Stands in for ``numba.cuda`` in a SIMT kernel's module: ``cuda.jit`` gives a kernel whose launch
    ``kernel[grid, block](*args)`` runs its Python body once per thread, in a plain loop. Only for kernels without
    barriers, shared memory or atomics (the epilogue kernels): numba's simulator starts a Python thread per GPU
    thread, and a check's hundreds of thousands of threads would take minutes."""

    def __init__(self) -> None:
        self.threadIdx, self.blockIdx, self.blockDim, self.gridDim = _Dim3(), _Dim3(), _Dim3(), _Dim3()

    def grid(self, ndim: int) -> Any:
        at = [getattr(self.blockIdx, a) * getattr(self.blockDim, a) + getattr(self.threadIdx, a) for a in "xyz"]
        return at[0] if ndim == 1 else tuple(at[:ndim])

    def jit(self, *args: Any, **kwargs: Any) -> Any:
        if args and callable(args[0]):
            return _ThreadLoopKernel(args[0], self)
        return lambda fn: _ThreadLoopKernel(fn, self)


class _ThreadLoopKernel:
    def __init__(self, fn: Callable[..., Any], cuda: _ThreadLoopCuda) -> None:
        self.fn, self.cuda, self.py_func = fn, cuda, fn

    def __getitem__(self, config: tuple[Any, Any]) -> Callable[..., None]:
        grid, block = (tuple(c) + (1,) * (3 - len(c)) if isinstance(c, tuple) else (c, 1, 1) for c in config)

        def launch(*args: Any) -> None:
            c = self.cuda
            for dim, size in ((c.gridDim, grid), (c.blockDim, block)):
                dim.x, dim.y, dim.z = size
            for bz in range(grid[2]):
                for by in range(grid[1]):
                    for bx in range(grid[0]):
                        c.blockIdx.x, c.blockIdx.y, c.blockIdx.z = bx, by, bz
                        for tz in range(block[2]):
                            for ty in range(block[1]):
                                for tx in range(block[0]):
                                    c.threadIdx.x, c.threadIdx.y, c.threadIdx.z = tx, ty, tz
                                    self.fn(*args)

        return launch


def cpu_namespace(module: Any) -> dict[str, Any]:
    """The module's globals with ``cuda`` replaced by :class:`_CpuCuda` and its device functions recompiled for the
    CPU (their Python bodies through ``numba.njit``)."""
    import numba

    namespace = dict(vars(module))
    for key, value in namespace.items():
        python = getattr(value, "py_func", None)  # a CUDADispatcher (numba-cuda on a GPU)
        if python is None and getattr(value, "_device", False):  # a device function in the simulator
            python = value.fn
        if python is not None:
            namespace[key] = numba.njit(python, boundscheck=True)
    namespace["cuda"] = _CpuCuda()
    return namespace


def exec_function(text: str, name: str, namespace: dict[str, Any]) -> Any:
    ns = dict(namespace)
    exec(compile(text, f"<mutant of {name}>", "exec"), ns)
    return ns[name]


def module_exercise(
    module: Any, name: str, *, device: bool, thread_loop: bool = False
) -> tuple[str, Callable[[str], Any]]:
    """The source of ``module.name`` and how to build a mutant of it: device functions compiled for the CPU
    (:func:`cpu_namespace`), kernels as they are (for the simulator) or, with ``thread_loop``, run thread by
    thread (:class:`_ThreadLoopCuda`)."""
    namespace = cpu_namespace(module) if device else dict(vars(module))
    if thread_loop:
        namespace["cuda"] = _ThreadLoopCuda()
    return module_function(module, name), lambda text: exec_function(text, name, namespace)


# ---------------------------------------------------------------------------------------------------------------
# The exercises: source, how to build the attendee's object, the checker, and a wider differential test
# ---------------------------------------------------------------------------------------------------------------


def slice_number_exercise() -> tuple[str, Callable, Callable, Callable]:
    from utilities.ozaki import check, row_shifts, slice_rows

    text = notebook_function("3a_ozaki_numerics", "slice_number")
    build = lambda t: exec_function(t, "slice_number", {"math": math})  # noqa: E731

    def differs(fn: Any) -> bool:
        rng = np.random.default_rng(99)
        xs = [*rng.standard_normal(200) * 2.0 ** rng.integers(-60, 60, 200), 0.0, 1.0, -1.0, 0.5 - 2.0**-60]
        pairs = [(x, abs(x) * 2.0 ** float(rng.integers(0, 20))) for x in xs] + [(x, 0.9) for x in xs if abs(x) < 0.9]
        pairs += [
            (x, top)
            for x, top in (
                (1e308, 1e308),
                (-3.0, check.DBL_MAX),
                (2.0**-1070, 2.0**-1070),
                (-(2.0**-1074), 2.0**-1074),
                (2.0**-1074, 0.5),
            )
        ]
        for slices in range(1, 13):
            for x, row_max in pairs + [
                (x, max(abs(v) for v in row)) for _, row in check.corner_rows(slices) for x in row
            ]:
                row = np.array([[x, row_max]])
                e = int(row_shifts(row)[0])
                if list(fn(float(x), e, slices)) != list(slice_rows(row, slices)[0][:, 0, 0]):
                    return True
        return False

    return text, build, lambda fn, seed=11: check.check_slice_number(fn, seed=seed), differs


def diagonal_terms_exercise() -> tuple[str, Callable, Callable, Callable]:
    from utilities.ozaki import check

    text = notebook_function("3a_ozaki_numerics", "diagonal_terms")
    build = lambda t: exec_function(t, "diagonal_terms", {})  # noqa: E731

    def differs(fn: Any) -> bool:
        return any(
            [tuple(p) for p in fn(d, s)] != check.diagonal_terms_ref(d, s)
            for s in range(1, 13)
            for d in range(2 * s + 2)
        )

    return text, build, lambda fn, seed=0: check.check_diagonal_terms(fn, seed=seed), differs


def split_digits_exercise() -> tuple[str, Callable, Callable, Callable]:
    """3b's device function, through its Python body: the course's slicing, the attendee's digits."""
    from utilities.operands import NONFINITE_SHIFT
    from utilities.ozaki import check, row_shifts, simt, slice_rows

    text, build = module_exercise(simt, "make_split_digits", device=True)

    def slicing_with(factory: Any) -> Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]:
        def slicing(a: np.ndarray, slices: int) -> tuple[np.ndarray, np.ndarray]:
            split = factory(slices)
            e = row_shifts(a)
            out = np.zeros((slices, *a.shape), np.int8)
            digits = np.zeros(slices, np.int32)
            for i, row in enumerate(a):
                if e[i] == NONFINITE_SHIFT:
                    continue
                for j, x in enumerate(row):
                    split(float(x), int(e[i]), digits)
                    out[:, i, j] = digits
            return out, e

        return slicing

    def differs(factory: Any) -> bool:
        a = inputs.exponent_spread(6, 60, 3.0, 123)
        for slices in range(1, 13):
            for x in (
                a,
                check.corner_matrix(slices)[0],
                inputs.with_subnormals(4, 30, 7),
                inputs.huge_and_tiny(4, 30, 8),
            ):
                got, _ = slicing_with(factory)(x, slices)
                if not np.array_equal(got, slice_rows(x, slices)[0]):
                    return True
        return False

    return text, build, lambda f, seed=12: check.check_slicing(slicing_with(f), seed=seed), differs


def residue_exercise() -> tuple[str, Callable, Callable, Callable]:
    from utilities.ozaki2 import check, reference

    text = notebook_function("4a_ozaki2_numerics", "symmetric_residue")
    build = lambda t: exec_function(t, "symmetric_residue", {"np": np, "ozaki2": __import__("utilities.ozaki2").ozaki2})  # noqa: E731

    def differs(fn: Any) -> bool:
        rng = np.random.default_rng(5)
        for p in reference.MODULI:
            x = np.trunc(np.ldexp(rng.standard_normal(3000), rng.integers(0, 61, 3000)))
            x = np.concatenate([x, np.arange(-3 * p, 3 * p, dtype=np.float64)])
            if not np.array_equal(np.asarray(fn(x, p), np.float64), reference.residue(x, p)):
                return True
        return False

    return text, build, lambda fn: check.check_residue(fn, seed=13), differs


def crt_exercise() -> tuple[str, Callable, Callable, Callable]:
    from utilities.ozaki2 import check, reference

    text = notebook_function("4a_ozaki2_numerics", "crt_reconstruct")
    build = lambda t: exec_function(t, "crt_reconstruct", {"np": np, "ozaki2": __import__("utilities.ozaki2").ozaki2})  # noqa: E731

    def differs(fn: Any) -> bool:
        rng = np.random.default_rng(6)
        for count in range(2, 21):
            t = reference.crt(count).t
            values = [int(rng.integers(-(2**62), 2**62)) >> max(0, 62 - t) for _ in range(40)] + [0, 1, -1, 1 << t]
            x = np.array(values, object).reshape(4, 11)
            want = np.array([[float(v) for v in row] for row in x])
            got = np.asarray(fn(check.digits_of(x, count), count))
            if got.shape != want.shape or not np.all(np.abs(got - want) <= check.reconstruction_bound(want, count)):
                return True
        return False

    return text, build, lambda fn: check.check_crt(fn, seed=14), differs


def neighbor_exercise() -> tuple[str, Callable, Callable, Callable]:
    """2c's index map ``neighbor(m, r, s, height, width)``, a device function, through its Python body."""
    from utilities.conv import check, reference, simt

    text, build = module_exercise(simt, "neighbor", device=True)

    def differs(fn: Any) -> bool:
        f = getattr(fn, "py_func", fn)
        for b, height, width in ((1, 1, 1), (2, 3, 1), (1, 1, 5), (2, 4, 4), (3, 9, 7), (1, 12, 2)):
            for m in range(b * height * width):
                for t in range(9):
                    if f(m, t // 3, t % 3, height, width) != reference.neighbor(m, t // 3, t % 3, height, width):
                        return True
        return False

    return text, build, lambda fn: check.check_neighbor(fn, seed=21), differs


def device_byte(v: float) -> int:
    """What the kernels store of a device function's double v in an int8: ``int32_of`` (the low word of
    v + 1.5 2^52, v rounded) and the byte store keep v modulo 256, as two's complement."""
    return (int(np.rint(v)) + 128) % 256 - 128


def residue_device_exercise() -> tuple[str, Callable, Callable, Callable]:
    """4b's device function ``residue(w, t)``, through its Python body: its own values (``values``), then the
    course's scaling and split (``x = h 2^40 + l``, ``w = h (2^40 mod p) + l``) with the attendee's reduction of w,
    each residue stored as the device stores it (:func:`device_byte`)."""
    from utilities.ozaki2 import check, reference, simt

    text, build = module_exercise(simt, "make_residue", device=True)

    def scaling_with(factory: Any) -> Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]:
        def scaling(x: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
            residue, k40 = factory(count), simt.tables(count)["k40"]
            mu = reference.scale_exponents(x, 1, count)
            xi = reference.to_integers(x, mu, 1)
            h = np.trunc(xi / simt.SPLIT)
            low = xi - h * simt.SPLIT
            res = np.array(
                [
                    [
                        [device_byte(residue(float(hv * k40[t] + lv), t)) for hv, lv in zip(hr, lr, strict=True)]
                        for hr, lr in zip(h, low, strict=True)
                    ]
                    for t in range(count)
                ],
                np.int8,
            )
            return mu, res

        return scaling

    def values_with(factory: Any) -> Callable[[np.ndarray, int], np.ndarray]:
        def values(w: np.ndarray, count: int) -> np.ndarray:
            residue = factory(count)
            return np.array([[residue(float(v), t) for v in w] for t in range(count)], np.float64)

        return values

    def differs(factory: Any) -> bool:
        rng = np.random.default_rng(7)
        w = np.trunc(np.ldexp(rng.standard_normal(600), rng.integers(0, 47, 600)))  # the contract: |w| < 2^47
        w = np.concatenate([w, np.arange(-600.0, 600.0), [2.0**47 - 1, -(2.0**47) + 1]])
        residue = factory(reference.MAX_MODULI)
        for t, p in enumerate(reference.MODULI):
            if any(residue(float(v), t) != reference.residue(np.array([v]), p)[0] for v in w):
                return True
        return False

    def run_check(f: Any, seed: int = 15) -> Any:
        return check.check_scaling(scaling_with(f), shape=(5, 24), values=values_with(f), seed=seed)

    return text, build, run_check, differs


def digit_exercise() -> tuple[str, Callable, Callable, Callable]:
    """4b's device function ``digit(v, t)``, through its Python body, on every modulus."""
    from utilities.ozaki2 import check, reference, simt

    text, build = module_exercise(simt, "make_digit", device=True)

    def digits_with(factory: Any) -> Callable[[np.ndarray], np.ndarray]:
        def digits(products: np.ndarray) -> np.ndarray:
            count = products.shape[0]
            digit = factory(count)
            return np.array(
                [[[digit(float(v), t) for v in row] for row in products[t]] for t in range(count)], np.int64
            ).astype(np.uint8)

        return digits

    def differs(factory: Any) -> bool:
        rng = np.random.default_rng(8)
        v = rng.integers(-(2**31), 2**31, 400, dtype=np.int64)
        v = np.concatenate([v, np.arange(-600, 600), [2**31 - 1, -(2**31)]]).astype(np.int32)
        count = reference.MAX_MODULI
        want = reference.reduce_products(np.broadcast_to(v, (count, v.size)), count)
        digit = factory(count)
        return any(digit(float(x), t) != want[t, i] for t in range(count) for i, x in enumerate(v))

    return text, build, lambda f, seed=20: check.check_digits(digits_with(f), seed=seed), differs


def simulate(step: Any, arrays: tuple[np.ndarray, ...], alpha: float, beta: float, c: np.ndarray) -> Any:
    """Launch ``step`` (a kernel taking ``*arrays, alpha, beta, c, out``) in the simulator; out starts all NaN, in a
    guard band (``utilities.guard``), as the GPU checks' outputs do."""
    from numba import cuda

    from utilities.guard import Canvas

    canvas = Canvas(c.shape, np.float64, fill=np.nan)
    buffer = cuda.to_device(canvas.buffer)
    out = buffer[canvas.guard : canvas.guard + canvas.size].reshape(c.shape)
    step.kernel[step.grid, step.block](
        *(cuda.to_device(x) for x in arrays), float(alpha), float(beta), cuda.to_device(c), out
    )
    buffer.copy_to_host(canvas.buffer)
    return canvas.written()


def epilogue_exercise() -> tuple[str, Callable, Callable, Callable]:
    """3b's FP64 epilogue kernel, whole, its Python body run thread by thread (``_ThreadLoopCuda``)."""
    from utilities.guard import Canvas
    from utilities.operands import NONFINITE_SHIFT
    from utilities.ozaki import check, simt
    from utilities.rounding import epilogue_bound

    text, build = module_exercise(simt, "make_epilogue_kernel", device=False, thread_loop=True)

    def launch(
        factory: Any,
        terms: np.ndarray,
        offsets: np.ndarray,
        e: np.ndarray,
        f: np.ndarray,
        alpha: float,
        beta: float,
        c: np.ndarray,
    ) -> np.ndarray:
        step = simt.epilogue_launch(*c.shape, factory)
        canvas = Canvas(c.shape, np.float64, fill=np.nan)  # in a guard band, as the GPU check's output
        step.kernel[step.grid, step.block](terms, offsets, e, f, float(alpha), float(beta), c, canvas.out)
        return canvas.written()

    def differs(factory: Any) -> bool:
        rng = np.random.default_rng(16)
        for s in range(1, 13):
            for m, n in ((9, 37), (70, 20)):
                offsets = check.unfused_offsets(s) if s % 2 else check.diagonal_offsets(s)
                terms = rng.integers(-(2**31), 2**31, (int(offsets[-1]), m, n), dtype=np.int64).astype(np.int32)
                e, f = rng.integers(-40, 40, m).astype(np.int32), rng.integers(-40, 40, n).astype(np.int32)
                e[1], f[2] = NONFINITE_SHIFT, NONFINITE_SHIFT
                e[2], f[3] = 900, -1000  # results near both ends of the range (none overflows)
                c = rng.standard_normal((m, n))
                for alpha, beta in ((1.0, 0.0), (0.75, -1.25)):
                    want = check.epilogue_reference(terms, offsets, e, f, alpha, beta, c)
                    got = np.asarray(
                        launch(factory, terms, offsets, e, f, alpha, beta, np.full_like(c, np.nan) if beta == 0 else c)
                    )
                    finite = np.isfinite(want)
                    x = check.epilogue_reference(terms, offsets, e, f, 1.0, 0.0, c)  # what alpha multiplies
                    bound = epilogue_bound(x, c, alpha, beta, want)
                    if not np.array_equal(np.isnan(got), np.isnan(want)) or np.any(
                        np.abs(got[finite] - want[finite]) > np.broadcast_to(bound, want.shape)[finite]
                    ):
                        return True
        return False

    def run_check(factory: Any, seed: int = 17) -> Any:
        return check.check_epilogue(lambda *args: launch(factory, *args), seed=seed)

    return text, build, run_check, differs


def reconstruct_exercise() -> tuple[str, Callable, Callable, Callable]:
    """4b's reconstruction kernel, whole, in numba's CUDA simulator (digits in, C out)."""
    from utilities.ozaki2 import check, reference, simt

    text, build = module_exercise(simt, "make_reconstruct_kernel", device=False)

    def launch(
        factory: Any,
        planes: np.ndarray,
        mu: np.ndarray,
        nu: np.ndarray,
        a: np.ndarray,
        b: np.ndarray,
        alpha: float,
        beta: float,
        c: np.ndarray,
    ) -> np.ndarray:
        late = planes.dtype == np.int32  # the plan's digits="late": the kernel reduces the int32 products itself
        step = simt.reconstruct_launch(*c.shape, planes.shape[0], factory, from_products=late)
        return simulate(step, (planes, mu, nu, a, b), alpha, beta, c)

    def differs(factory: Any) -> bool:
        rng = np.random.default_rng(18)
        for count in (2, 9, 20):
            a = inputs.exponent_spread(7, 40, 1.0, int(rng.integers(2**31)))
            b = inputs.exponent_spread(40, 9, 1.0, int(rng.integers(2**31)))
            a[2, 3], b[5, 4] = np.inf, np.nan
            st = reference.ozaki2_stages(a, b, count)
            c = rng.standard_normal((7, 9))
            for (alpha, beta), planes in itertools.product(((1.0, 0.0), (0.75, -1.25)), (st.digits, st.products)):
                want = reference.reconstruct(st.digits, st.mu, st.nu, count, alpha, beta, c, a, b)
                c_arg = np.full_like(c, np.nan) if beta == 0 else c
                got = np.asarray(launch(factory, planes, st.mu, st.nu, a, b, alpha, beta, c_arg))
                finite = np.isfinite(want)
                if not np.array_equal(got[~finite], want[~finite], equal_nan=True):
                    return True
                bound = check.c_bound(st, alpha, beta, c, want)
                if np.any(np.abs(got[finite] - want[finite]) > bound[finite]):
                    return True
        return False

    def run_check(f: Any, seed: int = 19) -> Any:
        return check.check_reconstruction(lambda *args: launch(f, *args), seed=seed)

    return text, build, run_check, differs


EXERCISES: dict[str, Callable[[], tuple[str, Callable, Callable, Callable]]] = {
    "2c neighbor (device function)": neighbor_exercise,
    "3a slice_number": slice_number_exercise,
    "3a diagonal_terms": diagonal_terms_exercise,
    "3b split_digits (device function)": split_digits_exercise,
    "3b epilogue (SIMT kernel, thread by thread)": epilogue_exercise,
    "4a symmetric_residue": residue_exercise,
    "4a crt_reconstruct": crt_exercise,
    "4b residue (device function)": residue_device_exercise,
    "4b digit (device function)": digit_exercise,
    "4b reconstruct (SIMT kernel, simulator)": reconstruct_exercise,
}


def run(names: list[str], quiet: bool = False) -> list[mutants.Score]:
    """The syntactic mutants of each exercise in ``names``, through its checker."""
    scores = []
    for name in names:
        text, build, check, differs = EXERCISES[name]()
        start = time.perf_counter()
        with _quiet():
            score = mutants.evaluate(name, text, build, check, differs)
        scores.append(score)
        if not quiet:
            print(f"{score.line()} ({time.perf_counter() - start:.0f} s)", flush=True)
            for m in score.survived:
                print(f"    SURVIVED line {m.line}: {m.what}", flush=True)
    return scores


def run_semantic(names: list[str], quiet: bool = False, seeds: tuple[int, ...] = SEEDS) -> list[mutants.SemanticScore]:
    """The mistakes and alternatives of ``tools/mistakes`` for each exercise in ``names``, on every seed."""
    mistakes, alternatives = mutants.load_mistakes(MISTAKES)
    scores = []
    for name in names:
        text, build, check, _ = EXERCISES[name]()
        start = time.perf_counter()
        with _quiet():
            score = mutants.evaluate_semantic(name, text, build, check, mistakes, alternatives, seeds)
        scores.append(score)
        if not quiet:
            print(f"{score.line()} ({time.perf_counter() - start:.0f} s)", flush=True)
            for verdict in score.holes:
                print(f"    {verdict.line()}", flush=True)
    return scores


def _quiet() -> Any:
    """Silence the checkers' pass lines and a mutant's warnings (a division by zero)."""
    import contextlib
    import io
    import warnings

    stack = contextlib.ExitStack()
    stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
    stack.enter_context(warnings.catch_warnings())
    warnings.simplefilter("ignore")
    return stack


def entry(name: str, syntactic: mutants.Score | None, semantic: mutants.SemanticScore | None) -> dict[str, Any]:
    """One exercise's entry of ``results/mutation-*.json``."""
    out: dict[str, Any] = {"exercise": name, "date": time.strftime("%Y-%m-%d")}
    if syntactic is not None:
        out["syntactic"] = mutants.syntactic_json(syntactic)
    if semantic is not None:
        out["semantic"] = semantic.as_json()
    return out


def write_entries(path: Path, command: str, entries: list[dict[str, Any]], order: list[str]) -> None:
    """Merge ``entries`` into the JSON at ``path`` (an exercise's new entry replaces its old one, kind by kind)."""
    try:
        old = {e["exercise"]: e for e in json.loads(path.read_text())["exercises"]}
    except (OSError, ValueError, KeyError):
        old = {}
    for new in entries:
        old[new["exercise"]] = {**old.get(new["exercise"], {}), **new}
    rank = {name: i for i, name in enumerate(order)}  # an exercise the tool no longer has (renamed) is dropped
    merged = sorted((e for e in old.values() if e["exercise"] in rank), key=lambda e: rank[e["exercise"]])
    path.write_text(json.dumps({"command": command, "date": time.strftime("%Y-%m-%d"), "exercises": merged},
                               indent=1) + "\n")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="exercises whose name contains this")
    kinds = parser.add_mutually_exclusive_group()
    kinds.add_argument("--semantic", action="store_true", help="only the mistakes and alternatives of tools/mistakes")
    kinds.add_argument("--syntactic", action="store_true", help="only the single-change mutants")
    parser.add_argument("--json", default=str(ROOT / "results" / "mutation-cpu.json"), help="where to write the scores")
    args = parser.parse_args(argv)
    names = [n for n in EXERCISES if args.only in n]
    syntactic = {s.exercise: s for s in ([] if args.semantic else run(names))}
    semantic = {s.exercise: s for s in ([] if args.syntactic else run_semantic(names))}
    entries = [entry(n, syntactic.get(n), semantic.get(n)) for n in names]
    command = shlex.join(["python", "tools/mutation_test.py", *(argv if argv is not None else sys.argv[1:])])
    write_entries(Path(args.json), command, entries, list(EXERCISES))
    holes = any(s.survived for s in syntactic.values()) or any(s.holes for s in semantic.values())
    return 1 if holes else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The fingerprint that serves a stored kernel before numba types it (``buildcache.dispatch``), on a CPU.

A fingerprint must change with anything that changes the kernel's code (its constants, what it closes over, a
helper it calls, a course module's value it reads, its argument types, numba's options), stay the same for one
program written in two places (a notebook's cell and the race run's script), and give up on what it cannot name.
No GPU: kernels are fingerprinted, never compiled.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest
from numba.core import types as nb

from utilities.execution import python_env
from utilities.machinery.buildcache import dispatch

ROOT = Path(__file__).resolve().parent.parent
F32 = (nb.float32[::1],)

KERNEL = """
from numba import cuda

@jit(device=True)
def helper(v):
    return v * SCALE

def make(offset):
    @jit
    def kernel(a):
        i = cuda.grid(1)
        if i < a.size:
            a[i] = helper(a[i]) + offset
        cuda.syncthreads()
    return kernel
"""


class Jit:
    """What the fingerprint reads of numba-cuda's dispatcher (the tests run in numba's simulator, whose kernels
    are another class): the Python function and the compile options."""

    def __init__(self, fn=None, **options):
        self.py_func, self.targetoptions = fn, {"debug": 0, "lineinfo": False, "fastmath": False, **options}

    def __call__(self, fn):  # ``@jit(device=True)``
        return Jit(fn, **self.targetoptions)


def jit(fn=None, **options):
    return Jit(fn, **options) if fn is not None else Jit(None, **options)


def define(source: str, where: Path, lead: int = 0, **scope: object) -> dict:
    """Run ``source`` as a module of its own (file ``where``, ``lead`` blank lines first) in ``__main__``."""
    where.write_text("\n" * lead + textwrap.dedent(source))
    namespace: dict = {"__name__": "__main__", "SCALE": 2.0, "jit": jit, **scope}
    exec(compile(where.read_text(), str(where), "exec"), namespace)
    return namespace


def fp(kernel, argtypes=F32, **options) -> str | None:
    return dispatch.fingerprint(kernel.py_func, argtypes, {**kernel.targetoptions, **options}, {"cc": "(9, 0, 'a')"})


def test_one_program_in_two_places_has_one_fingerprint(tmp_path):
    first = define(KERNEL, tmp_path / "cell.py")["make"](1.0)
    moved = define(KERNEL, tmp_path / "script.py", lead=9)["make"](1.0)
    # ``cuda`` imported in another cell: CPython 3.12 compiles ``cuda.syncthreads()`` another way
    from numba import cuda

    elsewhere = define(KERNEL.replace("from numba import cuda\n", ""), tmp_path / "nb.py", cuda=cuda)["make"](1.0)
    assert fp(first) is not None
    assert fp(first) == fp(moved) == fp(elsewhere)


def test_every_change_to_the_code_changes_it(tmp_path):
    base = define(KERNEL, tmp_path / "a.py")
    reference = fp(base["make"](1.0))
    changes = {
        "a constant": define(KERNEL.replace("+ offset", "+ offset + 1"), tmp_path / "b.py")["make"](1.0),
        "a closed-over value": base["make"](2.0),
        "a helper's body": define(KERNEL.replace("v * SCALE", "v * SCALE + v"), tmp_path / "c.py")["make"](1.0),
        "a global the helper reads": define(KERNEL, tmp_path / "d.py", SCALE=3.0)["make"](1.0),
        "an operator": define(KERNEL.replace("+ offset", "- offset"), tmp_path / "e.py")["make"](1.0),
        "a barrier gone": define(KERNEL.replace("        cuda.syncthreads()\n", ""), tmp_path / "f.py")["make"](1.0),
    }
    for what, kernel in changes.items():
        assert fp(kernel) not in (None, reference), what
    kernel = base["make"](1.0)
    assert fp(kernel, argtypes=(nb.float64[::1],)) != reference, "argument types"
    assert fp(kernel, argtypes=(nb.float32[:],)) != reference, "an array's layout"
    assert fp(kernel, fastmath=True) != reference, "numba's options"
    other_target = dispatch.fingerprint(kernel.py_func, F32, dict(kernel.targetoptions), {"cc": "(8, 0, '')"})
    assert other_target != reference, "the target"


def test_a_course_modules_value_read_through_the_module_counts(tmp_path, monkeypatch):
    module = types.ModuleType("utilities._dispatch_probe")
    module.WIDTH = 4
    monkeypatch.setitem(sys.modules, module.__name__, module)
    source = """
    from numba import cuda
    @jit
    def kernel(a):
        a[0] = probe.WIDTH
    """
    kernel = define(source, tmp_path / "m.py", probe=module)["kernel"]
    before = fp(kernel)
    monkeypatch.setattr(module, "WIDTH", 8)
    assert fp(kernel) not in (None, before)


def test_a_global_named_like_an_attribute_is_not_read(tmp_path):
    """``cuda.blockIdx.x`` names ``x``; a notebook's global ``x`` (of any kind) is not the kernel's business."""
    source = """
    from numba import cuda
    @jit
    def kernel(a):
        a[cuda.blockIdx.x] = 1.0
    """
    plain = define(source, tmp_path / "p.py")["kernel"]
    shadowed = define(source, tmp_path / "q.py", x=object())["kernel"]
    assert fp(plain) is not None and fp(plain) == fp(shadowed)


def test_what_it_cannot_name_gives_no_fingerprint(tmp_path):
    class Opaque:
        pass

    source = """
    from numba import cuda
    def make(thing):
        @jit
        def kernel(a):
            a[0] = thing
        return kernel
    """
    kernel = define(source, tmp_path / "o.py")["make"](Opaque())
    dispatch.MISSED.clear()
    assert fp(kernel) is None
    assert "Opaque" in dispatch.MISSED[-1]


def test_line_numbers_count_where_the_code_can_raise(tmp_path):
    source = """
    from numba import cuda
    @jit
    def kernel(a):
        if a.size == 0:
            raise ValueError("empty")
        a[0] = 1.0
    """
    here = define(source, tmp_path / "r.py")["kernel"]
    lower = define(source, tmp_path / "r.py", lead=3)["kernel"]
    assert fp(here) is not None and fp(here) != fp(lower)
    quiet = define(KERNEL, tmp_path / "s.py")["make"](1.0)
    assert fp(quiet, lineinfo=True) != fp(quiet), "with lineinfo, lines reach the IR"


def test_arrays_and_dtypes_by_value(tmp_path):
    source = """
    from numba import cuda
    def make(table, dtype):
        @jit
        def kernel(a):
            a[0] = table[1] + dtype(0)
        return kernel
    """
    make = define(source, tmp_path / "t.py")["make"]
    base = fp(make(np.arange(4.0), np.float32))
    assert base is not None
    assert fp(make(np.arange(4.0), np.float32)) == base
    assert fp(make(np.arange(4.0) * 2, np.float32)) != base
    assert fp(make(np.arange(4.0), np.float64)) != base


def test_a_course_kernel_has_one_fingerprint_in_every_process():
    script = textwrap.dedent(
        """
        import sys
        from numba.core import types as nb
        from utilities.machinery.buildcache import dispatch
        from utilities.ozaki import simt
        kernel = simt.shifts_from_max_kernel
        args = (nb.int32[::1], nb.int32[::1], nb.int32[::1])
        print(dispatch.fingerprint(kernel.py_func, args, dict(kernel.targetoptions), {"cc": "x"}))
        """
    )
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM", "COURSE_SIMULATOR_AUTO")}
    runs = [  # numba-cuda's own dispatcher (no simulator): made without a GPU, never compiled
        subprocess.run([sys.executable, "-c", prelude + script], capture_output=True, text=True, cwd=ROOT, env=env)
        for prelude in ("", "import numpy, utilities.ozaki.check\n")  # another import history
    ]
    outs = [r.stdout.strip() for r in runs]
    assert all(r.returncode == 0 for r in runs), [r.stderr[-2000:] for r in runs]
    assert outs[0] and outs[0] != "None" and outs[0] == outs[1]


def test_off_switch():
    assert dispatch.enabled({}) and dispatch.recording({})
    assert not dispatch.enabled({dispatch.ENV: "off"}) and not dispatch.recording({dispatch.ENV: "off"})
    assert not dispatch.enabled({dispatch.ENV: "record"}) and dispatch.recording({dispatch.ENV: "record"})


@pytest.mark.parametrize("value", [None, True, 3, 2.5, "s", b"b", (1, (2,)), frozenset({1, 2})])
def test_plain_values_are_named(value):
    walk = dispatch.Fingerprint(lines=False)
    assert walk.value(value, ()) == walk.value(value, ())


def test_a_class_of_the_notebook_is_not_named_by_its_name(tmp_path):
    """A class defined in a cell may be defined again with another body under the same name: no fingerprint."""
    source = """
    from numba import cuda
    class Tile:
        pass
    @jit
    def kernel(a):
        a[0] = Tile
    """
    assert fp(define(source, tmp_path / "k.py")["kernel"]) is None


def test_named_tuples_count_their_field_names(tmp_path):
    from collections import namedtuple

    source = """
    def make(cfg):
        @jit
        def kernel(a):
            a[0] = cfg.rows
        return kernel
    """
    make = define(source, tmp_path / "n.py")["make"]
    ab, ba = namedtuple("Cfg", "rows cols"), namedtuple("Cfg", "cols rows")
    assert fp(make(ab(1, 2))) != fp(make(ba(1, 2)))


def _tool(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"{name}_for_dispatch", ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_every_planted_mistake_and_mutant_of_a_gpu_exercise_changes_its_code_fingerprint():
    """The course's planted mistakes and syntactic mutants of each GPU exercise cell, compiled (not run): none may
    leave the cell's code, as the fingerprint reads it, unchanged; a kernel defined by the cell would then be served
    the solution's cubin."""
    tool = _tool("mutation_gpu")
    same = []
    for name, exercise in tool.GPU_EXERCISES.items():
        _, source, _ = tool.cell_plan(exercise)
        original = dispatch.Fingerprint(lines=False).code(compile(source, "<cell>", "exec"))
        planned, _ = tool.plan_mutants(name, source, 40)
        for p in planned:
            if p.kind == "alternative":
                continue
            try:
                code = compile(p.source, "<cell>", "exec")
            except SyntaxError:
                continue
            if dispatch.Fingerprint(lines=False).code(code) == original:
                same.append(f"{name}: {p.kind}: {p.what}")
    assert not same, same


MATMUL_SCRIPT = """
from utilities.machinery import cpu_build
cpu_build.enter(link=False)
from numba import cuda
from numba.core import types as nb
from utilities.machinery.buildcache import dispatch
from utilities.fusion.tensorcore import fp16_matmul

mm0 = fp16_matmul(128, 64, 64, 128)

@cuda.jit
def kernel(a):
    a[0] = mm0.size[0]

def fingerprint():
    return dispatch.fingerprint(kernel.py_func, (nb.float32[::1],), dict(kernel.targetoptions), {})

fresh = fingerprint()
mm0.get_shared_storage_size()  # a trait, as a factory asks of its Matmul: nvmath caches it and the sizes on it
print("fingerprints:", fresh, fingerprint(), sorted(vars(mm0)))
"""


def test_a_matmul_used_before_gives_the_fingerprint_of_a_fresh_one():
    """The course's factories share one Matmul between kernels (``functools.cache``) and nvmath caches its traits on
    it at first use: a kernel built after another that used it must get the fingerprint it gets built first (as a
    prebuild job builds it). On the CPU (``cpu_build``: nvmath without a GPU), in a fresh process."""
    from utilities.machinery import cpu_build

    why = cpu_build.unavailable()
    if why:
        pytest.skip(f"no CPU build of kernels here: {why}")
    env = python_env(simulator=False, COURSE_CPU_BUILD="9.0")
    done = subprocess.run([sys.executable, "-c", MATMUL_SCRIPT], capture_output=True, text=True, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    fresh, used, attributes = [ln for ln in done.stdout.splitlines() if ln.startswith("fingerprints:")][-1].split(
        " ", 3
    )[1:]
    assert "_traits" in attributes, "the Matmul was not used: the case shows nothing"
    assert fresh != "None" and fresh == used


CONTRACT_SCRIPT = """
import inspect, json, subprocess, sys
from utilities.machinery import cpu_build
cpu_build.enter(link=False)
import utilities.primer.tensorcore as course
from utilities import contract_builds, sanitizer
from utilities.primer import check

role, folder = sys.argv[1], sys.argv[2]
source = inspect.getsource(course.make_tile_gemm_kernel).replace("* TM,", "* TM + 0,")  # an edit
path = f"{folder}/{role}_cell.py"  # the notebook's cell and the script live in two files
open(path, "w").write(source)
namespace = {**vars(course), "__name__": "__main__"}
exec(compile(source, path, "exec"), namespace)
mine = namespace["make_tile_gemm_kernel"]
first = {"shape": (256, 384, 64), "tile": (128, 128), "block": check.CONFIGS[1]}
if role == "script":  # the first check's contract builds: the other block's script, run as the check runs it
    texts = [check.check_tile_gemm.driver([mine], *a, **k) for a, k in check._contract((), first)]
    _, scripts = contract_builds.scripts_for([mine], texts, check.check_tile_gemm.driver([mine], **first))
    open(f"{folder}/ahead.py", "w").write("from utilities.machinery import cpu_build\\ncpu_build.enter(link=False)\\n"
                                          + scripts[0])
    done = subprocess.run([sys.executable, f"{folder}/ahead.py"], env=sanitizer.script_environment())
    sys.exit(done.returncode)
import cupy as cp  # the notebook's later check: its plan at the other block, built from the cell's code
from utilities.machinery import buildcache
buildcache.install(quiet=True)
from utilities.plans import TileConfig
from utilities.primer.tensorcore import Kernels, TileGemm
copy = {**vars(course), "__name__": "__main__"}  # the solution's cell: the course's factory, unchanged
exec(compile(inspect.getsource(course.make_tile_gemm_kernel), f"{folder}/copy_cell.py", "exec"), copy)
for kernels in (Kernels(tile_gemm=mine), Kernels(tile_gemm=copy["make_tile_gemm_kernel"]), Kernels()):
    plan = TileGemm(256, 384, cfg=TileConfig(**check.CONFIGS[0]), kernels=kernels)
    plan(cp.zeros((256, plan.k), cp.float16), cp.zeros((plan.k, 384), cp.float16))
print("typed:", json.dumps([key for _, key in cpu_build.TYPED]))
"""


def test_a_kernel_built_beside_a_check_has_the_fingerprint_of_the_notebooks_own(tmp_path):
    """The contract's other block, built by its script (``utilities.contract_builds``), and the notebook's plan at
    that block, built from the notebook's cell: one fingerprint, so the notebook is served what the script built.
    And a notebook's unchanged copy of the course's factory has the course kernel's key. On the CPU
    (``cpu_build``), typing only; each process dumps its fingerprints (``COURSE_FAST_DISPATCH_DUMP``)."""
    from utilities.machinery import cpu_build

    why = cpu_build.unavailable()
    if why:
        pytest.skip(f"no CPU build of kernels here: {why}")
    dumps = {}
    for role in ("script", "notebook"):
        dump = tmp_path / f"{role}-fingerprints"
        env = python_env(simulator=False, COURSE_CPU_BUILD="9.0", COURSE_FAST_DISPATCH_DUMP=str(dump),
                         COURSE_BUILD_CACHE=str(tmp_path / "cache"))  # fmt: skip
        done = subprocess.run(
            [sys.executable, "-c", CONTRACT_SCRIPT, role, str(tmp_path)], capture_output=True, text=True, cwd=ROOT,
            env=env, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        dumps[role] = sorted(p.name for p in dump.glob("tile_gemm_kernel-*.json"))
    assert len(dumps["script"]) == 1 and set(dumps["script"]) <= set(dumps["notebook"])
    # the notebook's cell defines the factory in __main__: an unchanged copy has the course kernel's key (served
    # from its cubin, not linked: linking.main_alias), the edited one another
    edited, copy, course = json.loads(done.stdout.split("typed:", 1)[1].splitlines()[0])
    assert copy == course and edited != course


# ------------------------------------------------------------------------------------------------------------
# One build of a kernel across processes: a build claims its fingerprint; another process waits for its record
# ------------------------------------------------------------------------------------------------------------


def patched(tmp_path, monkeypatch):
    """A dispatcher class in miniature, patched as ``buildcache.install`` patches numba-cuda's; ``rebuild`` (which
    needs a GPU) stands in, and every build and service is recorded."""
    from utilities.machinery.buildcache.store import DiskCache, make_key

    cache, events = DiskCache(tmp_path / "cache"), []
    kernel = define(KERNEL, tmp_path / "cell.py")["make"](1.0)

    class Dispatcher:
        specialized, overloads, targetoptions = False, {}, dict(kernel.targetoptions)
        py_func = staticmethod(kernel.py_func)  # a function, not a method of the instance
        targetctx = types.SimpleNamespace(codegen=lambda: None)

        def compile(self, sig):
            events.append(("built", cache.claimed(where)))  # the fingerprint is claimed while the build runs
            return types.SimpleNamespace(_codelibrary=types.SimpleNamespace())

        def add_overload(self, built, argtypes):
            pass

    monkeypatch.setattr(dispatch, "rebuild", lambda recorded, *args: "served kernel")
    sigutils = types.SimpleNamespace(normalize_signature=lambda sig: (sig, None))
    served = lambda name, key, waited: events.append(("served", waited))  # noqa: E731
    dispatch.patch_dispatch(Dispatcher, cache, {}, sigutils, served=served, cc=lambda: (9, 0), gpu=lambda: True)
    found = dispatch.fingerprint(kernel.py_func, F32, dict(kernel.targetoptions), {"cc": "(9, 0)"})
    where = make_key("dispatch", found, {})
    return Dispatcher(), cache, where, events


def test_a_build_claims_its_kernel_and_another_process_waits_for_it(tmp_path, monkeypatch):
    import pickle
    import threading

    dispatcher, cache, where, events = patched(tmp_path, monkeypatch)
    dispatcher.compile(F32)
    assert events == [("built", True)] and not cache.claimed(where), "claimed while it built, released after"

    assert cache.claim(where)  # another process's build under way: it stores the record, then lets go

    def finish():
        cache.put("cubin", (0).to_bytes(4, "little") + b"\x7fELF")
        cache.put(where, pickle.dumps({"key": "cubin"}))
        cache.release(where)

    threading.Timer(0.5, finish).start()
    assert dispatcher.compile(F32) == "served kernel"
    assert events[-1][0] == "served" and events[-1][1] >= 0.4, "waited for the other build, then served"


def test_a_claim_let_go_without_a_record_is_built_here(tmp_path, monkeypatch):
    dispatcher, cache, where, events = patched(tmp_path, monkeypatch)
    assert cache.claim(where)
    state, waited = dispatch.await_record(cache, where, limit=0.3, poll=0.05)
    assert state is None and 0.3 <= waited < 5, "a claim held past the limit: given up"
    import threading

    threading.Timer(0.3, lambda: cache.release(where)).start()  # the other build failed: no record
    dispatcher.compile(F32)
    assert [e[0] for e in events] == ["built"]


def test_record_mode_builds_a_kernel_whose_record_is_there(tmp_path, monkeypatch):
    """``COURSE_FAST_DISPATCH=record`` (a prebuild job of a check's twin): typed and built though it could be served."""
    import pickle

    dispatcher, cache, where, events = patched(tmp_path, monkeypatch)
    cache.put("cubin", (0).to_bytes(4, "little") + b"\x7fELF")
    cache.put(where, pickle.dumps({"key": "cubin"}))
    monkeypatch.setenv(dispatch.ENV, dispatch.RECORD)
    dispatcher.compile(F32)
    monkeypatch.delenv(dispatch.ENV)
    assert dispatcher.compile(F32) == "served kernel"
    assert [e[0] for e in events] == ["built", "served"]

"""The build cache never serves a wrong kernel: keying, invalidation, corruption, deferred finalization.

A fake libmathdx binding stands in for ``nvmath.bindings.mathdx``: it hands out integer handles, "compiles"
device functions into bytes that depend on everything the calls said, and counts its expensive calls, so the
tests can tell a cache hit (no compile) from a miss and check that a hit returns the bytes a compile would.
"""

from __future__ import annotations

import ctypes
import hashlib
import itertools
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from utilities.execution import python_env
from utilities.machinery import buildcache
from utilities.machinery.buildcache import DiskCache, LazyMathdx, cubin_key, interposer, linking, make_key

ROOT = Path(__file__).resolve().parent.parent

CODE_ISA = 7
ENV = {"nvmath-python": "1.0.0", "libmathdx": "302"}


def fake_mathdx(salt: bytes = b"") -> types.SimpleNamespace:
    """A libmathdx binding in miniature: state per handle, an NVRTC that is slow only in its counter. ``salt`` ends
    every piece of code it generates: libmathdx's LTO-IR differs byte for byte each time one recipe is generated."""
    m = types.SimpleNamespace()
    ids = itertools.count(10_001)  # far from every number the tests pass, which describe() would take for handles
    state: dict[int, list] = {}
    m.calls = {"compile": 0, "finalize": 0, "trait": 0}

    def new(*what):
        h = next(ids)
        state[h] = list(what)
        return h

    def describe(h):  # what a compile "sees": the handle's whole history, dependencies expanded
        return [describe(x) if isinstance(x, int) and x in state and x != h else x for x in state[h]]

    m.cublasdx_create_descriptor = lambda: new("desc")
    m.cublasdx_set_operator_int64 = lambda h, op, v: state[h].append(("op", op, v))
    m.cublasdx_set_operator_int64s = lambda h, op, n, vals: state[h].append(("ops", op, tuple(vals[:n])))
    m.cublasdx_create_tensor = lambda h, t: new("tensor", h, t)
    m.cublasdx_create_tensor_strided = lambda mem, vt, ptr, rank, shape, strides: new(
        "strided", mem, vt, tuple(shape), tuple(strides)
    )
    m.cublasdx_create_device_pipeline = lambda h, t, depth, strat, a, b: new("dpipe", h, t, depth, strat, a, b)
    m.cublasdx_create_tile_pipeline = lambda h, t, dp: new("tpipe", h, t, dp)
    m.cublasdx_create_device_function = lambda h, ft, n, ts: new("fn", h, ft, *ts[:n])
    m.cublasdx_create_device_function_with_pipelines = lambda h, ft, nt, ts, np_, ps: new(
        "fnp", h, ft, *ts[:nt], *ps[:np_]
    )
    m.commondx_create_code = lambda: new("code")
    m.commondx_set_code_option_int64s = lambda c, o, n, vals: state[c].append(("opt", o, tuple(vals[:n])))
    m.commondx_set_code_option_str = lambda c, o, s: state[c].append(("opt", o, s))

    def finalize(n, handles):
        m.calls["finalize"] += 1
        for h in handles[:n]:
            state[h].append("finalized")

    m.cublasdx_finalize_tensors = finalize
    m.cublasdx_finalize_pipelines = finalize

    def trait(h, t):
        m.calls["trait"] += 1
        assert "finalized" in state[h], "traits need a finalized descriptor"
        return len(repr(describe(h))) + t

    m.cublasdx_get_pipeline_trait_int64 = trait

    def trait_int64s(h, t, n, address):
        m.calls["trait"] += 1
        (ctypes.c_int64 * n).from_address(address)[:] = [t + i for i in range(n)]

    m.cublasdx_get_pipeline_trait_int64s = trait_int64s

    def compile_functions(code, n, fns):  # as libmathdx's: the same code whether the dependencies were finalized
        m.calls["compile"] += 1
        what = repr([describe(code), [describe(f) for f in fns[:n]]]).replace(", 'finalized'", "")
        state[code].append(("lto", hashlib.sha256(what.encode())))

    m.cublasdx_finalize_device_functions = compile_functions

    def lto(code):
        return next(x[1] for x in state[code] if isinstance(x, tuple) and x[0] == "lto").digest() * 1000 + salt

    m.commondx_get_code_ltoir_size = lambda code: len(lto(code))

    def get_ltoir(code, size, buf):
        buf[:size] = lto(code)[:size]

    m.commondx_get_code_ltoir = get_ltoir
    m.commondx_get_code_option_int64 = lambda code, option: 90 if option == CODE_ISA else -1
    m.commondx_destroy_code = lambda code: state.pop(code)

    def symbol(h):  # as libmathdx's: the same whether the function's tensors are finalized yet or not
        what = repr(describe(h)).replace(", 'finalized'", "")
        return ("fn_" + hashlib.sha256(what.encode()).hexdigest()[:8]).encode()

    m.cublasdx_get_device_function_trait_str_size = lambda h, t: len(symbol(h))
    m.cublasdx_get_device_function_trait_str = lambda h, t, n, buf: buf.__setitem__(slice(0, n), symbol(h)[:n])
    return m


def build_and_generate(m, *, block=128, depth=3, shape=(8192, 8192), sm=90, ftype=1, tensor_type=5, symbol=False):
    """What nvmath does for one pipeline kernel's EXECUTE function, through the (wrapped) binding."""
    h = m.cublasdx_create_descriptor()
    m.cublasdx_set_operator_int64s(h, 1, 3, [128, 128, 128])
    m.cublasdx_set_operator_int64s(h, 2, 3, [block, 1, 1])
    acc = m.cublasdx_create_tensor(h, tensor_type)
    m.cublasdx_finalize_tensors(1, [acc])
    ga = m.cublasdx_create_tensor_strided(0, 3, 0, 2, list(shape), [shape[1], 1])
    gb = m.cublasdx_create_tensor_strided(0, 3, 0, 2, list(shape), [1, shape[0]])
    dp = m.cublasdx_create_device_pipeline(h, 0, depth, 0, ga, gb)
    m.cublasdx_finalize_pipelines(1, [dp])
    tp = m.cublasdx_create_tile_pipeline(h, 0, dp)
    m.cublasdx_finalize_pipelines(1, [tp])
    size = m.cublasdx_get_pipeline_trait_int64(dp, 2)
    dims = np.zeros(3, np.int64)
    m.cublasdx_get_pipeline_trait_int64s(dp, 4, 3, dims.ctypes.data)
    fn = m.cublasdx_create_device_function_with_pipelines(h, ftype, 1, [acc], 1, [tp])
    if symbol:  # as nvmath asks, before generating the code
        buf = bytearray(m.cublasdx_get_device_function_trait_str_size(fn, 1))
        m.cublasdx_get_device_function_trait_str(fn, 1, len(buf), buf)
    code = m.commondx_create_code()
    m.commondx_set_code_option_int64s(code, 3, 1, [sm])
    m.commondx_set_code_option_str(code, 9, "-gen-opt-lto")
    m.cublasdx_finalize_device_functions(code, 1, [fn])
    n = m.commondx_get_code_ltoir_size(code)
    buf = bytearray(n)
    m.commondx_get_code_ltoir(code, n, buf)
    isa = m.commondx_get_code_option_int64(code, CODE_ISA)
    m.commondx_destroy_code(code)
    return bytes(buf), isa, size, tuple(dims)


def run(cache_dir, env=ENV, **variant):
    """One "process": a fresh binding, the interposer on it, one kernel's functions generated."""
    m = fake_mathdx()
    lazy = LazyMathdx(m, DiskCache(cache_dir), env, isa_option=CODE_ISA)
    lazy.install()
    return build_and_generate(m, **variant), m.calls, lazy.cache.stats


def test_a_hit_returns_what_a_compile_returns_without_compiling(tmp_path):
    plain = build_and_generate(fake_mathdx())
    first, calls, _ = run(tmp_path)
    assert first == plain and calls["compile"] == 1
    second, calls, stats = run(tmp_path)
    assert second == plain
    assert calls == {"compile": 0, "finalize": 0, "trait": 0}, "a warm cache finalizes and compiles nothing"
    assert stats.hits == 3 and stats.misses == 0  # two traits and one LTO-IR


@pytest.mark.parametrize(
    "change",
    [{"block": 256}, {"depth": 4}, {"shape": (4096, 8192)}, {"sm": 80}, {"ftype": 2}, {"tensor_type": 6}],
    ids=lambda c: next(iter(c)),
)
def test_changing_any_one_field_forces_a_rebuild(tmp_path, change):
    run(tmp_path)
    result, calls, _ = run(tmp_path, **change)
    assert calls["compile"] == 1, f"{change} must not be served from the cache"
    assert result == build_and_generate(fake_mathdx(), **change)


def test_a_version_change_invalidates_every_entry(tmp_path):
    run(tmp_path)
    _, calls, _ = run(tmp_path, env={**ENV, "libmathdx": "303"})
    assert calls["compile"] == 1 and calls["trait"] == 2


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty"])
def test_a_corrupt_or_partial_entry_is_rebuilt_not_served(tmp_path, damage):
    run(tmp_path)
    for path in (tmp_path / "v1").rglob("*"):
        if path.is_file():
            blob = path.read_bytes()
            path.write_bytes(
                {
                    "truncate": blob[: len(blob) // 2],
                    "flip": blob[:-1] + bytes([blob[-1] ^ 1]),
                    "garbage": b"x" * 60,
                    "empty": b"",
                }[damage]
            )
    with pytest.warns(UserWarning, match="corrupt entry"):
        result, calls, stats = run(tmp_path)
    assert result == build_and_generate(fake_mathdx()) and calls["compile"] == 1
    assert stats.corrupt == 5  # two traits, the LTO-IR, its digest and the target's ISA version
    assert run(tmp_path)[1]["compile"] == 0  # and the rebuilt entries serve the next run


def test_descriptors_made_before_install_are_never_cached(tmp_path):
    m = fake_mathdx()
    h = m.cublasdx_create_descriptor()  # before the interposer: no recipe
    lazy = LazyMathdx(m, DiskCache(tmp_path), ENV, isa_option=CODE_ISA)
    lazy.install()
    acc = m.cublasdx_create_tensor(h, 5)
    fn = m.cublasdx_create_device_function(h, 1, 1, [acc])
    m.cublasdx_finalize_tensors(1, [acc])
    code = m.commondx_create_code()
    m.cublasdx_finalize_device_functions(code, 1, [fn])
    assert m.calls["compile"] == 1 and lazy.cache.stats.stored == 0


def test_disk_cache_round_trip_clear_and_location(tmp_path, monkeypatch):
    cache = DiskCache(tmp_path)
    assert cache.get("ab" * 32) is None
    cache.put("ab" * 32, b"payload")
    assert cache.get("ab" * 32) == b"payload" and cache.size_bytes() > 0
    cache.clear()
    assert cache.get("ab" * 32) is None
    monkeypatch.setenv("COURSE_BUILD_CACHE", str(tmp_path / "here"))
    assert buildcache.default_cache_dir() == tmp_path / "here"
    monkeypatch.setenv("COURSE_BUILD_CACHE", "off")
    assert buildcache.default_cache_dir() is None
    monkeypatch.delenv("COURSE_BUILD_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert buildcache.default_cache_dir() == tmp_path / "xdg" / "tcfusion-course"


def test_keys_depend_on_kind_recipe_and_environment():
    base = make_key("ltoir", ["a", 1], ENV)
    assert make_key("ltoir", ["a", 1], dict(reversed(ENV.items()))) == base  # order of versions does not matter
    assert make_key("trait", ["a", 1], ENV) != base
    assert make_key("ltoir", ["a", 2], ENV) != base
    assert make_key("ltoir", ["a", 1], {**ENV, "numba": "x"}) != base


def test_cubin_key_covers_ir_links_and_options():
    class LTOIR:
        def __init__(self, data):
            self.data = data

    def library(**change):
        lib = types.SimpleNamespace(
            llvm_strs=["; ModuleID = 'a'\n", "; ModuleID = 'b'\n"],
            _nvvm_options={"opt": 3},
            needs_cudadevrt=False,
            _linking_files=[LTOIR(b"execute"), LTOIR(b"copy")],
            _max_registers=None,
            _lto=True,
        )
        for key, value in change.items():
            setattr(lib, key, value)
        return lib

    base = cubin_key(library(), (9, 0, "a"), ENV)
    assert cubin_key(library(llvm_strs=["; ModuleID = 'b'", "; ModuleID = 'a'"]), (9, 0, "a"), ENV) == base
    assert cubin_key(library(llvm_strs=["; ModuleID = 'a'"]), (9, 0, "a"), ENV) != base
    assert cubin_key(library(_linking_files=[LTOIR(b"execute"), LTOIR(b"copy2")]), (9, 0, "a"), ENV) != base
    assert cubin_key(library(_max_registers=128), (9, 0, "a"), ENV) != base
    assert cubin_key(library(), (9, 0, ""), ENV) != base
    assert cubin_key(library(), (9, 0, "a"), {**ENV, "nvidia-nvjitlink": "13.1"}) != base


def test_install_stays_off_with_unverified_versions(monkeypatch, tmp_path):
    from utilities.machinery import versions

    monkeypatch.setattr(versions, "installed", lambda name: "0.0")
    monkeypatch.setattr(versions, "_warned", set())
    monkeypatch.setattr(buildcache, "_STATE", {})
    with pytest.warns(UserWarning, match="the build cache is off: verified with nvmath-python 1.0.0"):
        assert buildcache.install(tmp_path) is None


# ----------------------------------------------------------------------------------------------------------------
# Parallel generation: placeholders now, the real LTO-IR from worker processes at link time
# ----------------------------------------------------------------------------------------------------------------


def build_two(m, symbol=False):
    """Two device functions of one kernel, generated one after the other as numba lowers them."""
    return [build_and_generate(m, ftype=ftype, symbol=symbol) for ftype in (1, 2)]


def pooled(cache_dir, run_job=None, **lazy_args):
    """A "process" whose misses go to a pool (threads here; processes in the course) replaying the recipes."""
    from concurrent.futures import ThreadPoolExecutor

    from utilities.machinery.codegen_workers import Pool, replay

    m = fake_mathdx()
    holder = {}
    run_job = run_job or (lambda job: replay(job, lambda name: holder["lazy"].real[name]))
    pool = Pool(2, run=run_job, executor=ThreadPoolExecutor(2))
    lazy = LazyMathdx(m, DiskCache(cache_dir), ENV, CODE_ISA, pool, **lazy_args)
    holder["lazy"] = lazy
    lazy.install()
    return m, lazy


def test_pools_of_several_processes_generate_at_most_one_job_a_slot(tmp_path, monkeypatch):
    """The prebuild's jobs share the cores: two pools of three workers each, two slots between them (a slot file is
    locked by the worker using it), so never more than two generate at once, and both pools finish."""
    import threading
    import time as clock

    from utilities.machinery.codegen_workers import SLOTS_ENV, Pool, Slots

    slots = Slots(tmp_path / "slots", 2)
    monkeypatch.setenv(SLOTS_ENV, str(slots.folder))
    lock, now, peak = threading.Lock(), [0], [0]

    def generate(job):
        with lock:
            now[0] += 1
            peak[0] = max(peak[0], now[0])
        clock.sleep(0.05)
        with lock:
            now[0] -= 1
        return job

    pools = [Pool(3, run=generate), Pool(3, run=generate)]  # the slots from the environment, as in a prebuild job
    futures = [pool.submit(n) for n in range(6) for pool in pools]
    assert sorted(f.result(timeout=30) for f in futures) == sorted(list(range(6)) * 2)
    assert peak[0] == 2, f"{peak[0]} generated at once with two slots"
    for pool in pools:
        pool.shutdown()
    with pytest.raises(ValueError, match="no slot files"):
        Slots(tmp_path / "empty")


def test_a_job_waiting_for_a_slot_gives_up_when_its_pool_shuts_down(tmp_path):
    """Every slot busy (held by another process: here a file opened apart, as another process would): the job
    waits; once its pool is shut down it stops waiting and never runs."""
    import fcntl

    from utilities.machinery.codegen_workers import Pool, Slots

    slots = Slots(tmp_path / "slots", 1)
    ran = []
    with open(slots.files[0], "rb") as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        pool = Pool(1, run=ran.append, slots=slots)
        future = pool.submit("job")
        with pytest.raises(TimeoutError):
            future.result(timeout=0.5)  # waiting for the slot
        pool._stop.set()  # what shutdown does first (shutdown itself would not wait for the thread)
        with pytest.raises(RuntimeError, match="shut down while this job waited"):
            future.result(timeout=5)
    assert ran == []
    pool.shutdown()


def test_pool_hands_out_placeholders_that_resolve_to_the_code_a_compile_returns(tmp_path):
    from utilities.machinery.codegen_workers import PENDING

    plain = build_two(fake_mathdx())
    m, lazy = pooled(tmp_path)
    first, second = build_two(m)
    assert first == plain[0], "the first code for a target is generated in place (it tells the ISA version)"
    assert second[0].startswith(PENDING), "later code is a placeholder until the link"
    assert second[1] == plain[1][1] and second[2:] == plain[1][2:]  # the ISA version and traits are real
    assert lazy.resolve(second[0]) == plain[1][0]
    assert m.calls["compile"] == 2, "one in place, one in the pool (on replayed descriptors)"
    lazy.pool.shutdown()
    result, calls, _ = run(tmp_path, ftype=2)  # the worker's result was stored: a later process hits
    assert result == plain[1] and calls["compile"] == 0


def test_placeholders_in_linked_modules_are_replaced_before_the_link(tmp_path):
    m, lazy = pooled(tmp_path)
    _, second = build_two(m)
    linked = [types.SimpleNamespace(_data=second[0]), types.SimpleNamespace(_data=b"real ltoir")]
    buildcache.resolve_placeholders(linked, lazy)
    assert linked[0]._data == build_two(fake_mathdx())[1][0] and linked[1]._data == b"real ltoir"


def test_nvmaths_own_links_get_the_real_code(tmp_path):
    """nvmath links the pipeline init/destroy kernels itself, through cuda.core's ObjectCode.from_ltoir: a placeholder
    is kept until the link, which gets the real code."""
    m, lazy = pooled(tmp_path)
    _, second = build_two(m)
    original = types.SimpleNamespace(from_ltoir=lambda data, name=None: types.SimpleNamespace(code=data), kind="ltoir")
    shim = linking.ResolvingObjectCode(original, lazy)
    kept, real = shim.from_ltoir(second[0], name="init"), shim.from_ltoir(b"real ltoir")
    assert kept.code == second[0] and shim.kind == "ltoir"
    assert shim.resolved(kept).code == build_two(fake_mathdx())[1][0] and shim.resolved(real) is real


def test_code_needed_at_exit_is_generated_in_place(tmp_path):
    """nvmath frees pipelines at interpreter exit, which can need code never generated: the pool is gone by then."""
    m, lazy = pooled(tmp_path)
    lazy.pool._executor.shutdown()
    assert build_two(m) == build_two(fake_mathdx())  # no placeholders, no error


def test_nvmaths_pipeline_kernels_are_linked_once_then_served(tmp_path):
    links = []

    class Linker:  # cuda.core's, in miniature: the "cubin" is the inputs' bytes joined
        def __init__(self, *codes, options=None):
            self.codes, self.options = codes, options

        def link(self, target):
            links.append(target)
            return types.SimpleNamespace(code=b"|".join(c.code for c in self.codes) + repr(self.options).encode())

    def from_cubin(data):
        return types.SimpleNamespace(code=data, served=True)

    def linker(*codes, options="sm_90a"):
        return linking.CachingLinker(
            *codes, options=options, _link=(Linker, from_cubin), _cache=(DiskCache(tmp_path), ENV)
        )

    init, kernel = types.SimpleNamespace(code=b"init ltoir"), types.SimpleNamespace(code=b"kernel ltoir")
    first = linker(kernel, init).link("cubin")
    again = linker(kernel, init).link("cubin")
    assert again.served and again.code == first.code and links == ["cubin"]
    assert not hasattr(linker(kernel, init, options="sm_80").link("cubin"), "served")  # options are in the key
    assert not hasattr(linker(kernel, types.SimpleNamespace(code=b"other")).link("cubin"), "served")  # so are inputs
    assert len(links) == 3


class LTOIR:
    """numba-cuda's ``LTOIR`` linkable code in miniature (its bytes in ``_data``, read through ``data``)."""

    def __init__(self, data: bytes):
        self._data = data

    @property
    def data(self) -> bytes:
        return self._data


class FakeLibrary:
    """numba-cuda's ``CUDACodeLibrary`` in miniature: what :func:`linking.cubin_key` reads, and a "link" that joins
    the linked modules' bytes (and counts itself)."""

    links: list[bytes] = []

    def __init__(self, linked: list[bytes], ir: str = "; ModuleID = 'kern'\n"):
        self.llvm_strs, self._entry_name = [ir], "_ZN6cudapy8__main__4kernB2v1E"
        self._nvvm_options, self.needs_cudadevrt, self._max_registers, self._lto = {"opt": 3}, False, None, True
        self._linking_files = [LTOIR(data) for data in linked]
        self._cubin_cache, self._linkerinfo_cache = {}, {}

    def _ensure_cc(self, cc):
        return cc

    def get_cubin(self, cc=None):  # the original link, which patch_cubin wraps
        joined = b"\x7fELF" + b"|".join(bytes(item.data) for item in self._linking_files)
        FakeLibrary.links.append(joined)
        return types.SimpleNamespace(code=joined)


def launch_process(cache_dir, pool: bool, ir: str = "; ModuleID = 'kern'\n"):
    """One notebook "process": nvmath's calls for a kernel's code through the interposer, then numba's link of the
    kernel through the patched ``get_cubin``. Returns the cubin, the library, the binding's calls and the interposer."""
    m, lazy = pooled(cache_dir) if pool else (fake_mathdx(), None)
    if lazy is None:
        lazy = LazyMathdx(m, DiskCache(cache_dir), ENV, CODE_ISA)
        lazy.install()
    ltoir = build_two(m)[1][0]

    class Library(FakeLibrary):
        pass

    linking.patch_cubin(Library, lazy.cache, ENV, lazy)
    library = Library([ltoir], ir)
    return bytes(library.get_cubin((9, 0)).code), library, m.calls, lazy


@pytest.mark.parametrize("pool", [False, True], ids=["in place", "pool"])
def test_a_launch_only_bundle_serves_a_kernel_by_the_key_a_launch_computes(tmp_path, pool):
    """The prebuild's process links a kernel; a launch-only bundle of its cache (no LTO-IR) goes to a fresh machine;
    there the same kernel is served by the same key without generating or linking anything, and a kernel that was
    never linked gets its code generated and linked."""
    from utilities.machinery.buildcache import bundle

    FakeLibrary.links.clear()
    built, library, _, lazy = launch_process(tmp_path / "built", pool)
    want = linking.cubin_key(library, (9, 0), ENV, lazy.digest)  # from the real bytes, as the prebuild keyed it
    assert len(FakeLibrary.links) == 1
    machine = {"compute_capability": "9.0", "environment": ENV}
    bundle.export(lazy.cache, tmp_path / "course.bundle", machine)
    fresh = DiskCache(tmp_path / "fresh")
    bundle.import_(fresh, tmp_path / "course.bundle", machine)
    assert len(list(bundle.entries(fresh))) < len(list(bundle.entries(lazy.cache))), "the LTO-IR stayed behind"

    served, library, calls, lazy = launch_process(tmp_path / "fresh", pool)
    assert served == built and len(FakeLibrary.links) == 1, "served from the bundle, not linked again"
    assert calls["compile"] == 0, "no code generated for a kernel the bundle holds"
    from utilities.machinery.codegen_workers import is_placeholder

    assert is_placeholder(library._linking_files[0].data), "the code itself was never needed"
    assert linking.cubin_key(library, (9, 0), ENV, lazy.digest) == want

    other, library, calls, _ = launch_process(tmp_path / "fresh", pool, ir="; ModuleID = 'edited'\n")
    assert len(FakeLibrary.links) == 2 and calls["compile"] == (1 if not pool else 1)
    assert library._linking_files[0].data == build_two(fake_mathdx())[1][0], "a new link gets the real code"
    assert other == built, "the same code linked (the fake link ignores the IR)"


@pytest.mark.parametrize("pool", [False, True], ids=["in place", "pool"])
def test_a_job_that_keeps_code_stores_what_a_launch_only_bundle_left_out(tmp_path, pool):
    """After a launch-only import, a check twin's prebuild job (``keep_code``) is served its kernel without a link,
    yet leaves the libmathdx code in the cache: an edited kernel (another IR) is then linked without generating."""
    from utilities.machinery.buildcache import bundle

    FakeLibrary.links.clear()
    built, _, _, lazy = launch_process(tmp_path / "built", pool)
    if lazy.pool is not None:
        lazy.pool.shutdown()
    machine = {"compute_capability": "9.0", "environment": ENV}
    bundle.export(lazy.cache, tmp_path / "course.bundle", machine)
    bundle.import_(DiskCache(tmp_path / "fresh"), tmp_path / "course.bundle", machine)

    m, lazy = pooled(tmp_path / "fresh") if pool else (fake_mathdx(), None)
    if lazy is None:
        lazy = LazyMathdx(m, DiskCache(tmp_path / "fresh"), ENV, CODE_ISA)
        lazy.install()
    lazy.keep_code = True
    build_two(m)
    lazy.keep()
    assert m.calls["compile"] == 2, "both pieces generated, though no link asked for them"
    if lazy.pool is not None:
        lazy.pool.shutdown()

    edited, library, calls, _ = launch_process(tmp_path / "fresh", pool, ir="; ModuleID = 'edited'\n")
    assert len(FakeLibrary.links) == 2, "the edit is linked"
    assert calls["compile"] == 0, "with the code the job kept: nothing generated"
    assert library._linking_files[0].data == build_two(fake_mathdx())[1][0] and edited == built


def test_nvmaths_pipeline_links_are_keyed_by_the_digest_of_code_a_bundle_left_out(tmp_path):
    """A pipeline init kernel whose libmathdx code the cache knows only by its digest: served without the code; a
    link that misses resolves it first."""
    from utilities.machinery.buildcache.store import CodeDigest, digest_key
    from utilities.machinery.codegen_workers import PENDING

    lazy = LazyMathdx(fake_mathdx(), DiskCache(tmp_path), ENV, CODE_ISA)
    key = "ab" * 32
    lazy.cache.put(digest_key(key), CodeDigest.of(90, b"init ltoir").pack())
    lazy.absent[key] = "a job"
    lazy._generate_absent = lambda k: codegen_result(b"init ltoir")
    links = []

    class Linker:
        def __init__(self, *codes, options=None):
            self.codes = codes

        def link(self, target):
            links.append([c.code for c in self.codes])
            return types.SimpleNamespace(code=b"cubin of " + b"+".join(c.code for c in self.codes))

    object_code = linking.ResolvingObjectCode(
        types.SimpleNamespace(from_ltoir=lambda data, name=None: types.SimpleNamespace(code=data)), lazy
    )

    def linker(*codes):
        link = (Linker, lambda data: types.SimpleNamespace(code=data, served=True))
        return linking.CachingLinker(
            *codes, options="sm_90a", _link=link, _cache=(lazy.cache, ENV), _object_code=object_code
        )

    real = types.SimpleNamespace(code=b"init ltoir")
    lazy.remember(key, real.code)  # the prebuild's process had it from that recipe
    first = linker(types.SimpleNamespace(code=b"source"), real).link("cubin")  # the prebuild: real code, linked
    kept = object_code.from_ltoir(PENDING + key.encode())
    again = linker(types.SimpleNamespace(code=b"source"), kept).link("cubin")
    assert again.served and again.code == first.code and len(links) == 1, "keyed by the digest: served"
    fresh = linker(types.SimpleNamespace(code=b"other source"), kept).link("cubin")
    assert links[-1] == [b"other source", b"init ltoir"] and fresh.code == b"cubin of other source+init ltoir"


def test_a_kernel_keeps_its_key_when_the_code_it_links_is_generated_again(tmp_path):
    """libmathdx writes other bytes each time it generates one recipe's code. A notebook on a launch-only bundle
    links the attendee's kernel first, which generates the code it shares with the course's kernel again: the
    course's kernel must still be served by the key the prebuild linked it under. (Keyed by the code's bytes, it was
    linked again: the H200 run-through of 2026-11-28 linked 2a's, 1's, 2b's, 2c's and 2d's course kernels so.)"""
    from utilities.machinery.buildcache import bundle

    def process(cache_dir, salt, irs):
        m = fake_mathdx(salt)
        lazy = LazyMathdx(m, DiskCache(cache_dir), ENV, CODE_ISA)
        lazy.install()

        class Library(FakeLibrary):
            pass

        linking.patch_cubin(Library, lazy.cache, ENV, lazy)
        cubins = [bytes(Library([build_two(m)[1][0]], ir).get_cubin((9, 0)).code) for ir in irs]
        return cubins, m.calls, lazy

    FakeLibrary.links.clear()
    course, attendee = "; ModuleID = 'course'\n", "; ModuleID = 'attendee'\n"
    (built,), _, lazy = process(tmp_path / "built", b"prebuild", [course])
    machine = {"compute_capability": "9.0", "environment": ENV}
    bundle.export(lazy.cache, tmp_path / "course.bundle", machine)
    bundle.import_(DiskCache(tmp_path / "fresh"), tmp_path / "course.bundle", machine)
    (_, served), calls, _ = process(tmp_path / "fresh", b"notebook", [attendee, course])
    assert calls["compile"] == 1, "the attendee's link generated the shared code again (other bytes)"
    assert FakeLibrary.links[-1].endswith(b"notebook"), "... and linked it"
    assert len(FakeLibrary.links) == 2 and served == built, "the course's kernel was served, not linked again"


def codegen_result(ltoir: bytes):
    from utilities.machinery.codegen_workers import Result

    return Result(90, ltoir, 0.0)


def test_nvmaths_trait_helpers_go_through_the_cache(tmp_path):
    """nvmath binds its trait helpers to the binding functions at import: they must be rebuilt on the wrapped ones."""
    m = fake_mathdx()
    calls = []
    m.cublasdx_get_trait_int64s = lambda h, t, n, address: calls.append(("int64s", h, t))
    m.cublasdx_get_trait_str_size = lambda h, t: 3
    m.cublasdx_get_trait_str = lambda h, t, n, buf: buf.__setitem__(slice(0, n), b"ab\0")

    def build_get_int_traits(fn):  # nvmath's, in miniature: the function is captured when the helper is built
        return lambda h, t, n: (fn(h, t, n, np.zeros(n, np.int64).ctypes.data), "done")[1]

    def build_get_str_trait(size, get):
        return lambda h, t: (get(h, t, size(h, t), bytearray(size(h, t))), "done")[1]

    common = types.SimpleNamespace(build_get_int_traits=build_get_int_traits, build_get_str_trait=build_get_str_trait)
    backend = types.SimpleNamespace(get_int_traits=build_get_int_traits(m.cublasdx_get_trait_int64s))
    front = types.SimpleNamespace(get_int_traits=backend.get_int_traits, get_str_trait=None)
    lazy = LazyMathdx(m, DiskCache(tmp_path), ENV, CODE_ISA)
    lazy.install()
    interposer.rebind_trait_helpers(backend, [front], m, common)
    h = m.cublasdx_create_descriptor()
    for _ in range(2):
        front.get_int_traits(h, 4, 3)
        backend.get_int_traits(h, 4, 3)
    assert len(calls) == 1, "one real query; the other three served by the cache"
    assert front.get_str_trait(h, 1) == "done" and lazy.cache.stats.hits >= 3


def test_a_failed_worker_falls_back_to_generating_in_place(tmp_path):
    def broken(job):
        raise RuntimeError("worker died")

    m, lazy = pooled(tmp_path, run_job=broken)
    _, second = build_two(m)
    with pytest.warns(UserWarning, match="generating it here"):
        assert lazy.resolve(second[0]) == build_two(fake_mathdx())[1][0]
    assert m.calls["compile"] == 2


def test_a_replay_that_names_its_function_differently_is_refused(tmp_path):
    """The kernel calls the symbol it was given: code from a worker that names the function otherwise never serves."""
    from utilities.machinery.codegen_workers import replay

    def renaming(job):
        names = {"cublasdx_get_device_function_trait_str": lambda h, t, n, buf: buf.__setitem__(slice(0, n), b"x" * n)}
        return replay(job, lambda name: names.get(name) or lazy.real[name])

    m, lazy = pooled(tmp_path, run_job=renaming)
    _, second = build_two(m, symbol=True)
    assert lazy.symbols, "the recording process saw the symbols"
    with pytest.warns(UserWarning, match="named a replayed device function differently"):
        assert lazy.resolve(second[0]) == build_two(fake_mathdx(), symbol=True)[1][0]


def test_a_placeholder_whose_code_is_gone_says_what_to_do(tmp_path):
    from utilities.machinery.codegen_workers import PENDING

    lazy = LazyMathdx(fake_mathdx(), DiskCache(tmp_path), ENV, CODE_ISA)
    with pytest.raises(RuntimeError, match="COURSE_BUILD_JOBS=1"):
        lazy.resolve(PENDING + b"0" * 64)


@pytest.mark.parametrize(("text", "want"), [("", None), ("0", 0), ("1", 1), ("12", 12)])
def test_build_jobs_come_from_the_environment(monkeypatch, text, want):
    from utilities.machinery import codegen_workers as parallel_codegen

    monkeypatch.setenv("COURSE_BUILD_JOBS", text)
    got = parallel_codegen.workers_from_env()
    if want is None:  # one per core, within the caps
        assert 1 <= got <= min(parallel_codegen.os.cpu_count() or 1, parallel_codegen.MAX_WORKERS)
    else:
        assert got == want


def test_build_jobs_must_be_a_number(monkeypatch):
    from utilities.machinery import codegen_workers as parallel_codegen

    monkeypatch.setenv("COURSE_BUILD_JOBS", "many")
    with pytest.raises(ValueError, match="COURSE_BUILD_JOBS must be a whole number"):
        parallel_codegen.workers_from_env()


# A kernel linked in one process and served to another that compiled other functions first: numba numbers every
# function it compiles in a process (the ABI tag v<n> of its mangled name), so the same kernel's IR differs. Real
# numba and nvJitLink, no GPU: numba is told the target's compute capability instead of asking a device.
LINK_TWICE = """
import contextlib, hashlib, json, re, sys
from types import SimpleNamespace
import numba, numba.cuda, numba.cuda.dispatcher
from numba import types
from numba.cuda import codegen
numba.cuda.dispatcher.get_current_device = lambda: SimpleNamespace(compute_capability=(9, 0))
codegen.CUDACodeLibrary._ensure_cc = lambda self, cc: cc or (9, 0)
from utilities.machinery.buildcache import DiskCache, linking

class Lazy:
    stage = ""
    keep_code = generate_code = False  # no libmathdx code here: nothing to combine
    def timed(self, what):
        return contextlib.nullcontext()
    def digest(self, data):
        return hashlib.sha256(data).hexdigest()

cache = DiskCache(sys.argv[1])
linking.patch_cubin(codegen.CUDACodeLibrary, cache, {"numba-cuda": "test"}, Lazy())
sig = (types.float32[::1],)

def other(x):  # a shared array too: numba numbers them from one counter per process
    tmp = numba.cuda.shared.array(4, numba.float32)
    tmp[0] = 3.0
    x[0] = tmp[0]

def double(x):
    x[0] = x[0] * 2.0

def kern(x):
    tmp = numba.cuda.shared.array(8, numba.float32)
    tmp[1] = x[0]
    double(tmp[1:])
    x[0] = tmp[1]

numba.cuda.dispatcher._Kernel(other, sig) if sys.argv[2] == "later" else None
double = numba.cuda.jit(device=True)(double)
library = numba.cuda.dispatcher._Kernel(kern, sig)._codelibrary
compiled_as = library._entry_name
cubin = bytes(library.get_cubin(cc=(9, 0)).code)
print(json.dumps({"compiled_as": compiled_as, "served_as": library._entry_name, "hits": cache.stats.hits,
                  "stored": cache.stats.stored, "entry_in_cubin": library._entry_name.encode() in cubin,
                  "linked": linking.LINKED, "course_linked": linking.COURSE_LINKED,
                  "smem": sorted(set(re.findall(r"_cudapy_smem_\\d+", "".join(library.llvm_strs))))}))
"""


@pytest.mark.slow
def test_a_kernel_compiled_after_other_kernels_gets_the_cubin_linked_before(tmp_path):
    env = python_env(simulator=False)
    script = tmp_path / "link_twice.py"
    script.write_text(LINK_TWICE)

    def run(order: str) -> dict:
        done = subprocess.run(
            [sys.executable, str(script), str(tmp_path / "cache"), order],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode and "nvvm" in done.stderr.lower() and "not found" in done.stderr.lower():
            pytest.skip("numba-cuda's NVVM is not installed here")
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    first, later = run("first"), run("later")  # the prebuild's process, then a notebook's
    assert first["stored"] == 1 and first["hits"] == 0 and first["entry_in_cubin"]
    assert first["linked"] == ["__main__.kern"]
    assert first["course_linked"] == [], "the script's own kernel is not one of the course's"
    assert later["compiled_as"] != first["compiled_as"]  # other numbers: the IR as numba wrote it differs
    assert later["smem"] != first["smem"], "and another name for the kernel's shared array"
    assert later["hits"] == 1 and later["stored"] == 0 and later["linked"] == []  # served, not linked again
    assert later["served_as"] == first["compiled_as"] and later["entry_in_cubin"]


def test_canonical_ir_renumbers_compilation_numbers_and_keeps_which_symbol_is_which():
    def tag(uid: int) -> str:  # numba's ABI tag of a compilation number
        return f"B{len(str(uid)) + 1}v{uid}"

    def dev(uid: int, value: int) -> str:  # two closures of one factory: same name, other numbers, other code
        return f'; ModuleID = "dev${uid}"\ndefine i32 @"_ZN8__main__3dev{tag(uid)}E"() {{ ret i32 {value} }}'

    def kern(uid: int, first: int, second: int) -> str:
        return (
            f'; ModuleID = "kern${uid}"\ndefine void @"_ZN6cudapy8__main__4kern{tag(uid)}B3abcE"() {{\n'
            f'  call i32 @"_ZN8__main__3dev{tag(first)}E"()\n  call i32 @"_ZN8__main__3dev{tag(second)}E"()\n}}'
        )

    entry = "_ZN6cudapy8__main__4kernB2v7B3abcE"
    one = linking.canonical_ir([kern(7, 3, 4), dev(3, 1), dev(4, 2)], entry)
    later = linking.canonical_ir([dev(11, 2), kern(12, 10, 11), dev(10, 1)], "_ZN6cudapy8__main__4kernB3v12B3abcE")
    assert one == later  # other numbers, modules in another order: the same code
    assert '"kern$v3"' in one[0] and one[1] == "_ZN6cudapy8__main__4kernB2v3B3abcE"  # dev's modules sort first
    assert one != linking.canonical_ir([kern(7, 4, 3), dev(3, 1), dev(4, 2)], entry)  # the calls swapped
    assert one != linking.canonical_ir([kern(7, 3, 3), dev(3, 1), dev(4, 2)], entry)  # one of them twice
    assert "B72cw51v1" in linking.canonical_ir(['@"x" = "B72cw51v1"'])[0]  # text outside a mangled name stays


def test_canonical_ir_renumbers_shared_arrays_and_keeps_them_apart():
    def kern(a: int, b: int, used: int) -> str:  # two shared arrays declared, a store into one of them
        return (
            f"@_cudapy_smem_{a} = addrspace(3) global [4 x float]\n"
            f"@_cudapy_smem_{b} = addrspace(3) global [4 x float]\n"
            f"store float 1.0, float addrspace(3)* @_cudapy_smem_{used}"
        )

    assert linking.canonical_ir([kern(1, 2, 1)]) == linking.canonical_ir([kern(7, 9, 7)])  # made after other kernels
    assert linking.canonical_ir([kern(1, 2, 1)]) != linking.canonical_ir([kern(1, 2, 2)])  # the store into the other
    assert linking.canonical_ir([kern(1, 1, 1)]) != linking.canonical_ir([kern(1, 2, 1)])  # one array, not two


# ----------------------------------------------------------------------------------------------------------------
# Parallel jobs that need the same code: one generates it, the others wait for its entry (store.DiskCache.claim)
# ----------------------------------------------------------------------------------------------------------------


def test_code_another_process_is_generating_is_waited_for_not_generated_twice(tmp_path):
    import threading

    from utilities.machinery.codegen_workers import PENDING, replay

    plain = build_two(fake_mathdx())
    run(tmp_path, ftype=1)  # an earlier process: the first code for the target (its ISA version) is in the cache
    go = threading.Event()
    holder = {}

    def slow(job):  # process B's worker: generates only when told
        go.wait(30)
        return replay(job, lambda name: holder["b"].real[name])

    mb, holder["b"] = pooled(tmp_path, run_job=slow)
    b_built = build_two(mb)
    assert b_built[1][0].startswith(PENDING), "B claimed the second function and is generating it"
    mc, c = pooled(tmp_path)  # process C needs the same function meanwhile
    c_built = build_two(mc)
    assert c_built[1][0].startswith(PENDING) and mc.calls["compile"] == 0, "C waits: it does not generate it too"
    assert c.cache.stats.shared == 1
    go.set()
    assert c.resolve(c_built[1][0]) == plain[1][0] == holder["b"].resolve(b_built[1][0])
    assert mc.calls["compile"] == 0, "C got B's code"
    assert not list(c.cache.root.rglob(".*.claim")), "B let go of its claim once the code was stored"


def claim_as(cache: DiskCache, key: str, pid: int) -> Path:
    import socket

    path = cache._claim_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{pid} {socket.gethostname()}")
    return path


def second_key(tmp_path: Path) -> str:
    """The cache key of build_two's second function (a pool's placeholder names it)."""
    m, probe = pooled(tmp_path / "probe")
    build_two(m)
    (key,) = probe.futures
    return key


def test_a_claim_whose_process_is_gone_is_taken_over(tmp_path):
    plain = build_two(fake_mathdx())
    run(tmp_path, ftype=1)
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    claim_as(DiskCache(tmp_path), second_key(tmp_path), int(done.stdout))  # a process that has exited
    m, c = pooled(tmp_path)
    built = build_two(m)
    assert c.cache.stats.shared == 0 and c.resolve(built[1][0]) == plain[1][0]
    assert m.calls["compile"] == 1, "generated here, once"


def test_a_claim_let_go_without_the_code_is_generated_here(tmp_path):
    plain = build_two(fake_mathdx())
    run(tmp_path, ftype=1)
    path = claim_as(DiskCache(tmp_path), second_key(tmp_path), os.getpid())  # a live process
    m, c = pooled(tmp_path)
    built = build_two(m)
    assert c.cache.stats.shared == 1 and m.calls["compile"] == 0, "waiting for it"
    path.unlink()  # the claimant stops without storing the code
    with pytest.warns(UserWarning, match="generating it here"):
        assert c.resolve(built[1][0]) == plain[1][0]


def test_a_process_without_workers_waits_for_another_process_s_code(tmp_path):
    """A prebuild job given no code generation workers (every job but the longest two on a 16-core host) that needs
    code another job claimed: it waits for that code. On an H200 (2026-11-28) 13 of 49 such jobs failed, the wait's
    progress line naming the workers of a pool they did not have."""
    plain = build_two(fake_mathdx())
    run(tmp_path, ftype=1)
    path = claim_as(DiskCache(tmp_path), second_key(tmp_path), os.getpid())  # a live process generates it
    m = fake_mathdx()
    lazy = LazyMathdx(m, DiskCache(tmp_path), ENV, isa_option=CODE_ISA)  # no pool
    lazy.install()
    built = build_two(m)
    assert lazy.cache.stats.shared == 1 and m.calls["compile"] == 0, "waiting for it"
    code = plain[1][0]
    (key,) = lazy.futures
    DiskCache(tmp_path).put(key, (0).to_bytes(8, "little", signed=True) + code)  # the claimant stores the code
    path.unlink()  # and lets go of its claim
    assert lazy.resolve(built[1][0]) == code
    assert m.calls["compile"] == 0, "it got the other process's code"


def test_code_this_process_is_generating_is_not_asked_for_twice(tmp_path):
    import threading

    from utilities.machinery.codegen_workers import PENDING, replay

    plain = build_two(fake_mathdx())
    run(tmp_path, ftype=1)
    go, holder = threading.Event(), {}

    def slow(job):  # the worker generates only when told: the second request comes while it is busy
        go.wait(30)
        return replay(job, lambda name: holder["lazy"].real[name])

    m, holder["lazy"] = pooled(tmp_path, run_job=slow)
    first, again = build_and_generate(m, ftype=2), build_and_generate(m, ftype=2)  # two descriptors, one recipe
    assert first[0].startswith(PENDING) and again[0] == first[0]
    assert holder["lazy"].cache.stats.shared == 0, "not waited for as if another process made it"
    go.set()
    assert holder["lazy"].resolve(again[0]) == plain[1][0] and m.calls["compile"] == 1

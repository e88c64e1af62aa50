"""A kernel's libmathdx functions in one code (``utilities.machinery.buildcache.combined``), with libmathdx and the
link in miniature (``test_machinery_buildcache``'s fakes): merged jobs generate every function at once, a link uses the
combined module only when the cache holds it, and only code that a link may need again is generated ahead.

What it buys on real kernels (nvJitLink's seconds, the same machine code) is measured by
``tools/combined_link.py`` on a CPU, and on a GPU by the proof's checks after an edit."""

from __future__ import annotations

import time

import pytest
from test_machinery_buildcache import CODE_ISA, ENV, FakeLibrary, build_and_generate, fake_mathdx, pooled

from utilities.machinery.buildcache import DiskCache, LazyMathdx, combined, linking
from utilities.machinery.codegen_workers import Job, Step, replay


def claims_left(lazy, seconds: float = 5.0) -> set:
    """The claims ``lazy`` still holds once its pool's callbacks have run: a separate module's claim goes in its
    future's done callback, which the pool thread runs just after the link that waited on the result has woken."""
    deadline = time.monotonic() + seconds
    while lazy.claims and time.monotonic() < deadline:
        time.sleep(0.01)
    return lazy.claims


ATTENDEE = "; ModuleID = 'cell'\ndefine void @_ZN6cudapy8__main__4kernB2v1E() {\n  ret void\n}\n"
COURSE = "; ModuleID = 'course'\n"


def three_functions(m, **variant):
    """Three device functions of one kernel, each generated apart as nvmath asks for them: their code."""
    return [build_and_generate(m, ftype=ftype, **variant)[0] for ftype in (1, 2, 3)]


def link(lazy, codes, ir=COURSE, callbacks=()):
    """numba's link of a kernel that calls ``codes`` (libmathdx modules), through the patched ``get_cubin``: the
    modules the link got."""

    linked = []

    class Library(FakeLibrary):
        def get_cubin(self, cc=None):
            linked.extend(bytes(item.data) for item in self._linking_files)
            return super().get_cubin(cc)

    linking.patch_cubin(Library, lazy.cache, ENV, lazy)
    library = Library(codes, ir)
    for i in callbacks:
        library._linking_files[i].setup_callback = lambda: None
    library._linking_files = set(library._linking_files)  # as numba-cuda keeps them
    library.get_cubin((9, 0))
    assert linked, "a new link"
    return linked, library


def test_merged_jobs_generate_every_function_in_one_code_with_handles_apart(tmp_path):
    m = fake_mathdx()
    lazy = LazyMathdx(m, DiskCache(tmp_path), ENV, CODE_ISA)
    lazy.install()
    three_functions(m)
    jobs = list(lazy.jobs.values())
    assert len(jobs) == 3 and all(j.generate == combined.DEVICE_FUNCTIONS for j in jobs)
    merged = combined.merge(jobs)
    assert len(merged.targets) == 3 and merged.symbols == tuple(s for j in jobs for s in j.symbols)
    handles = [s.handle for s in merged.steps] + [merged.code.handle]
    assert len(set(handles)) == len(handles) and min(handles) >= combined.HANDLES, "renumbered apart"
    plain = fake_mathdx()
    compiles = plain.calls["compile"]
    result = replay(merged, lambda name: getattr(plain, name))
    assert plain.calls["compile"] == compiles + 1 and result.isa == 90, "one generation for the three"


def test_only_functions_of_alike_code_options_merge():
    def job(code_calls, generate=combined.DEVICE_FUNCTIONS, target=1):
        return Job((Step(target, (("cublasdx_create_descriptor", ()),)),), Step(9, code_calls), generate, (target,), 7)

    sm90, sm80 = (("commondx_create_code", ()), ("opt", (90,))), (("commondx_create_code", ()), ("opt", (80,)))
    jobs = {"a": job(sm90), "b": job(sm90, target=2), "c": job(sm80), "d": job(sm90, "cublasdx_finalize_code")}
    assert combined.groups(["a", "b", "c", "d", "unknown"], jobs) == [("a", "b")]
    assert combined.groups(["a", "c"], jobs) == [], "one function alone gains nothing"
    with pytest.raises(ValueError, match="different code options"):
        combined.merge([jobs["a"], jobs["c"]])
    with pytest.raises(ValueError, match="only device functions"):
        combined.merge([jobs["a"], jobs["d"]])


def test_an_attendees_kernel_links_separate_modules_first_then_one_combined(tmp_path):
    """The first link of an attendee's kernel has only the separate codes: it links them and has the pool generate
    the combined one; the next link of an edit (another IR, the same functions) links that one module instead."""
    FakeLibrary.links.clear()
    m, lazy = pooled(tmp_path)
    codes = three_functions(m)
    first, _ = link(lazy, codes, ATTENDEE)
    assert len(first) == 3, "nothing combined yet: the separate modules"
    lazy.combiner.keep()
    edited, library = link(lazy, codes, ATTENDEE.replace("kern", "kern2"))
    assert len(edited) == 1, "one module for the three functions"
    assert sorted(f._data for f in library._linking_files) == sorted(codes), "the library keeps its own modules"
    stored = lazy.cache.get(combined.group_key(sorted(lazy.jobs), ENV))
    assert stored is not None and edited[0] == stored[8:], "the combined code the pool stored"
    other, lazy2 = pooled(tmp_path)  # another process (a spare's build, a race run) finds it in the cache
    again, _ = link(lazy2, three_functions(other), ATTENDEE.replace("kern", "kern3"))
    assert again == edited and other.calls["compile"] == 0
    lazy.pool.shutdown()
    lazy2.pool.shutdown()


def test_a_course_kernel_starts_no_combined_code_unless_its_job_keeps_code(tmp_path):
    """The course's own kernels are linked once (the prebuild): their combined code would never be used, so none is
    generated; a prebuild job of a check's twin (``keep_code``) generates it even when its kernel was served."""
    FakeLibrary.links.clear()
    m, lazy = pooled(tmp_path / "course")
    link(lazy, three_functions(m), COURSE)
    lazy.combiner.keep()
    assert lazy.combiner.futures == {}
    lazy.pool.shutdown()

    m, lazy = pooled(tmp_path / "twin")
    codes = three_functions(m)
    link(lazy, codes, COURSE)  # the prebuild links the twin
    m, lazy = pooled(tmp_path / "twin")  # the next prebuild (or one after an import): served, not linked
    lazy.keep_code = True
    codes = three_functions(m)

    class Library(FakeLibrary):
        pass

    linking.patch_cubin(Library, lazy.cache, ENV, lazy)
    links = len(FakeLibrary.links)
    Library(codes, COURSE).get_cubin((9, 0))
    assert len(FakeLibrary.links) == links, "served"
    lazy.keep()
    assert len(lazy.combiner.futures) == 1
    edited, _ = link(lazy, codes, ATTENDEE)
    assert len(edited) == 1, "the attendee's first edit links the combined code"
    lazy.pool.shutdown()


def test_a_module_with_a_callback_stays_apart(tmp_path):
    """A module with a setup or teardown callback is not merged: the callback would be lost with it."""
    FakeLibrary.links.clear()
    m, lazy = pooled(tmp_path)
    codes = three_functions(m)
    modules, _ = link(lazy, codes, ATTENDEE, callbacks=[0])
    assert len(modules) == 3
    lazy.combiner.keep()
    modules, _ = link(lazy, codes, ATTENDEE.replace("kern", "kern2"), callbacks=[0])
    assert len(modules) == 2 and codes[0] in modules, "its own module, and the other two's in one"
    lazy.pool.shutdown()


def test_keep_returns_once_the_combined_code_is_stored(tmp_path):
    """``keep`` waits for the store, not only the generation: a prebuild job that exits right after it leaves the
    code in the cache. A pool's future is done before its callbacks run; a slow worker and a slow disk here make that
    window wide (the flaky CI failure of ``test_a_module_with_a_callback_stays_apart``, made certain)."""
    import time

    from utilities.machinery.codegen_workers import replay

    holder = {}

    def slow_worker(job):
        time.sleep(0.2)  # still running when the link adds its callback
        return replay(job, lambda name: holder["lazy"].real[name])

    FakeLibrary.links.clear()
    m, lazy = pooled(tmp_path, run_job=slow_worker)
    holder["lazy"] = lazy
    codes = three_functions(m)
    want, put = combined.group_key(sorted(lazy.jobs), ENV), lazy.cache.put

    def slow_put(key, blob):
        if key == want:
            time.sleep(0.3)
        put(key, blob)

    lazy.cache.put = slow_put
    link(lazy, codes, ATTENDEE)
    lazy.combiner.keep()
    assert lazy.cache.get(want, count=False) is not None
    assert not claims_left(lazy), "its claim let go"
    lazy.pool.shutdown()


def test_without_a_pool_nothing_is_generated_ahead_of_a_notebooks_link(tmp_path):
    FakeLibrary.links.clear()
    m = fake_mathdx()
    lazy = LazyMathdx(m, DiskCache(tmp_path), ENV, CODE_ISA)
    lazy.install()
    codes = three_functions(m)
    compiles = m.calls["compile"]
    link(lazy, codes, ATTENDEE)
    assert m.calls["compile"] == compiles and lazy.combiner.futures == {}
    assert not lazy.claims, "no claim left behind"


def test_kernel_links_drop_the_variables_no_device_code_reads():
    """numba's link options gain ``optimize_unused_variables`` where LTO-IR is linked, once however often patched."""
    import dataclasses

    @dataclasses.dataclass
    class Options:  # cuda.core's LinkerOptions, in miniature
        arch: str = "sm_90a"
        optimize_unused_variables: bool | None = None

    calls = []

    class Linker:  # numba-cuda's driver._Linker, in miniature
        def __init__(self, lto: bool):
            self._has_ltoir = lto

        def _get_linker_options(self, ptx):
            calls.append(ptx)
            return Options()

    linking.drop_unused_variables(Linker)
    linking.drop_unused_variables(Linker)
    assert Linker(lto=True)._get_linker_options(False) == Options(optimize_unused_variables=True)
    assert Linker(lto=False)._get_linker_options(False) == Options(), "a PTX link keeps its options"
    assert calls == [False, False], "wrapped once, though patched twice"


@pytest.mark.parametrize(
    ("said", "cpu", "want"),
    [("", False, True), ("", True, False), ("on", True, True), ("off", False, False), ("OFF", True, False)],
)
def test_combined_codes_are_on_by_default_but_not_in_a_cpu_build(said, cpu, want):
    assert combined.enabled(cpu, {combined.ENV: said}) is want


def test_a_failed_generation_is_not_tried_again_and_the_links_go_on(tmp_path):
    """A worker that cannot generate the combined code (libmathdx names a function otherwise, say): the separate
    modules keep serving, the claim is released, and this process does not start it again at every edit."""
    from utilities.machinery.codegen_workers import replay

    FakeLibrary.links.clear()
    tries = []

    def failing(job):
        if len(job.targets) > 1:
            tries.append(job)
            raise RuntimeError("libmathdx named a replayed device function differently")
        return replay(job, lambda name: holder.real[name])

    m, holder = pooled(tmp_path, run_job=failing)
    codes = three_functions(m)
    for edit in range(3):
        modules, _ = link(holder, codes, ATTENDEE.replace("kern", f"kern{edit}"))
        holder.combiner.keep()
        assert len(modules) == 3
    assert len(tries) == 1 and not claims_left(holder)
    holder.pool.shutdown()

"""A linked kernel's key does not depend on what its process compiled before (``buildcache.canonical``).

Synthetic IR in numba's and llvmlite's formats, one test for each thing that follows the process's history: the
order of modules that tie once numba's numbers are removed, the struct types llvmlite declares in every module,
libmathdx's tensor UIDs (renumbered in the key, and made from the recipe by the interposer), and the labels of the
blocks numba inlines.
"""

from __future__ import annotations

import itertools

import pytest

from utilities.machinery.buildcache import DiskCache, LazyMathdx, canonical

pytest.importorskip("numba.cuda")  # numba's own mangler writes the names below
from numba.cuda import itanium_mangler, types  # noqa: E402


def tag(uid: int) -> str:  # numba's ABI tag of a compilation number
    return f"B{len(str(uid)) + 1}v{uid}"


def leaf(uid: int, value: int) -> str:
    return f'; ModuleID = "leaf${uid}"\ndefine i32 @"_ZN8__main__4leaf{tag(uid)}E"() {{ ret i32 {value} }}'


def dev(uid: int, callee: int) -> str:  # two specialisations of one overload: the same text but for the numbers
    return (
        f'; ModuleID = "dev${uid}"\ndefine i32 @"_ZN8__main__3dev{tag(uid)}E"() {{\n'
        f'  %r = call i32 @"_ZN8__main__4leaf{tag(callee)}E"()\n  ret i32 %r\n}}'
    )


def kern(uid: int, *callees: int) -> str:
    calls = "".join(f'  call i32 @"_ZN8__main__3dev{tag(c)}E"()\n' for c in callees)
    return f'; ModuleID = "kern${uid}"\ndefine void @"_ZN6cudapy8__main__4kern{tag(uid)}E"() {{\n{calls}}}'


def test_modules_that_tie_without_their_numbers_are_ordered_by_what_they_refer_to():
    one = [kern(9, 3, 4), dev(3, 1), dev(4, 2), leaf(1, 10), leaf(2, 20)]
    assert canonical._skeleton(one[1]) == canonical._skeleton(one[2]), "the two dev modules tie on their text"
    want = canonical.canonical_ir(one)
    for order in itertools.permutations(one):  # numba's order follows addresses: any of them
        assert canonical.canonical_ir(order) == want
    later = [kern(31, 25, 22), dev(22, 17), dev(25, 19), leaf(19, 10), leaf(17, 20)]  # other numbers, same code
    assert canonical.canonical_ir(later) == want
    assert canonical.canonical_ir([kern(9, 4, 3), *one[1:]]) != want  # the calls swapped: other code
    assert canonical.canonical_ir([kern(9, 3, 4), dev(3, 1), dev(4, 1), leaf(1, 10), leaf(2, 20)]) != want


def test_a_cycle_of_identical_modules_gets_one_text_in_every_order():
    def ring(uid: int, nxt: int) -> str:  # mutual recursion: no module says which comes first
        call = f'call void @"_ZN8__main__1f{tag(nxt)}E"()'
        return f'; ModuleID = "f${uid}"\ndefine void @"_ZN8__main__1f{tag(uid)}E"() {{ {call} }}'

    modules = [ring(5, 6), ring(6, 7), ring(7, 5)]
    texts = {canonical.canonical_ir(order)[0] for order in itertools.permutations(modules)}
    assert len(texts) == 1


def test_orders_that_share_their_first_modules_give_what_each_order_renumbered_alone_gives():
    """``canonical_ir`` renumbers a beginning that several orders share once: its text must be the smallest of the
    texts each order gives renumbered from nothing, as a plain loop over the orders makes them."""

    def ring(uid: int, nxt: int) -> str:
        call = f'call void @"_ZN8__main__1f{tag(nxt)}E"()'
        return f'; ModuleID = "f${uid}"\ndefine void @"_ZN8__main__1f{tag(uid)}E"() {{ {call} }}'

    modules = [kern(40, 3, 4), dev(3, 1), dev(4, 2), leaf(1, 10), leaf(2, 20), ring(5, 6), ring(6, 7), ring(7, 5)]
    entry = f"_ZN6cudapy8__main__4kern{tag(40)}E"
    texts = [canonical.relabel_blocks(canonical.used_types(m.strip())) for m in modules]
    orders = canonical.canonical_orders(texts)
    assert len(orders) > 1 and len({o[0] for o in orders}) == 1, "the case needs orders with a shared beginning"

    def alone(order: list[int]) -> tuple[str, str]:
        numbering = canonical._Numbering()
        return "\n".join(numbering.renumber(texts[i]) for i in order), numbering.renumber(entry)

    assert canonical.canonical_ir(modules, entry) == min(alone(o) for o in orders)


def test_struct_types_that_nothing_uses_are_left_out_and_the_rest_sorted():
    body = 'define void @"_ZN6cudapy8__main__4kernB2v1E"(%"struct.libmathdx_b"* %p) { ret void }'
    header = '; ModuleID = "kern$1"\ntarget triple = "nvptx64-nvidia-cuda"\n'
    a, b = '%"struct.libmathdx_a" = type {i8*}', '%"struct.libmathdx_b" = type {i8*, %"struct.libmathdx_c"}'
    c = '%"struct.libmathdx_c" = type {[1 x i64]}'
    fresh = canonical.canonical_ir([f"{header}{b}\n{c}\n{body}"])
    assert canonical.canonical_ir([f"{header}{a}\n{b}\n{c}\n{body}"]) == fresh  # a is declared, never used
    assert canonical.canonical_ir([f"{header}{c}\n{b}\n{a}\n{body}"]) == fresh  # another order of registration
    assert canonical.canonical_ir([f"{header}{b}\n{c.replace('1 x', '2 x')}\n{body}"]) != fresh  # c, used by b, differs
    plain = 'define void @"_ZN6cudapy8__main__1gB2v1E"() { ret void }'
    assert canonical.canonical_ir([f"{header}{a}\n{b}\n{c}\n{plain}"]) == canonical.canonical_ir([header + plain])


def test_locals_inlined_from_an_overload_are_renumbered():
    def kern(uid: int, inlined: int, offset: int = 36) -> str:  # numba names an inlined local "<qualname>_v<n>_<var>"
        local = f'%"ol_copy__locals__impl_v{inlined}__v{offset}pred"'  # ("$36pred": a bytecode offset, kept)
        return (
            f'; ModuleID = "kern${uid}"\ndefine void @"_ZN6cudapy8__main__4kern{tag(uid)}E"() {{\n'
            f"  {local} = alloca i1\n  store i1 0, i1* {local}\n}}"
        )

    want = canonical.canonical_ir([kern(3, 142)])
    assert canonical.canonical_ir([kern(3, 291)]) == want  # inlined after 149 more compilations
    assert canonical.canonical_ir([kern(3, 142, offset=38)]) != want  # another temporary: other code


def test_block_labels_are_renumbered_and_still_tell_the_blocks_apart():
    """numba labels the blocks it inlines from one counter per process: notebook 1's pipelined GEMM had B713 built
    alone and B1251 after the multi-pass kernels (numba-cuda 0.30.4 on a CPU), and was linked again on the GPU."""

    def kern(first: int, second: int, target: int | None = None) -> str:  # two blocks, a branch and a phi
        target = first if target is None else target
        return (
            f'; ModuleID = "kern$3"\ndefine i32 @"_ZN6cudapy8__main__4kern{tag(3)}E"(i1 %c) {{\nentry:\n'
            f'  br i1 %c, label %"B{first}", label %"B{second}.endif"\nB{first}:\n  br label %"B{second}.endif"\n'
            f'B{second}.endif:\n  %r = phi i32 [ 1, %entry ], [ 2, %"B{target}" ]\n  ret i32 %r\n}}'
        )

    want = canonical.canonical_ir([kern(713, 744)])
    assert canonical.canonical_ir([kern(1251, 1282)]) == want  # the same blocks, labelled later in the process
    assert "B713" not in want[0] and '%"B0"' in want[0] and "B1.endif:" in want[0]
    assert canonical.canonical_ir([kern(713, 744, target=744)]) != want  # the phi names the other block: other code
    assert canonical.canonical_ir(['@"x" = global [3 x i8] c"B12"']) == ('@"x" = global [3 x i8] c"B12"', None)


def layout(uid: int, kind: str) -> types.Type:
    """A type named as nvmath names a libmathdx layout (its name holds the tensor UID and dots, as numba mangles)."""
    return types.Opaque(f"BlasLayout(uid={uid},layout={kind},dtype=<class 'numpy.float16'>,MM=BlasNumba(size=(64,64)))")


def copy_symbol(uid: int, src: int, dst: int) -> str:
    return itanium_mangler.mangle("nvmath.device.copy", [layout(src, "smem_a"), layout(dst, "smem_b")], uid=uid)


def tensor_kernel(kernel: int, copy: int, src: int, dst: int) -> list[str]:
    symbol = copy_symbol(copy, src, dst)
    return [
        f'; ModuleID = "kern${kernel}"\ndefine void @"_ZN6cudapy8__main__4kern{tag(kernel)}E"() {{\n'
        f'  call void @"{symbol}"()\n  ret void\n}}',
        f'; ModuleID = "copy${copy}"\ndefine void @"{symbol}"() {{ ret void }}',
    ]


def test_tensor_uids_are_renumbered_with_the_lengths_of_their_names():
    want = canonical.canonical_ir(tensor_kernel(3, 2, 0, 1))
    assert canonical.canonical_ir(tensor_kernel(3, 2, 7, 12)) == want  # after 7 tensors: more digits, longer names
    assert canonical.canonical_ir(tensor_kernel(40, 38, 281474976710655, 9)) == want
    assert canonical.canonical_ir(tensor_kernel(3, 2, 1, 0)) == want  # the numbers swapped: still two tensors
    assert canonical.canonical_ir(tensor_kernel(3, 2, 5, 5)) != want  # one tensor for both: other code
    assert canonical.canonical_ir(tensor_kernel(3, 2, -1, 1)) != want  # a global-memory layout (-1) stays what it is
    for symbol in canonical._SYMBOL.findall(want[0]):  # every name is still well formed: lengths written again
        spans = canonical._identifiers(symbol)
        assert spans and spans[-1][1] <= len(symbol)
    assert "uid_3dt1" in want[0] and "uid_3dt2" in want[0]


def test_a_name_the_parser_does_not_know_is_left_as_it_is():
    odd = "_ZN8__main__3fooB2v1E5ArrayIQQE"  # "Q": no code numba writes
    assert canonical.retag_tensors(f'@"{odd}"', lambda uid: "t1") == f'@"{odd}"'


# -- the interposer's tensor UIDs --------------------------------------------------------------------------------

UID_TRAIT = 3


def counting_mathdx(start: int) -> object:
    """A libmathdx binding whose tensor UIDs count tensors from ``start``, as the real one counts per process."""

    class Binding:
        def __init__(self) -> None:
            self.uids = itertools.count(start)
            self.made: dict[int, int] = {}
            self.handles = itertools.count(50_001)

        def cublasdx_create_descriptor(self) -> int:
            return next(self.handles)

        def cublasdx_set_operator_int64s(self, h: int, op: int, n: int, values: list[int]) -> None:
            return None

        def cublasdx_create_tensor(self, h: int, kind: int) -> int:
            handle = next(self.handles)
            self.made[handle] = next(self.uids)
            return handle

        def cublasdx_get_tensor_trait_int64(self, h: int, trait: int) -> int:
            return self.made[h] if trait == UID_TRAIT else 64

    return Binding()


def tensor_uids(cache: DiskCache, start: int, kinds: list[int], *, recorded: bool = True) -> list[int]:
    m = counting_mathdx(start)
    if recorded:
        LazyMathdx(m, cache, {"libmathdx": "test"}, isa_option=7, uid_trait=UID_TRAIT).install()
    h = m.cublasdx_create_descriptor()
    m.cublasdx_set_operator_int64s(h, 1, 3, [64, 64, 64])
    return [m.cublasdx_get_tensor_trait_int64(m.cublasdx_create_tensor(h, kind), UID_TRAIT) for kind in kinds]


def test_a_recorded_tensor_gets_a_uid_made_from_its_recipe(tmp_path):
    cache = DiskCache(tmp_path)
    first = tensor_uids(cache, 0, [5, 6])
    assert first[0] != first[1], "two tensors made otherwise are told apart"
    assert tensor_uids(cache, 17, [9, 7, 8, 5, 6])[-2:] == first  # another process, after other tensors
    assert tensor_uids(DiskCache(tmp_path / "other"), 3, [5, 6]) == first  # nothing of it comes from the cache
    assert not any(cache.root.rglob("*")) or all(p.is_dir() for p in cache.root.rglob("*")), "no UID is stored"
    assert tensor_uids(cache, 17, [5, 6], recorded=False) == [17, 18]  # without the cache: libmathdx's own


def test_a_notebooks_copies_of_course_functions_are_keyed_under_the_course_module(monkeypatch):
    """``linking.main_aliases``: each function defined in ``__main__`` (a kernel's factory, a device function beside
    it: a numba dispatcher, read through its ``py_func``) under the name of exactly one course module's function takes
    that module's mangled name; any other name, or a name two modules define, keeps its own."""
    import sys
    import types as pytypes

    from utilities.machinery.buildcache import linking

    class Dispatcher:  # numba's: callable, its module numba's, its function the cell's
        def __init__(self, py_func):
            self.py_func = py_func

        def __call__(self, *args):
            return self.py_func(*args)

    def module(name, *functions, device=()):
        m = pytypes.ModuleType(name)
        for fn in [*functions, *device]:
            f = pytypes.FunctionType((lambda: None).__code__, {}, fn)
            f.__module__ = name
            setattr(m, fn, Dispatcher(f) if fn in device else f)
        monkeypatch.setitem(sys.modules, name, m)
        return m

    module("utilities.toy.tensorcore", "make_toy_kernel", "make_twice", device=("neighbour",))
    module("utilities.toy.other", "make_twice")
    module("utilities.toy.reference", "neighbour")  # a NumPy twin of the device function: no IR names it
    kernel = "_ZN8__main__15make_toy_kernel12_3clocals_3e4toyB2v1E5ArrayIfLi1E1C7mutable7alignedE"
    called = 'call float @"_ZN8__main__9neighbourB2v2Ef"(float %x)'
    assert linking.main_aliases([called, kernel]) == [
        ("8__main__9neighbour", "9utilities3toy10tensorcore9neighbour"),
        ("8__main__15make_toy_kernel", "9utilities3toy10tensorcore15make_toy_kernel"),
    ]
    assert linking.main_aliases(["_ZN8__main__10make_twice4kernB2v1E"]) == [], "two modules define it"
    assert linking.main_aliases(["_ZN8__main__11make_absent4kernB2v1E"]) == []
    assert linking.main_aliases(["_ZN9utilities3toy10tensorcore15make_toy_kernelB2v1E"]) == [], "not __main__"

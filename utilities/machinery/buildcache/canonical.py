"""A kernel's LLVM IR as a text that does not depend on what its process compiled before: the build cache's key.

numba-cuda prints a kernel as a list of modules, and five things in them follow the process's history, not the code:

- compilation numbers: numba numbers every function it compiles (the ABI tag ``v<n>`` of a mangled name, the
  ``$<n>`` of a module's name, the ``_v<n>_`` in the names of the locals it inlined from an overload), and every
  shared array (``_cudapy_smem_<n>``, one counter);
- the order of the modules: numba keeps a kernel's libraries in a set ordered by address, so modules whose texts
  tie once the numbers are removed (two specialisations of one overload, say) come in any order, and numbering by
  first appearance then numbers them differently;
- identified struct types: llvmlite prints every type ever registered in its global context into every module, and
  nvmath registers its ``%"struct.libmathdx_..."`` types when it first lowers a kernel, so a plain kernel built
  after a cuBLASDx kernel declares them too;
- libmathdx tensor UIDs (``BlasLayout(uid=<n>, ...)`` in mangled names), a per-process counter. (The build cache
  serves each recorded tensor a UID made from its recipe, ``interposer``, so that they no longer vary; the key
  renumbers them anyway.)
- basic-block labels: numba names a block ``B<label>``, and the blocks it inlines from an overload get labels from
  one counter per process (``B713`` in a kernel built alone was ``B1251`` after another kernel: the pipelined GEMM
  of notebook 1 after its multi-pass kernels, found on a CPU, 2026-11-28; its cubin was linked again in every
  notebook run on the H200). A label is local to its function: each module's are renumbered by first appearance.

:func:`canonical_ir` removes all five: block labels are renumbered, unused type definitions go and the rest are
sorted; modules are ordered by their text with the numbers removed, ties broken by what the numbers refer to (colour
refinement: each number is described by the modules it appears in and where, until the description stops splitting
ties); then every number is renumbered by first appearance, each kind on its own. Renumbering keeps which symbol is
which, so two kernels that differ get different texts. Modules that refinement cannot tell apart (a cycle of
identical modules) are placed each way in turn, and the smallest text is the key's.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable

_MANGLED = re.compile(r"_ZN(?=\d)")
_UID = re.compile(r"v(\d+)")
_MODULE_ID = re.compile(r'^(; ModuleID = "[^"\n]*?\$)(\d+)(")', re.MULTILINE)  # numba's "<qualname>$<number>"
# numba names each shared-memory array of a process ``_cudapy_smem_<n>`` from one counter (cudaimpl.py: NVVM needs the
# names unique), so a kernel's shared arrays are named by how many were made before it in the process
_SMEM = re.compile(r"_cudapy_smem_(\d+)\b")
# a libmathdx tensor's UID in an escaped type name: "uid=" then the number ("-1": a global-memory layout, no counter)
_TENSOR_UID = re.compile(r"uid_3d(\d+)")
_SYMBOL = re.compile(r"(?<![A-Za-z0-9_])_Z[A-Za-z0-9_]+")
# a local value that numba inlined from an overload: "<qualname>_v<number>_<variable>" (inline_closurecall's names:
# "$" of "impl$142" written "_v"), in a quoted local name
_LOCAL = re.compile(r'%"([^"\n]*)"')
_INLINED = re.compile(r"_v(\d+)(?=_)")
# a basic block's label "B<number>[.suffix]": defined at the start of a line, used as %"B<number>..." (branches, phis)
_LABEL = re.compile(r'(?m)(^|%"|%)B(\d+)(?=[.:"\s,\])]|$)')
_TYPE_DEFINITION = re.compile(r'^(%(?:"[^"\n]*"|[-\w.$]+)) = type\b.*$', re.MULTILINE)
_CODES = ("Dh", "v", "b", "h", "a", "t", "s", "j", "i", "y", "x", "f", "d")  # numba's builtin type codes


def number(text: str, i: int) -> tuple[int | None, int]:
    """The decimal number at ``text[i:]`` (None if there is none) and where it ends."""
    j = i
    while j < len(text) and text[j].isdigit():
        j += 1
    return (int(text[i:j]) if j > i else None), j


def nested_name(text: str, i: int) -> tuple[list[str], int]:
    """The identifiers of a mangled nested name from ``text[i:]`` (``<length><identifier>``, repeated), and where
    they end."""
    parts = []
    size, j = number(text, i)
    while size is not None:
        parts.append(text[j : j + size])
        i = j + size
        size, j = number(text, i)
    return parts, i


def uid_tags(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, number)`` of each numba compilation number in ``text``: the ``B<len>v<n>`` ABI tag right
    after the nested name of a mangled symbol (``_ZN`` then length-prefixed identifiers)."""
    tags = []
    for match in _MANGLED.finditer(text):
        _, i = nested_name(text, match.end())
        while text.startswith("B", i):  # ABI tags: B<length><tag>
            size, j = number(text, i + 1)
            if size is None:
                break
            uid = _UID.fullmatch(text, j, j + size)
            if uid:
                tags.append((i, j + size, uid[1]))
                break
            i = j + size
    return tags


def retag(text: str, tag: Callable[[str], str]) -> str:
    """``text`` with each compilation number's ABI tag replaced by ``B<len>`` + ``tag(number)``, and the number of
    a module's name by ``tag(number)``."""
    text = _MODULE_ID.sub(lambda m: m[1] + tag(m[2]) + m[3], text)
    out, last = [], 0
    for start, end, uid in uid_tags(text):
        new = tag(uid)
        out += [text[last:start], f"B{len(new)}{new}"]
        last = end
    return "".join([*out, text[last:]])


# -- mangled names, parsed far enough to rewrite an identifier and its length --------------------------------------


class _Unparsed(ValueError):
    pass


def _identifiers(symbol: str) -> list[tuple[int, int]]:
    """``(start, end)`` of every length-prefixed identifier of a numba mangled ``symbol`` (the length's digits
    included), in order; :class:`_Unparsed` when it is not one numba's mangler writes."""
    spans: list[tuple[int, int]] = []
    i = 2  # after "_Z"

    def expect(char: str) -> None:
        nonlocal i
        if not symbol.startswith(char, i):
            raise _Unparsed(symbol)
        i += len(char)

    def identifier() -> None:
        nonlocal i
        size, j = number(symbol, i)
        if size is None or j + size > len(symbol):
            raise _Unparsed(symbol)
        spans.append((i, j + size))
        i = j + size

    def name() -> None:  # N<identifier>+[I<args>E](B<tag>)*E, or <identifier>[I<args>E](B<tag>)*
        nested = symbol.startswith("N", i)
        if nested:
            expect("N")
            while i < len(symbol) and symbol[i].isdigit():
                identifier()
        else:
            identifier()
        if symbol.startswith("I", i):
            expect("I")
            while not symbol.startswith("E", i):
                argument()
            expect("E")
        while symbol.startswith("B", i):  # an ABI tag: an identifier of its own
            expect("B")
            identifier()
        if nested:
            expect("E")

    def argument() -> None:
        nonlocal i
        if i >= len(symbol):
            raise _Unparsed(symbol)
        if symbol[i] == "N" or symbol[i].isdigit():
            name()
        elif symbol.startswith("L", i):  # an integer literal: Li<n>E
            expect("Li")
            _, i = number(symbol, i + symbol.startswith("n", i))
            expect("E")
        else:
            code = next((c for c in _CODES if symbol.startswith(c, i)), None)
            if code is None:
                raise _Unparsed(symbol)
            i += len(code)

    name()
    while i < len(symbol):
        argument()
    return spans


def _rewrite_identifiers(symbol: str, rewrite: Callable[[str], str]) -> str:
    """``symbol`` with each identifier replaced by ``rewrite(identifier)`` and its length written again; the symbol
    unchanged when it cannot be parsed."""
    try:
        spans = _identifiers(symbol)
    except _Unparsed:
        return symbol
    out, last = [], 0
    for start, end in spans:
        _, text_start = number(symbol, start)
        new = rewrite(symbol[text_start:end])
        out += [symbol[last:start], f"{len(new)}{new}"]
        last = end
    return "".join([*out, symbol[last:]])


def retag_tensors(text: str, label: Callable[[str], str]) -> str:
    """``text`` with each libmathdx tensor UID in a mangled name replaced by ``label(uid)``, the lengths of the
    identifiers that hold them written again."""

    def symbol(match: re.Match[str]) -> str:
        found = match[0]
        if "uid_3d" not in found:
            return found
        return _rewrite_identifiers(found, lambda ident: _TENSOR_UID.sub(lambda m: "uid_3d" + label(m[1]), ident))

    return _SYMBOL.sub(symbol, text) if "uid_3d" in text else text


# -- basic-block labels -------------------------------------------------------------------------------------------


def relabel_blocks(module: str) -> str:
    """``module`` with numba's basic-block labels (``B<n>``, with any suffix) renumbered by first appearance: the
    numbers of inlined blocks come from one counter per process. Labels and local values share a function's names,
    so a renaming that maps every ``B<n>`` to its own new number keeps which block is which."""
    seen: dict[str, int] = {}
    return _LABEL.sub(lambda m: f"{m[1]}B{seen.setdefault(m[2], len(seen))}", module)


# -- identified struct types ---------------------------------------------------------------------------------------


def used_types(module: str) -> str:
    """``module`` with the identified struct types that nothing in it refers to removed, and the rest of their
    definitions sorted, first: llvmlite prints every type its global context ever registered."""
    definitions = {m[1]: m[0] for m in _TYPE_DEFINITION.finditer(module)}
    if not definitions:
        return module
    body = "\n".join(line for line in module.split("\n") if not _TYPE_DEFINITION.fullmatch(line))
    kept: dict[str, str] = {}
    uses = body
    while True:  # a type is used by the body, or by the definition of a type that is used
        more = {n: d for n, d in definitions.items() if n not in kept and _refers(uses, n)}
        if not more:
            break
        kept.update(more)
        uses = "\n".join(more.values())
    return "\n".join([*sorted(kept.values()), body])


def _refers(text: str, name: str) -> bool:
    if name.endswith('"'):
        return name in text
    return re.search(re.escape(name) + r"(?![-\w.$])", text) is not None


# -- the order of the modules --------------------------------------------------------------------------------------


def retag_locals(text: str, label: Callable[[str], str]) -> str:
    """``text`` with the compilation number in each inlined local's name replaced by ``label(number)``."""

    def one(m: re.Match[str]) -> str:  # most locals hold no number: left as they are, without a second search
        return '%"' + _INLINED.sub(lambda n: "_v" + label(n[1]), m[1]) + '"' if "_v" in m[1] else m[0]

    return _LOCAL.sub(one, text)


def _tokens(text: str) -> list[tuple[str, str]]:
    """The history-dependent numbers of a module in order of appearance, each with its kind."""
    found: list[tuple[int, str, str]] = [(m.start(2), "v", m[2]) for m in _MODULE_ID.finditer(text)]
    found += [(m.start(1) + n.start(), "local", n[1]) for m in _LOCAL.finditer(text) for n in _INLINED.finditer(m[1])]
    found += [(start, "v", uid) for start, _, uid in uid_tags(text)]
    found += [(m.start(), "smem", m[1]) for m in _SMEM.finditer(text)]
    found += [(m.start(), "uid", m[1]) for m in _TENSOR_UID.finditer(text)]
    return [(kind, value) for _, kind, value in sorted(found)]


def _skeleton(text: str) -> str:
    """A module's text with every history-dependent number removed."""
    return _SMEM.sub(
        "_cudapy_smem_", retag_locals(retag_tensors(retag(text, lambda _: "v"), lambda _: ""), lambda _: "")
    )


def _digest(*parts: object) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()


_MAX_ORDERS = 64  # orders tried for modules that refinement cannot tell apart (a cycle of identical modules)


class _Prefixed:
    """:func:`_digest` of tuples that begin with one long text: the text's ``repr`` hashed once, each digest taken
    from a copy (the same digests; a module's skeleton is tens of kilobytes, and refinement digests it again at every
    round of every order tried)."""

    def __init__(self, text: str) -> None:
        self._head = hashlib.sha256(("(" + repr(text) + ", ").encode())

    def digest(self, *rest: object) -> str:
        """``_digest(text, *rest)``, for one or more ``rest``."""
        h = self._head.copy()
        h.update((", ".join(repr(r) for r in rest) + ")").encode())
        return h.hexdigest()


def _refine(tokens: list[list[tuple[str, str]]], marks: dict[int, int], heads: list[_Prefixed]) -> list[str]:
    """Each module's signature after colour refinement, from its skeleton (``heads``: each skeleton's
    :class:`_Prefixed`), its tokens and ``marks`` (modules placed by hand)."""
    colour: dict[tuple[str, str], str] = {tok: "" for toks in tokens for tok in toks}
    signature: list[str] = []
    for _ in range(len(heads) + 1):
        signature = [heads[i].digest(marks.get(i), [colour[t] for t in toks]) for i, toks in enumerate(tokens)]
        seen: dict[tuple[str, str], list[tuple[str, int]]] = defaultdict(list)
        for sig, toks in zip(signature, tokens, strict=True):
            for position, tok in enumerate(toks):
                seen[tok].append((sig, position))
        refined = {tok: _digest(tok[0], sorted(places)) for tok, places in seen.items()}
        if len(set(refined.values())) == len(set(colour.values())):
            break
        colour = refined
    return signature


def canonical_orders(texts: list[str]) -> list[list[int]]:
    """The modules' indices in orders that do not depend on the numbers in them (the module docstring): one, unless
    some modules stay alike after refinement, and then one for each way of placing them (at most :data:`_MAX_ORDERS`;
    :func:`canonical_ir` keeps the smallest text)."""
    skeletons = [_skeleton(t) for t in texts]
    tokens = [_tokens(t) for t in texts]
    heads = [_Prefixed(s) for s in skeletons]
    found: list[list[int]] = []

    def place(marks: dict[int, int]) -> None:
        signature = _refine(tokens, marks, heads)
        order = sorted(range(len(texts)), key=lambda i: (skeletons[i], signature[i]))
        counts = Counter(signature)
        alike = [i for i in order if counts[signature[i]] > 1]
        if not alike or len(found) >= _MAX_ORDERS:
            found.append(order)
            return
        group = [i for i in alike if signature[i] == signature[alike[0]]]
        for chosen in group:  # each of them first in turn; refinement then places what refers to it
            place({**marks, chosen: len(marks)})

    place({})
    return found[:_MAX_ORDERS]


class _Numbering:
    """The renumbering of one order of the modules: each kind of number by first appearance so far."""

    def __init__(self, kinds: tuple[dict[str, int], ...] = ({}, {}, {}, {})) -> None:
        self.numbers, self.arrays, self.tensors, self.inlined = (dict(k) for k in kinds)

    def copy(self) -> _Numbering:
        return _Numbering((self.numbers, self.arrays, self.tensors, self.inlined))

    def renumber(self, text: str) -> str:
        def compilation(uid: str) -> str:
            return f"v{self.numbers.setdefault(uid, len(self.numbers) + 1)}"

        def array(match: re.Match[str]) -> str:
            return f"_cudapy_smem_{self.arrays.setdefault(match[1], len(self.arrays) + 1)}"

        def tensor(uid: str) -> str:
            return f"t{self.tensors.setdefault(uid, len(self.tensors) + 1)}"

        def local(uid: str) -> str:
            return f"i{self.inlined.setdefault(uid, len(self.inlined) + 1)}"

        return _SMEM.sub(array, retag_locals(retag_tensors(retag(text, compilation), tensor), local))


def canonical_ir(modules: Iterable[str], entry: str | None = None) -> tuple[str, str | None]:
    """The kernel's modules as one text that does not depend on the process's history (the module docstring), and
    the entry name renumbered alike. The orders tried share their first modules (those refinement placed), so each
    shared beginning is renumbered once and its numbering copied."""
    texts = [relabel_blocks(used_types(m.strip())) for m in modules]
    results: list[tuple[str, str | None]] = []

    def walk(orders: list[list[int]], depth: int, numbering: _Numbering, pieces: list[str]) -> None:
        while orders and depth < len(orders[0]) and all(o[depth] == orders[0][depth] for o in orders):
            pieces = [*pieces, numbering.renumber(texts[orders[0][depth]])]
            depth += 1
        if not orders or depth == len(orders[0]):
            results.append(("\n".join(pieces), numbering.renumber(entry) if entry is not None else None))
            return
        branches: dict[int, list[list[int]]] = {}
        for o in orders:
            branches.setdefault(o[depth], []).append(o)
        for branch in branches.values():
            walk(branch, depth, numbering.copy(), pieces)

    walk(canonical_orders(texts), 0, _Numbering(), [])
    return min(results)

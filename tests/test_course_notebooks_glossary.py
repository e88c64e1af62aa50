"""Every term the day measures with is defined once, in the primer's glossary, and each notebook links to it where
it first uses the term: in its prose, and again in its core path when the first use is in a stretch section. Text a
code cell prints counts as a use: a markdown cell before it must have linked the term."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import pytest

from utilities.notebooks import is_stretch

ROOT = Path(__file__).resolve().parent.parent
PRIMER = "0_primer"
ANCHOR = "Glossary"
# term -> how it is written in prose ("floor(" is a function, not the term)
TERMS = {
    "floor": r"\bfloors?\b(?!\()",
    "roofline": r"\broofline\b",
    "ridge point": r"\bridge points?\b",
    "memory- and compute-bound": r"\b(?:memory|compute)-bound\b",
    "L2": r"\bL2\b",
    "NHWC": r"\bNHWC\b",
    "cuBLASLt": r"\bcuBLASLt\b",
    "double-double": r"\bdouble-doubles?\b",
    "normwise error": r"\bnormwise\b",
}
LINK = re.compile(r"\[(?P<text>[^\]]+)\]\((?:0_primer\.ipynb)?#" + ANCHOR + r"\)")
NOTEBOOKS = sorted((ROOT / "solutions").glob("*.ipynb")) + sorted((ROOT / "notebooks").glob("*.ipynb"))


def prose(source: str) -> str:
    """A markdown cell's text without its headings, inline code and LaTeX (blanked, so that offsets stay)."""
    blank = lambda m: " " * len(m.group(0))  # noqa: E731
    text = re.sub(r"`[^`\n]*`|\$[^$\n]*\$", blank, source)
    return re.sub(r"(?m)^#.*$", blank, text)


def printed(source: str) -> str:
    """The literal text of a code cell's ``print`` and ``claim`` calls (f-strings without their fields), one a line."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ""
    texts = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func).rsplit(".", 1)[-1] in ("print", "claim"):
            parts = [v for arg in node.args for v in (arg.values if isinstance(arg, ast.JoinedStr) else [arg])]
            texts.append(" ".join(v.value for v in parts if isinstance(v, ast.Constant) and isinstance(v.value, str)))
    return "\n".join(texts)


def first_uses(cells: list[tuple[bool, str]], term: str, kinds: list[str] | None = None) -> list[tuple[int, bool]]:
    """For cells ``(is_stretch, source)`` of ``kinds`` (each "markdown" or "code"; all markdown when not given): where
    ``term`` is first used, overall and in the core cells, each as (cell index, linked). A use in markdown is linked
    when it is the text of a link to the glossary; a use in a code cell's printed text when a markdown cell before it
    (a core one, for the core path's use) linked the term."""
    found: dict[str, tuple[int, bool]] = {}
    linked_before = {"overall": False, "core": False}
    for index, (stretch, source) in enumerate(cells):
        code = kinds is not None and kinds[index] == "code"
        text = printed(source) if code else prose(source)
        use = re.search(TERMS[term], text)
        links = [] if code else [link for link in LINK.finditer(text) if re.search(TERMS[term], link["text"])]
        if use is not None:
            for path in ("overall", "core") if not stretch else ("overall",):
                if code:
                    found.setdefault(path, (index, linked_before[path]))
                else:
                    linked = any(link.start("text") <= use.start() < link.end("text") for link in links)
                    found.setdefault(path, (index, linked))
        if links:
            linked_before["overall"] = True
            linked_before["core"] = linked_before["core"] or not stretch
    return sorted(set(found.values()))


def test_the_scan_finds_a_first_use_and_its_link() -> None:
    cells = [
        (False, "## The floor\nThe `floor(x)` function and $floor$."),
        (True, "Its [floor](0_primer.ipynb#Glossary) is here, then a floor again."),
        (False, "A floor in the core path."),
    ]
    assert first_uses(cells, "floor") == [(1, True), (2, False)]
    assert first_uses([(False, "the L2 cache")], "L2") == [(0, False)]
    printing = [(False, 'print(f"ridge point {r:.0f} operations per byte")'), (False, "the [ridge point](#Glossary)")]
    assert printed('x = d["normwise"]\nprint(f"{r.error[\'normwise\']:.2e} floor", "L2")') == " floor L2"
    assert first_uses(printing, "ridge point", ["code", "markdown"]) == [(0, False)]  # printed before it was linked
    assert first_uses(printing[::-1], "ridge point", ["markdown", "code"]) == [(0, True)]


def test_every_glossary_term_is_checked() -> None:
    cells = nbformat.read(ROOT / "solutions" / f"{PRIMER}.ipynb", as_version=4).cells
    glossary = next(c.source for c in cells if c.cell_type == "markdown" and c.source.startswith(f"## {ANCHOR}\n"))
    defined = {w for pair in re.findall(r"^- \*\*(.+?)\*\*(?:, \*\*(.+?)\*\*)?:", glossary, re.M) for w in pair if w}
    unchecked = [w for w in defined if not any(re.search(pattern, w) for pattern in TERMS.values())]
    assert not unchecked, f"glossary terms without a pattern in TERMS (add one): {unchecked}"


def test_the_primer_defines_every_term_in_its_glossary() -> None:
    cells = nbformat.read(ROOT / "solutions" / f"{PRIMER}.ipynb", as_version=4).cells
    glossary = [c.source for c in cells if c.cell_type == "markdown" and c.source.startswith(f"## {ANCHOR}\n")]
    assert len(glossary) == 1, f"{PRIMER} needs one markdown cell starting '## {ANCHOR}'"
    defined = re.findall(r"^- \*\*(.+?)\*\*(?:, \*\*(.+?)\*\*)?:", glossary[0], re.M)
    words = {word for pair in defined for word in pair if word}
    for term, pattern in TERMS.items():
        assert any(re.search(pattern, word) for word in words), f"the glossary does not define {term!r}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[f"{p.parent.name}/{p.stem}" for p in NOTEBOOKS])
def test_each_notebook_links_a_term_to_the_glossary_where_it_first_uses_it(path: Path) -> None:
    if path.stem == PRIMER:
        return  # the glossary is in it
    nb = nbformat.read(path, as_version=4)
    kept = [c for c in nb.cells if c.cell_type in ("markdown", "code") and "reveal" not in c.metadata.get("tags", [])]
    stretch = {id(c): s for c, (s, _) in zip(kept, [(is_stretch(c), None) for c in kept], strict=True)}
    cells = [(stretch[id(c)], c.source) for c in kept]
    kinds = [c.cell_type for c in kept]
    unlinked = [
        f"{term!r} in {kinds[index]} cell {index}"
        for term in TERMS
        for index, linked in first_uses(cells, term, kinds)
        if not linked
    ]
    assert not unlinked, (
        f"{path.relative_to(ROOT)}: link the first use to the glossary, [term](0_primer.ipynb#{ANCHOR}): "
        + ", ".join(unlinked)
    )

"""Every term the day measures with is defined once, in the primer's glossary, and each notebook links to it where
it first uses the term: in its prose, and again in its core path when the first use is in a stretch section."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from utilities.notebooks import sections

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


def first_uses(cells: list[tuple[bool, str]], term: str) -> list[tuple[int, bool]]:
    """For markdown cells ``(is_stretch, source)``: where ``term`` is first used, overall and in the core cells, each
    as (cell index, whether that use is the text of a link to the glossary)."""
    found: dict[str, tuple[int, bool]] = {}
    for index, (stretch, source) in enumerate(cells):
        text = prose(source)
        use = re.search(TERMS[term], text)
        if use is None:
            continue
        linked = any(link.start("text") <= use.start() < link.end("text") for link in LINK.finditer(text))
        found.setdefault("overall", (index, linked))
        if not stretch:
            found.setdefault("core", (index, linked))
    return sorted(set(found.values()))


def test_the_scan_finds_a_first_use_and_its_link() -> None:
    cells = [
        (False, "## The floor\nThe `floor(x)` function and $floor$."),
        (True, "Its [floor](0_primer.ipynb#Glossary) is here, then a floor again."),
        (False, "A floor in the core path."),
    ]
    assert first_uses(cells, "floor") == [(1, True), (2, False)]
    assert first_uses([(False, "the L2 cache")], "L2") == [(0, False)]


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
    cells = sections(path, "markdown")
    unlinked = [
        f"{term!r} in markdown cell {index}"
        for term in TERMS
        for index, linked in first_uses(cells, term)
        if not linked
    ]
    assert not unlinked, (
        f"{path.relative_to(ROOT)}: link the first use to the glossary, [term](0_primer.ipynb#{ANCHOR}): "
        + ", ".join(unlinked)
    )

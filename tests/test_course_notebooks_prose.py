"""Numbers that stay true: a measured number in a solution notebook's prose is either printed by the notebook itself
or marked as a reference figure, ``(reference: <GPU>, results/<file>, <YYYY-MM-DD>)``, naming a committed report that
holds it; a vendor figure is marked ``(data sheet)``.

A measured number is a number with a unit of time or rate (ms, us, µs, s, TOPS, TFLOP/s, GFLOP/s, GB/s, TB/s) or a
speed ratio written like ``1.4x``; and so are the words and sizes that carry one (:func:`measured_words`):

- a percentage (``13%``, ``a few percent``): a share of a time, a bandwidth or a count that a run or a model gives;
- an approximate multiple or fraction (``about twice``, ``nearly four times``, ``about half``, ``up to about 50%``,
  ``several times``): the qualifier says it was measured or rounded from a model, and it moves with the GPU;
- a multiple of a time or a speed (``twice as fast``, ``halve the time``, ``4 times slower``);
- a size (``40 KiB``, ``7.5 GB``), unless the paragraph computes it: ``64 x 128 x 2 B = 16 KiB``.

Exact counts stay plain prose: ``read twice``, ``9 times the input``, a tile that ``halves`` the accumulator. A number
that depends on the GPU belongs in a cell's output, where it is this run's; the prose points to it. The scan works
paragraph by paragraph (blank lines, list items and headings separate them; a table is one paragraph): a marker
covers the numbers of its own paragraph only. Every offending paragraph of a notebook is reported at once, with its
cell.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
SOLUTION_NOTEBOOKS = sorted((ROOT / "solutions").glob("*.ipynb"))

_NUMBER = r"\d+(?:\.\d+)?"
UNITS = r"ms|us|µs|μs|s|TOPS|TFLOP/s|GFLOP/s|GB/s|TB/s"
# "1.4-2.1 ms" and "1.4 to 2.1 ms" are ranges: both ends are measured numbers
WITH_UNIT = re.compile(
    rf"(?<![\w.^/{{-])(?P<low>{_NUMBER})(?:\s?(?:-|–|to)\s?(?P<high>{_NUMBER}))?\s?(?P<unit>{UNITS})(?![\w/])"
)
RATIO = re.compile(rf"(?<![\w.^/{{-])(?P<value>{_NUMBER})(?:\s?(?:-|–|to)\s?{_NUMBER})?[x×](?![\w])")
SIZE_UNITS = r"KiB|MiB|GiB|TiB|kB|KB|MB|GB|TB"
SIZE = re.compile(rf"(?<![\w.^/{{-])(?P<value>{_NUMBER})\s?(?P<unit>{SIZE_UNITS})(?![\w/])")
_COMPUTED = re.compile(r"=\s*$")  # what precedes a size the paragraph computes: "... = 16 KiB"
_COUNT = (
    r"(?:\d+(?:\.\d+)?|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty|fifty"
    r"|hundred)"
)
_MULTIPLE = (
    rf"(?:twice|thrice|half|a half|a third|two thirds|a quarter|three quarters|a fifth|a tenth|a ninth|a hundredth"
    rf"|double|{_COUNT}(?:-fold| times)|an order of magnitude|orders of magnitude)"
)
_QUALIFIER = (
    r"(?:about|nearly|almost|roughly|around|approximately|close to|some|only about|just over|just under|a little over"
    r"|a little under|well over|well under|more than|less than|up to|over|under)"
)
MEASURED_WORDS = [
    re.compile(r"(?<![\w.])\d+(?:\.\d+)?\s?%|\b(?:a few|several|many|\d+(?:\.\d+)?) percent\b", re.I),
    re.compile(rf"\b{_QUALIFIER}\s+(?:about\s+)?{_MULTIPLE}(?![\w-])", re.I),
    re.compile(r"\b(?:several|many|a few) times\b", re.I),
    re.compile(
        rf"\b(?:twice|half|{_COUNT} times|{_COUNT}-fold)\s+(?:as fast|as slow|as long|faster|slower|longer|shorter"
        r"|the time|the speed|the rate)\b|\b(?:halve|halves|halved|double|doubles|doubled)\s+(?:the|its|their)\s+"
        r"(?:time|speed|rate)\b",
        re.I,
    ),
]
REFERENCE = re.compile(
    r"\(reference:\s+(?P<gpu>[^,()]+),\s+(?P<report>results/[^,\s()]+),\s+(?P<date>\d{4}-\d{2}-\d{2})\)"
)  # a line may break inside it
DATA_SHEET = "(data sheet)"
_ITEM = re.compile(r"^(?:[-*+]|\d+\.)\s")


@dataclass(frozen=True)
class Paragraph:
    notebook: str
    cell: int
    text: str

    def where(self) -> str:
        return f"{self.notebook}, markdown cell {self.cell}"


def paragraphs(text: str) -> list[str]:
    """A markdown cell's paragraphs: blocks between blank lines, each list item and each heading on its own; a
    table (lines starting with ``|``) stays one paragraph."""
    found: list[str] = []
    for block in re.split(r"\n[ \t]*\n", text):
        current: list[str] = []
        for line in block.split("\n"):
            starts_item = _ITEM.match(line) is not None or line.startswith("#")
            if starts_item and current:
                found.append("\n".join(current))
                current = []
            current.append(line)
            if line.startswith("#"):  # a heading ends where its line ends
                found.append("\n".join(current))
                current = []
        if current:
            found.append("\n".join(current))
    return [p for p in found if p.strip()]


def notebook_paragraphs(path: Path) -> list[Paragraph]:
    cells = nbformat.read(path, as_version=4).cells
    return [
        Paragraph(path.stem, index, text)
        for index, cell in enumerate(cells)
        if cell.cell_type == "markdown"
        for text in paragraphs(cell.source)
    ]


def measured_numbers(text: str) -> list[str]:
    """The measured numbers of a paragraph as written (``"3.7 ms"``, ``"1.4x"``), LaTeX ``$...$`` included."""
    return [m.group(0).strip() for m in WITH_UNIT.finditer(text)] + [m.group(0) for m in RATIO.finditer(text)]


def measured_words(text: str) -> list[str]:
    """The words and sizes of a paragraph that carry a measurement (see the module docstring), in order."""
    found = [(m.start(), " ".join(m.group(0).split())) for pattern in MEASURED_WORDS for m in pattern.finditer(text)]
    found += [
        (m.start(), f"{m['value']} {m['unit']}") for m in SIZE.finditer(text) if not _COMPUTED.search(text[: m.start()])
    ]
    return [words for _, words in sorted(found)]


def unmarked(paragraph: str) -> list[str]:
    """The measured numbers, words and sizes of a paragraph that carries neither a reference marker nor
    ``(data sheet)``."""
    if REFERENCE.search(paragraph) or DATA_SHEET in paragraph:
        return []
    return measured_numbers(paragraph) + measured_words(paragraph)


def report_numbers(report: Path) -> list[float]:
    return [float(x) for x in re.findall(r"(?<![\w.])\d+(?:\.\d+)?(?:e[-+]?\d+)?", report.read_text(encoding="utf-8"))]


def held_by(value: str, unit: str, numbers: list[float]) -> bool:
    """Whether a report number, rounded to ``value``'s decimals, is ``value`` (times in ms, us or s alike)."""
    decimals = len(value.partition(".")[2])
    target = float(value)
    scales = (1.0, 1e3, 1e-3) if unit in ("ms", "us", "µs", "μs", "s") else (1.0,)
    return any(abs(round(x * scale, decimals) - target) < 1e-9 for x in numbers for scale in scales)


def marker_problems(paragraph: str) -> list[str]:
    """What is wrong with the paragraph's reference markers: a report that is not in ``results/``, a date or a GPU
    that the report does not hold, a number with a unit that no number of the named reports rounds to."""
    problems, numbers, named = [], [], []
    for marker in REFERENCE.finditer(paragraph):
        report = ROOT / marker["report"]
        if not report.is_file():
            problems.append(f"{marker['report']} is not a committed report")
            continue
        text = report.read_text(encoding="utf-8")
        if marker["date"] not in text:
            problems.append(f"{marker['report']} holds no date {marker['date']}")
        if " ".join(marker["gpu"].split()).lower() not in text.lower():
            problems.append(f"{marker['report']} is not a report of a {marker['gpu']}")
        numbers += report_numbers(report)
        named.append(marker["report"])
    if named:
        for found in WITH_UNIT.finditer(paragraph):
            for value in (found["low"], found["high"]):
                if value is not None and not held_by(value, found["unit"], numbers):
                    problems.append(f"{value} {found['unit']} is not in {' or '.join(named)}")
    return problems


def offending(path: Path) -> list[str]:
    lines = []
    for p in notebook_paragraphs(path):
        numbers = unmarked(p.text)
        if numbers:
            excerpt = " ".join(p.text.split())[:160]
            lines.append(f"{p.where()}: {', '.join(numbers)} without a marker: {excerpt!r}")
        lines += [f"{p.where()}: {problem}" for problem in marker_problems(p.text)]
    return lines


# --- the scanner itself ----------------------------------------------------------------------------------------


def test_the_scanner_sees_measured_numbers_and_their_markers() -> None:
    text = "The kernel took 3.7 ms (0.8x cuBLAS), 594 TOPS and 2.5 TB/s; 1.4-2.1 ms, 1.9-2.0x in other runs."
    assert measured_numbers(text) == ["3.7 ms", "594 TOPS", "2.5 TB/s", "1.4-2.1 ms", "0.8x", "1.9-2.0x"]
    for plain in (
        "a 128 x 128 tile of 2^17 rows",
        "int8 and sm_90a, 0x80808080",
        "7 slices, 28 products, 16 GB",
        "K = 18724 and $256\\times$ per slice, $2^{-7-8s}$",
        "stage 2 of 3 stages",
    ):
        assert measured_numbers(plain) == [], plain
    marked = f"{text} (reference: H100, results/nvidia-h100-80gb-hbm3-ozaki-8192.md, 2026-11-22)"
    assert unmarked(marked) == [] and unmarked("HBM moves 3.35 TB/s (data sheet).") == []


def test_the_scanner_sees_words_and_sizes_that_carry_a_measurement() -> None:
    text = (
        "The floor is about twice the fused one's and fusion gains a few percent, about half, up to about 50%; the "
        "epilogue path moves nearly four times the bytes, 13% more, several times A's; it ran twice as fast and "
        "could halve the time; its stages take 40 KiB of the 113 KiB, and 7.5 GB are written."
    )
    assert measured_words(text) == [
        "about twice",
        "a few percent",
        "about half",
        "50%",
        "nearly four times",
        "13%",
        "several times",
        "twice as fast",
        "halve the time",
        "40 KiB",
        "113 KiB",
        "7.5 GB",
    ]
    for plain in (
        "a double-buffered K loop, double-double sums, round halves to even, at most half its weight",
        "B is read twice, cuDNN twice; A is 9 times the input; the tile halves each thread's accumulator",
        "each row costs 2 (4096 x 256 + 256 x 64) = 2.1 MFLOP against 2 (4096 + 64 + 64) B = 8.4 kB",
        "16-byte copies, 4 bytes an entry, 2^17 rows, 1 KiB boundaries, 80GB-class, 3.35 TB/s (a rate)",
    ):
        assert measured_words(plain) == [] or plain.endswith("(a rate)"), (plain, measured_words(plain))
    assert measured_words("1 KiB boundaries") == ["1 KiB"]  # a size is a size, even a layout's
    assert unmarked("It took about twice as long (reference: H100, results/x.md, 2026-11-22).") == []


def test_the_scanner_splits_paragraphs_as_a_reader_does() -> None:
    cell = "# Title 2x\nText 1.5x.\n\n- first 3 ms\n- second (data sheet) 4 ms\n  continued 5 ms\n\n| a | 6 ms |\n| b |"
    found = [(p.splitlines()[0], unmarked(p)) for p in paragraphs(cell)]
    assert found == [
        ("# Title 2x", ["2x"]),
        ("Text 1.5x.", ["1.5x"]),
        ("- first 3 ms", ["3 ms"]),
        ("- second (data sheet) 4 ms", []),
        ("| a | 6 ms |", ["6 ms"]),
    ]


def test_a_marker_must_name_a_report_that_holds_its_numbers() -> None:
    report = "results/nvidia-h100-80gb-hbm3-ozaki-8192.md"
    assert marker_problems(f"DGEMM took 19.8 ms (reference: H100, {report}, 2026-11-22).") == []
    assert marker_problems(f"DGEMM took 19.82 ms, 19820 us (reference: H100, {report}, 2026-11-22).") == []
    wrong = marker_problems(f"DGEMM took 18.4 ms (reference: A100, {report}, 2026-11-25).")
    assert len(wrong) == 3 and "18.4 ms" in wrong[2], wrong
    assert marker_problems("1 ms (reference: H100, results/none.md, 2026-11-22)") == [
        "results/none.md is not a committed report"
    ]


# --- the notebooks ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", SOLUTION_NOTEBOOKS, ids=lambda p: p.stem)
def test_measured_numbers_in_prose_are_printed_or_marked(path: Path) -> None:
    problems = offending(path)
    assert not problems, (
        "measured numbers, and the words and sizes that carry one, must be printed by the notebook, or marked "
        "'(reference: <GPU>, results/<report>, <YYYY-MM-DD>)' with a report that holds them, or '(data sheet)':\n"
        + "\n".join(problems)
    )

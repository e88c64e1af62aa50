"""One source for exercises and solutions: build ``notebooks/`` from ``solutions/``, and reveal a solution.

The solution notebooks in ``solutions/`` are the source of truth; the exercise notebooks in ``notebooks/`` are
generated from them. Markers in code cells (valid in Python modules too, as they are comments)::

    # TODO (about 2 lines): the loop bounds of diagonal d     <- kept in the exercise
    # SKELETON: s_lo, s_hi = 0, 0                            <- becomes `s_lo, s_hi = 0, 0`
    # BEGIN SOLUTION                                          <- from here ...
    s_lo = max(0, d - (S - 1))
    # END SOLUTION                                            <- ... to here: removed

Markdown cells may hold ``<!-- BEGIN SOLUTION -->...<!-- END SOLUTION -->`` regions, removed likewise.
A code cell starting with ``# SOURCE: utilities/ozaki/simt.py::make_slice_rows_kernel`` lines gets its body
rewritten from those top-level definitions of the module (read with ``ast``, never imported).
A code cell tagged ``exercise-raises`` is tagged ``raises-exception`` in the exercise (for nbval): use it on
the check cell that raises "not implemented" while the skeleton is untouched.
A stretch section is a level-2 heading ``## 4. Stretch: ...`` at the top of a markdown cell, to the next level-2
heading: build marks each of its cells ``"course": {"stretch": true}`` in both notebooks (reveal cells too), so that
a core-only run (``python -m utilities.workshop --core``) can skip them.
The way back, for the run-through and the GPU ledger: :func:`filled_notebook` is an exercise with its solutions
filled in, and :func:`edit_runs` the edits that rebuild each exercise's kernel (predictions are not edited).

The day's clock: each notebook's first cell holds its hands-on time in one form (:data:`CLOCK`, e.g.
``*Core path: 25 min hands-on, sections 1-3. Stretch: 10 min, section 4 (a lever).*``), and build writes the
README's agenda from them (:func:`agenda`, between :data:`AGENDA_BEGIN` and :data:`AGENDA_END`), in the order of
:data:`DAY`.

    python -m utilities.notebooks build   # refresh solutions/, write notebooks/ and the README's agenda
    python -m utilities.notebooks check   # exit 1 listing every file that build would change
    python -m utilities.notebooks agenda  # print the agenda
"""

from __future__ import annotations

import argparse
import ast
import copy
import hashlib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

from .checker import PLACEHOLDER

REPO_ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = "solutions"
EXERCISES = "notebooks"
REVEAL_TAG = "reveal"
PREDICTION_TAG = "prediction"  # a cell where the attendee writes a prediction: no reveal cell after it
PREDICTION_LINE = "# your prediction"  # how a prediction cell's first comment starts (any case): is_prediction
RAISES_TAG = "exercise-raises"
EDIT_LINE = "_attendee_edit = 0  # an edit: new code to build, the same result"
STRETCH = "stretch"  # the key, in a cell's "course" metadata, of a cell in a stretch section

_BEGIN = re.compile(r"^(?P<indent>\s*)# BEGIN SOLUTION\s*$")
_END = re.compile(r"^\s*# END SOLUTION\s*$")
_ANY_MARKER = re.compile(r"#\s*(BEGIN|END)\s*SOLUTION", re.IGNORECASE)
_SKELETON = re.compile(r"^(?P<indent>[ \t]*)# SKELETON:(?: (?P<code>.*))?$")
_SOURCE = re.compile(r"^# SOURCE: (?P<path>[^\s:]+)::(?P<name>[A-Za-z_]\w*)\s*$")
_MD_MARKER = re.compile(r"<!--\s*(BEGIN|END) SOLUTION\s*-->")
_SECTION = re.compile(r"^## (?P<title>.*)$")
# the day: the core path's notebooks in their order (the others are optional)
DAY = (
    "0_primer",
    "2a_epilogue_fusion",
    "2b_back_to_back",
    "3a_ozaki_numerics",
    "3b_ozaki_unfused",
    "3d_ozaki_fused",
)
CLOCK = re.compile(
    r"^\*(?P<path>Core path|Optional): (?P<minutes>\d+) min hands-on, (?P<core>[^*]+?)\."
    r"(?: Stretch: (?P<stretch_minutes>\d+) min, (?P<stretch>[^*]+?)\.)?\*",
    re.M,
)
README = "README.md"
AGENDA_BEGIN = "<!-- BEGIN AGENDA: written by python -m utilities.notebooks build from each notebook's first cell -->"
AGENDA_END = "<!-- END AGENDA -->"
_STRETCH_TITLE = re.compile(r"^(?:\d+\.\s+)?Stretch\b")


class NotebookBuildError(ValueError):
    """A solution notebook that cannot be turned into an exercise; the message names notebook, cell and line."""


# --- code and markdown cells -------------------------------------------------------------------------------


class _Regions:
    """The solution regions of one cell: raises on a nested, unopened or unclosed region."""

    def __init__(self, where: str) -> None:
        self.where, self.opened_at, self.count = where, 0, 0

    def begin(self, number: int) -> None:
        if self.opened_at:
            raise NotebookBuildError(
                f"{self.where}, line {number}: BEGIN SOLUTION inside the region opened at line {self.opened_at}"
            )
        self.opened_at, self.count = number, self.count + 1

    def end(self, number: int) -> None:
        if not self.opened_at:
            raise NotebookBuildError(f"{self.where}, line {number}: END SOLUTION without a BEGIN SOLUTION")
        self.opened_at = 0

    def finish(self) -> None:
        if self.opened_at:
            raise NotebookBuildError(f"{self.where}, line {self.opened_at}: BEGIN SOLUTION is never closed")


def strip_code(source: str, where: str = "<cell>") -> tuple[str, bool]:
    """Exercise version of a code cell's source, and whether it had a solution region.

    Every skeleton line ends with the ``PLACEHOLDER`` comment (a region without skeleton lines becomes
    ``pass  # placeholder``), so that a checker can tell an untouched exercise from a wrong one.
    """
    regions = _Regions(where)
    kept: list[str] = []
    skeleton_lines = 0
    for number, line in enumerate(source.split("\n"), start=1):
        if _BEGIN.match(line):
            regions.begin(number)
            if not skeleton_lines:
                kept.append(line[: len(line) - len(line.lstrip())] + "pass  " + PLACEHOLDER)
            skeleton_lines = 0
        elif _END.match(line):
            regions.end(number)
        elif _ANY_MARKER.search(line):
            raise NotebookBuildError(f"{where}, line {number}: malformed marker {line.strip()!r}")
        elif not regions.opened_at:
            skeleton = _SKELETON.match(line)
            if skeleton and skeleton["code"]:
                skeleton_lines += 1
                kept.append(skeleton["indent"] + skeleton["code"] + "  " + PLACEHOLDER)
            elif skeleton:
                kept.append(skeleton["indent"].rstrip())  # an empty skeleton line: a blank line
            else:
                skeleton_lines = 0 if line.strip() and not line.strip().startswith("#") else skeleton_lines
                kept.append(line)
    regions.finish()
    return "\n".join(kept), regions.count > 0


def strip_markdown(source: str, where: str = "<cell>") -> str:
    """Markdown source without its ``<!-- BEGIN SOLUTION -->...<!-- END SOLUTION -->`` regions."""
    regions = _Regions(where)
    kept: list[str] = []
    for number, line in enumerate(source.split("\n"), start=1):
        pieces, position, touched = [], 0, bool(regions.opened_at)
        for marker in _MD_MARKER.finditer(line):
            touched = True
            if marker[1] == "BEGIN":
                regions.begin(number)
                pieces.append(line[position : marker.start()])
            else:
                regions.end(number)
            position = marker.end()
        if not regions.opened_at:
            pieces.append(line[position:])
        text = "".join(pieces)
        if text.strip() or not touched:
            kept.append(text)
    regions.finish()
    return "\n".join(kept)


# --- cells sourced from modules ---------------------------------------------------------------------------


def source_refs(source: str) -> list[tuple[str, str]]:
    """The ``(path, name)`` pairs of the leading ``# SOURCE:`` lines of a code cell."""
    refs = []
    for line in source.split("\n"):
        if not line.startswith("# SOURCE:"):
            break
        match = _SOURCE.match(line)
        if match is None:
            raise NotebookBuildError(f"malformed line {line!r}: write '# SOURCE: path/to/module.py::name'")
        refs.append((match["path"], match["name"]))
    return refs


def _defines(node: ast.stmt, name: str) -> bool:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return node.name == name
    if isinstance(node, ast.Assign):
        return any(isinstance(target, ast.Name) and target.id == name for target in node.targets)
    if isinstance(node, ast.AnnAssign):
        return isinstance(node.target, ast.Name) and node.target.id == name
    return False


def extract_definition(text: str, name: str, origin: str = "<module>") -> str:
    """Source text of the top-level function, class or assignment ``name``, decorators included.

    Comment lines indented under a ``def`` or ``class`` after its last statement (``# END SOLUTION``) belong to it.
    """
    tree = ast.parse(text, filename=origin)
    lines = text.split("\n")
    nodes = [node for node in tree.body if _defines(node, name)]
    if not nodes:
        raise NotebookBuildError(f"{origin}: no top-level function, class or assignment named {name!r}")
    node = nodes[-1]
    start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    end = node.end_lineno or node.lineno
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        probe = end
        while probe < len(lines):
            line = lines[probe]
            indented_comment = line.lstrip().startswith("#") and len(line) - len(line.lstrip()) > node.col_offset
            if line.strip() and not indented_comment:
                break
            probe += 1
            if line.strip():
                end = probe
    return "\n".join(lines[start - 1 : end])


def refresh_source_cell(source: str, root: Path, where: str = "<cell>") -> str:
    """The cell with its body regenerated from the modules its ``# SOURCE:`` lines name (unchanged if none)."""
    try:
        refs = source_refs(source)
    except NotebookBuildError as error:
        raise NotebookBuildError(f"{where}: {error}") from None
    if not refs:
        return source
    bodies = []
    for path, name in refs:
        module = root / path
        if Path(path).is_absolute() or ".." in Path(path).parts or not module.is_file():
            raise NotebookBuildError(f"{where}: no module {path} under {root}")
        try:
            bodies.append(extract_definition(module.read_text(encoding="utf-8"), name, path))
        except (NotebookBuildError, SyntaxError) as error:
            raise NotebookBuildError(f"{where}: {error}") from None
    header = "\n".join(f"# SOURCE: {path}::{name}" for path, name in refs)
    return header + "\n" + "\n\n\n".join(bodies)


# --- stretch sections --------------------------------------------------------------------------------------


def is_stretch(cell: nbformat.NotebookNode) -> bool:
    """Whether the cell belongs to a stretch section (its ``"course": {"stretch": true}`` metadata)."""
    return bool(cell.get("metadata", {}).get("course", {}).get(STRETCH, False))


def sections(path: Path, cell_type: str) -> list[tuple[bool, str]]:
    """(stretch, source) of each cell of ``cell_type`` (``"code"``, ``"markdown"``) in the notebook at ``path``."""
    cells = nbformat.read(path, as_version=4).cells
    return [(is_stretch(cell), cell.source) for cell in cells if cell.cell_type == cell_type]


def _set_stretch(cell: nbformat.NotebookNode, stretch: bool) -> None:
    course = cell.metadata.get("course", {})
    if stretch:
        cell.metadata["course"] = {**course, STRETCH: True}
    elif STRETCH in course:
        course = {key: value for key, value in course.items() if key != STRETCH}
        if course:
            cell.metadata["course"] = course
        else:
            del cell.metadata["course"]


def mark_stretch(nb: nbformat.NotebookNode, stem: str) -> nbformat.NotebookNode:
    """Mark the cells of stretch sections (see the module docstring) and unmark every other cell, in place.

    A section starts at a markdown cell whose first line is a level-2 heading; one that starts in the middle of a
    cell cannot be split from the text above it and stops the build when it changes from core to stretch."""
    stretch = False
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            lines = cell.source.split("\n")
            for number, line in enumerate(lines):
                heading = _SECTION.match(line)
                if heading is None:
                    continue
                starts = _STRETCH_TITLE.match(heading["title"]) is not None
                if number > 0 and starts != stretch:
                    raise NotebookBuildError(
                        f"{_where(stem, index, cell)}, line {number + 1}: a stretch section begins or ends inside "
                        "the cell: start the heading in a markdown cell of its own"
                    )
                stretch = starts
        _set_stretch(cell, stretch)
    return nb


# --- notebooks ---------------------------------------------------------------------------------------------


def _where(stem: str, index: int, cell: nbformat.NotebookNode) -> str:
    return f"{SOLUTIONS}/{stem}.ipynb, cell {index} (id {cell.get('id', '?')})"


def clean(nb: nbformat.NotebookNode, stem: str) -> nbformat.NotebookNode:
    """A copy as nbformat 4.5 with no outputs, no execution counts and a stable id on every cell."""
    nb = copy.deepcopy(nb)
    nb.nbformat, nb.nbformat_minor = 4, max(5, nb.get("nbformat_minor", 5))
    seen: set[str] = set()
    for index, cell in enumerate(nb.cells):
        if "id" not in cell:
            digest = hashlib.sha1(f"{stem}/{index}/{cell.source}".encode()).hexdigest()
            cell.id = next(digest[i : i + 8] for i in range(0, 33) if digest[i : i + 8] not in seen)
        if cell.id in seen:
            raise NotebookBuildError(f"{_where(stem, index, cell)}: duplicate cell id")
        seen.add(cell.id)
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        else:
            cell.pop("outputs", None)
            cell.pop("execution_count", None)
    return nb


def solution_notebook(nb: nbformat.NotebookNode, stem: str, root: Path = REPO_ROOT) -> nbformat.NotebookNode:
    """The solution notebook as build stores it: cleaned, stretch sections marked, module-sourced cells refreshed."""
    nb = mark_stretch(clean(nb, stem), stem)
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            cell.source = refresh_source_cell(cell.source, root, _where(stem, index, cell))
    return nb


def reveal_cell(stem: str, cell_id: str, stretch: bool = False) -> nbformat.NotebookNode:
    """The collapsed cell that shows the solution of cell ``cell_id`` when run (in a stretch section if ``stretch``)."""
    source = (
        "# Shows the solution of the cell above (your code there stays as it is).\n"
        "from utilities.notebooks import reveal\n\n"
        f'reveal("{stem}", "{cell_id}")'
    )
    cell = nbformat.v4.new_code_cell(source, metadata={"jupyter": {"source_hidden": True}, "tags": [REVEAL_TAG]})
    cell.id = f"{cell_id[:57]}-reveal"
    _set_stretch(cell, stretch)
    return cell


def exercise_notebook(solution: nbformat.NotebookNode, stem: str) -> nbformat.NotebookNode:
    """The exercise generated from a (cleaned) solution notebook."""
    exercise = copy.deepcopy(solution)
    exercise.cells = []
    exercise.metadata.setdefault("course", {})["exercise_of"] = f"{SOLUTIONS}/{stem}.ipynb"
    for index, cell in enumerate(solution.cells):
        cell = copy.deepcopy(cell)
        where = _where(stem, index, cell)
        if cell.cell_type == "markdown":
            cell.source = strip_markdown(cell.source, where)
        if cell.cell_type != "code":
            exercise.cells.append(cell)
            continue
        source = "\n".join(cell.source.split("\n")[len(source_refs(cell.source)) :])
        cell.source, has_solution = strip_code(source, where)
        tags = cell.metadata.get("tags", [])
        if RAISES_TAG in tags:
            cell.metadata.tags = [tag for tag in tags if tag != RAISES_TAG] + ["raises-exception"]
        exercise.cells.append(cell)
        if has_solution and PREDICTION_TAG not in tags:
            exercise.cells.append(reveal_cell(stem, cell.id, is_stretch(cell)))
    return exercise


def dumps(nb: nbformat.NotebookNode) -> str:
    """Deterministic JSON text of a notebook (sorted keys, one-space indent, final newline)."""
    nbformat.validate(nb)
    return nbformat.writes(nb, version=nbformat.NO_CONVERT) + "\n"


def read_solution(path: Path, root: Path) -> nbformat.NotebookNode:
    """A solution notebook as stored: unlike ``nbformat.read``, no random ids for missing or duplicate ones."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise NotebookBuildError(f"{path.relative_to(root)}: cannot read it ({error})") from None
    if not isinstance(data, dict) or data.get("nbformat") != 4:
        raise NotebookBuildError(f"{path.relative_to(root)}: not a notebook of nbformat 4")
    return nbformat.v4.nbjson.JSONReader().to_notebook(data)


# --- exercises filled with their solutions (the run-through, the ledger) ------------------------------------


def filled_cells(stem: str, root: Path = REPO_ROOT, core: bool = False) -> list[tuple[str, str, bool]]:
    """The code cells of ``notebooks/<stem>.ipynb`` as ``(id, source, is_exercise)``, with the solution's source
    in every cell (reveal cells left out; the solution's prediction cells hold its predictions, not exercises;
    with ``core``, the cells of stretch sections left out too). Raises if a cell of the exercise has no solution
    twin."""
    exercise = nbformat.read(root / EXERCISES / f"{stem}.ipynb", as_version=4)
    solution = {cell.get("id"): cell for cell in read_solution(root / SOLUTIONS / f"{stem}.ipynb", root).cells}
    cells = []
    for cell in exercise.cells:
        if cell.cell_type != "code" or REVEAL_TAG in cell.metadata.get("tags", []) or (core and is_stretch(cell)):
            continue
        twin = solution.get(cell.get("id"))
        if twin is None:
            raise ValueError(
                f"{EXERCISES}/{stem}.ipynb: cell {cell.get('id')} has no twin in {SOLUTIONS}/: rebuild "
                "the exercises (python -m utilities.notebooks build)"
            )
        is_exercise = "# BEGIN SOLUTION" in twin.source and PREDICTION_TAG not in cell.metadata.get("tags", [])
        cells.append((cell.id, twin.source, is_exercise))
    return cells


def edited(source: str) -> str:
    """``source`` with :data:`EDIT_LINE` added at the top of its first solution region."""
    lines = source.split("\n")
    for number, line in enumerate(lines):
        match = _BEGIN.match(line)
        if match:
            return "\n".join([*lines[: number + 1], match["indent"] + EDIT_LINE, *lines[number + 1 :]])
    raise ValueError("no solution region to edit")


def is_prediction(source: str) -> bool:
    """Whether a code cell asks for a prediction (its first comment starts "Your prediction"): the cell after it is a
    measurement, not a check, and an edit of it builds nothing."""
    first = next((line for line in source.split("\n") if line.strip() and not _SOURCE.match(line)), "")
    return first.strip().lower().startswith(PREDICTION_LINE)


def defined_names(source: str) -> set[str]:
    """The names a cell defines at its top level (functions, classes, assigned names); empty if it does not parse."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def edit_runs(cells: list[tuple[str, str, bool]]) -> list[list[str]]:
    """For each exercise cell but a prediction (:func:`is_prediction`): its edited source, then its check, as an
    attendee who changed it runs them: the first later cell that is neither an exercise nor a prediction and uses a
    name the exercise defines (3b's products kernel is checked after the epilogue's exercise and its check), else
    the cell after it unless that is an exercise or a prediction (an exercise that checks itself, as 4a's do). The
    cells between already ran, top to bottom."""
    runs = []
    for index, (_, source, is_exercise) in enumerate(cells):
        if not is_exercise or is_prediction(source):
            continue
        names = defined_names(source)
        later = [(text, ex) for _, text, ex in cells[index + 1 :] if not is_prediction(text)]
        check = next((text for text, ex in later if not ex and names & _used_names(text)), None)
        if check is None and index + 1 < len(cells) and not cells[index + 1][2]:
            after = cells[index + 1][1]
            check = None if is_prediction(after) else after
        runs.append([edited(source)] + ([check] if check is not None else []))
    return runs


def _used_names(source: str) -> set[str]:
    try:
        return {n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name)}
    except SyntaxError:
        return set()


def filled_notebook(
    stem: str, root: Path = REPO_ROOT, core: bool = False
) -> tuple[nbformat.NotebookNode, list[list[str]]]:
    """``notebooks/<stem>.ipynb`` with the solution's code in every code cell and no reveal cells, and the edit
    runs (see :func:`edit_runs`); with ``core``, without the cells of its stretch sections."""
    cells = filled_cells(stem, root, core)
    nb = nbformat.read(root / EXERCISES / f"{stem}.ipynb", as_version=4)
    source = {cell_id: text for cell_id, text, _ in cells}
    kept = []
    for cell in nb.cells:
        if core and is_stretch(cell):
            continue
        if cell.cell_type == "code":
            if cell.get("id") not in source:
                continue  # a reveal cell
            cell.source = source[cell.id]
        kept.append(cell)
    nb.cells = kept
    return nb, edit_runs(cells)


def plan(root: Path = REPO_ROOT) -> tuple[dict[Path, str], list[Path]]:
    """What build writes (path -> text) and the exercise notebooks it deletes (no solution left)."""
    root = Path(root)
    texts: dict[Path, str] = {}
    stems = set()
    for path in sorted((root / SOLUTIONS).glob("*.ipynb")):
        stems.add(path.stem)
        solution = solution_notebook(read_solution(path, root), path.stem, root)
        texts[path] = dumps(solution)
        texts[root / EXERCISES / path.name] = dumps(exercise_notebook(solution, path.stem))
    orphans = [path for path in sorted((root / EXERCISES).glob("*.ipynb")) if path.stem not in stems]
    readme = root / README
    if readme.is_file() and AGENDA_BEGIN in (text := readme.read_text(encoding="utf-8")):
        texts[readme] = with_agenda(text, agenda(root))
    return texts, orphans


def build(root: Path = REPO_ROOT) -> list[str]:
    """Refresh ``solutions/`` and write ``notebooks/``; the lines say what changed."""
    root = Path(root)
    texts, orphans = plan(root)
    changes = []
    for path, text in texts.items():
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            changes.append(f"wrote {path.relative_to(root)}")
    for path in orphans:
        path.unlink()
        changes.append(f"removed {path.relative_to(root)} (no solution notebook)")
    return changes


def check(root: Path = REPO_ROOT) -> list[str]:
    """Every file out of sync with what build would write, one line each (empty when all are in sync)."""
    root = Path(root)
    try:
        texts, orphans = plan(root)
    except NotebookBuildError as error:
        return [f"build error: {error}"]
    problems = []
    for path, text in texts.items():
        name = path.relative_to(root)
        if not path.is_file():
            problems.append(f"{name}: missing")
        elif path.read_text(encoding="utf-8") != text:
            kind = {SOLUTIONS: "stale (outputs, ids, stretch marks or SOURCE cells)", README: "agenda out of date"}.get(
                name.parts[0], "out of date"
            )
            problems.append(f"{name}: {kind}")
    problems += [f"{path.relative_to(root)}: has no solution notebook" for path in orphans]
    return problems


# --- reveal on demand ----------------------------------------------------------------------------------------


def solution_source(notebook: str, cell_id: str, root: Path | None = None) -> str:
    """Source of cell ``cell_id`` in ``solutions/<notebook>.ipynb`` (of this repository unless ``root``)."""
    path = Path(root or REPO_ROOT) / SOLUTIONS / f"{notebook}.ipynb"
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.get("id") == cell_id:
            return cell.source
    raise KeyError(f"{path} has no cell with id {cell_id!r}: rebuild with python -m utilities.notebooks build")


def reveal(notebook: str, cell_id: str) -> None:
    """Show the solution of one exercise cell, highlighted; never touches the attendee's cells."""
    source = solution_source(notebook, cell_id)
    title = f"Solution ({SOLUTIONS}/{notebook}.ipynb):"
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except ImportError:
        shell = None
    if shell is None:
        print(f"{title}\n\n{source}")
        return
    from IPython.display import Markdown, display

    longest = max((len(run) for run in re.findall(r"`+", source)), default=0)
    fence = "`" * max(3, longest + 1)
    display(Markdown(f"**{title}**\n\n{fence}python\n{source}\n{fence}"))


# --- the day's clock ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Clock:
    """A notebook's hands-on time, as its first cell states it (see :data:`CLOCK`)."""

    stem: str
    core_path: bool  # on the core path, or optional
    minutes: int
    core: str  # what the minutes cover ("sections 1-3", "all sections")
    stretch_minutes: int = 0
    stretch: str = ""  # the stretch sections, "" if none


def parse_clock(stem: str, text: str) -> Clock:
    """The clock of a notebook whose first cell is ``text``; raises naming the form when there is not one."""
    found = list(CLOCK.finditer(text))
    if len(found) != 1:
        raise NotebookBuildError(
            f"{SOLUTIONS}/{stem}.ipynb, cell 0: {len(found)} clock lines; write one, e.g. '*Core path: 25 min "
            "hands-on, sections 1-3. Stretch: 10 min, section 4 (a lever).*' or '*Optional: 40 min hands-on, not on "
            "the core path.*'"
        )
    m = found[0]
    words = {key: " ".join((m[key] or "").split()) for key in ("core", "stretch")}  # a line may break anywhere
    core_path, stretch_minutes = m["path"] == "Core path", int(m["stretch_minutes"] or 0)
    return Clock(stem, core_path, int(m["minutes"]), words["core"], stretch_minutes, words["stretch"])


def clocks(root: Path = REPO_ROOT) -> dict[str, Clock]:
    """Every solution notebook's clock, by stem."""
    found = {}
    for path in sorted((Path(root) / SOLUTIONS).glob("*.ipynb")):
        cells = read_solution(path, Path(root)).cells
        found[path.stem] = parse_clock(path.stem, cells[0].source if cells else "")
    return found


def _duration(minutes: int) -> str:
    hours, rest = divmod(minutes, 60)
    return f"{hours} h {rest} min" if hours else f"{rest} min"


def agenda(root: Path = REPO_ROOT) -> str:
    """The README's agenda table: the core path in the order of :data:`DAY`, its total, then the optional notebooks.
    Raises when the clocks and :data:`DAY` disagree on which notebooks are core."""
    found = clocks(root)
    core = sorted(stem for stem, c in found.items() if c.core_path)
    if sorted(DAY) != core:
        raise NotebookBuildError(
            f"the first cells put {core} on the core path, utilities.notebooks.DAY lists {sorted(DAY)}"
        )
    rows = ["| order | notebook | hands-on | core | stretch |", "| ---: | --- | ---: | --- | --- |"]
    for order, stem in enumerate(DAY, start=1):
        c = found[stem]
        stretch = f"{c.stretch_minutes} min: {c.stretch}" if c.stretch else ""
        rows.append(f"| {order} | `{stem}` | {c.minutes} min | {c.core} | {stretch} |".replace("|  |", "| |"))
    rows.append(f"| | **core path** | **{_duration(sum(found[stem].minutes for stem in DAY))}** | | |")
    for stem, c in found.items():
        if not c.core_path:
            rows.append(f"| | `{stem}` | {c.minutes} min | optional: {c.core} | |")
    return "\n".join(rows)


def with_agenda(readme: str, table: str) -> str:
    """``readme`` with ``table`` between the agenda markers (unchanged if it has none)."""
    begin, end = readme.find(AGENDA_BEGIN), readme.find(AGENDA_END)
    if begin < 0 and end < 0:
        return readme
    if begin < 0 or end < begin:
        raise NotebookBuildError(f"{README}: the agenda markers are unpaired or out of order")
    return readme[: begin + len(AGENDA_BEGIN)] + "\n\n" + table + "\n\n" + readme[end:]


# --- command line ------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m utilities.notebooks", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["build", "check", "agenda"])
    parser.add_argument("--root", type=Path, default=REPO_ROOT, help="repository root (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.command == "agenda":
        try:
            print(agenda(args.root))
        except NotebookBuildError as error:
            print(f"agenda error: {error}", file=sys.stderr)
            return 1
        return 0
    if args.command == "build":
        try:
            changes = build(args.root)
        except NotebookBuildError as error:
            print(f"build error: {error}", file=sys.stderr)
            return 1
        print("\n".join(changes) if changes else "notebooks are up to date")
        return 0
    problems = check(args.root)
    if problems:
        print("Out of sync (fix with: python -m utilities.notebooks build):", file=sys.stderr)
        print("\n".join(f"  {line}" for line in problems), file=sys.stderr)
        return 1
    print("notebooks are in sync with solutions")
    return 0


if __name__ == "__main__":
    sys.exit(main())

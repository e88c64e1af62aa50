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
The way back, for the run-through and the GPU ledger: :func:`filled_notebook` is an exercise with its solutions
filled in, and :func:`edit_runs` the edits that rebuild each exercise's kernel.

    python -m utilities.notebooks build   # refresh solutions/, write notebooks/
    python -m utilities.notebooks check   # exit 1 listing every file that build would change
"""

from __future__ import annotations

import argparse
import ast
import copy
import hashlib
import json
import re
import sys
from pathlib import Path

import nbformat

from .checker import PLACEHOLDER

REPO_ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = "solutions"
EXERCISES = "notebooks"
REVEAL_TAG = "reveal"
PREDICTION_TAG = "prediction"  # a cell where the attendee writes a prediction: no reveal cell after it
RAISES_TAG = "exercise-raises"
EDIT_LINE = "_attendee_edit = 0  # an edit: new code to build, the same result"

_BEGIN = re.compile(r"^(?P<indent>\s*)# BEGIN SOLUTION\s*$")
_END = re.compile(r"^\s*# END SOLUTION\s*$")
_ANY_MARKER = re.compile(r"#\s*(BEGIN|END)\s*SOLUTION", re.IGNORECASE)
_SKELETON = re.compile(r"^(?P<indent>[ \t]*)# SKELETON:(?: (?P<code>.*))?$")
_SOURCE = re.compile(r"^# SOURCE: (?P<path>[^\s:]+)::(?P<name>[A-Za-z_]\w*)\s*$")
_MD_MARKER = re.compile(r"<!--\s*(BEGIN|END) SOLUTION\s*-->")


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
    """The solution notebook as build stores it: cleaned, module-sourced cells refreshed."""
    nb = clean(nb, stem)
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            cell.source = refresh_source_cell(cell.source, root, _where(stem, index, cell))
    return nb


def reveal_cell(stem: str, cell_id: str) -> nbformat.NotebookNode:
    """The collapsed cell that shows the solution of cell ``cell_id`` when run."""
    source = (
        "# Shows the solution of the cell above (your code there stays as it is).\n"
        "from utilities.notebooks import reveal\n\n"
        f'reveal("{stem}", "{cell_id}")'
    )
    cell = nbformat.v4.new_code_cell(source, metadata={"jupyter": {"source_hidden": True}, "tags": [REVEAL_TAG]})
    cell.id = f"{cell_id[:57]}-reveal"
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
            exercise.cells.append(reveal_cell(stem, cell.id))
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


def filled_cells(stem: str, root: Path = REPO_ROOT) -> list[tuple[str, str, bool]]:
    """The code cells of ``notebooks/<stem>.ipynb`` as ``(id, source, is_exercise)``, with the solution's source
    in every cell (reveal cells left out; the solution's prediction cells hold its predictions, not exercises).
    Raises if a cell of the exercise has no solution twin."""
    exercise = nbformat.read(root / EXERCISES / f"{stem}.ipynb", as_version=4)
    solution = {cell.get("id"): cell for cell in read_solution(root / SOLUTIONS / f"{stem}.ipynb", root).cells}
    cells = []
    for cell in exercise.cells:
        if cell.cell_type != "code" or REVEAL_TAG in cell.metadata.get("tags", []):
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


def edit_runs(cells: list[tuple[str, str, bool]]) -> list[list[str]]:
    """For each exercise cell: its edited source, then the cell after it (its check) unless that is an exercise."""
    runs = []
    for index, (_, source, is_exercise) in enumerate(cells):
        if is_exercise:
            after = cells[index + 1] if index + 1 < len(cells) else None
            runs.append([edited(source)] + ([after[1]] if after and not after[2] else []))
    return runs


def filled_notebook(stem: str, root: Path = REPO_ROOT) -> tuple[nbformat.NotebookNode, list[list[str]]]:
    """``notebooks/<stem>.ipynb`` with the solution's code in every code cell and no reveal cells, and the edit
    runs (see :func:`edit_runs`)."""
    cells = filled_cells(stem, root)
    nb = nbformat.read(root / EXERCISES / f"{stem}.ipynb", as_version=4)
    source = {cell_id: text for cell_id, text, _ in cells}
    kept = []
    for cell in nb.cells:
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
            kind = "stale (outputs, ids or SOURCE cells)" if name.parts[0] == SOLUTIONS else "out of date"
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


# --- command line ------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m utilities.notebooks", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["build", "check"])
    parser.add_argument("--root", type=Path, default=REPO_ROOT, help="repository root (default: %(default)s)")
    args = parser.parse_args(argv)
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

"""The order the CPU suite runs its files in: the longest first, so that the processes of ``./course test``
(pytest-xdist, ``--dist loadfile``) finish together instead of one waiting alone for the last long file.

``tests/file_seconds.json`` holds each file's seconds in a full run (``python tools/test_file_seconds.py
JUNIT.xml`` writes it from ``pytest --junitxml``); a file it does not list counts as :data:`UNKNOWN_S`. Only the
order of whole files changes: a file's tests, and a notebook's cells, keep theirs.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

SECONDS_FILE = Path(__file__).resolve().parent.parent / "tests" / "file_seconds.json"
UNKNOWN_S = 5.0  # a file missing from the record: a typical small one


def file_of(nodeid: str) -> str:
    """The file part of a pytest node id: ``tests/test_x.py::test_y[1]`` -> ``tests/test_x.py``."""
    return nodeid.split("::", 1)[0]


def load(path: Path = SECONDS_FILE) -> dict[str, float]:
    """The recorded seconds per file, or {} where there is no record (or an unreadable one)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}


def longest_first(nodeids: Sequence[str], seconds: dict[str, float]) -> list[int]:
    """The positions of ``nodeids`` in the order to run them: files by recorded seconds, longest first (ties and
    unknown files in the order collected), each file's items in their own order."""
    first_seen: dict[str, int] = {}
    for i, nodeid in enumerate(nodeids):
        first_seen.setdefault(file_of(nodeid), i)

    def key(i: int) -> tuple[float, int, int]:
        file = file_of(nodeids[i])
        return (-seconds.get(file, UNKNOWN_S), first_seen[file], i)

    return sorted(range(len(nodeids)), key=key)


def seconds_from_junit(path: Path) -> dict[str, float]:
    """Seconds per file (setup, call and teardown of its tests) in a ``pytest --junitxml`` report. A test's
    classname is its file's dotted path and then any class (``tests.test_x.TestY``); a notebook's ends in ``.ipynb``
    (``notebooks.3a_ozaki_numerics.ipynb``)."""
    per_file: dict[str, float] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("classname", "")
        if name.endswith(".ipynb"):
            folder, _, stem = name[: -len(".ipynb")].partition(".")
            file = f"{folder}/{stem}.ipynb"
        else:
            parts = name.split(".")
            cut = next((i for i, part in enumerate(parts) if part.startswith("test_")), len(parts) - 1)
            file = "/".join(parts[: cut + 1]) + ".py"
        per_file[file] = per_file.get(file, 0.0) + float(case.get("time", 0.0))
    return {file: round(s, 1) for file, s in sorted(per_file.items(), key=lambda kv: -kv[1])}

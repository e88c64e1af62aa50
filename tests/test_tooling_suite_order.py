"""The suite's file order: longest files first, each file's tests (a notebook's cells) in their own order."""

from __future__ import annotations

from pathlib import Path

from utilities import suite_order

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="5">
<testcase classname="tests.test_a" name="test_one" time="1.5"/>
<testcase classname="tests.test_a.TestGroup" name="test_two" time="2.0"/>
<testcase classname="tests.test_b" name="test_three" time="0.25"/>
<testcase classname="notebooks.3a_ozaki_numerics.ipynb" name="Cell 0" time="4.0"/>
<testcase classname="notebooks.3a_ozaki_numerics.ipynb" name="Cell 1" time="6.0"/>
</testsuite></testsuites>
"""


def test_seconds_are_summed_per_file_and_notebooks_keep_their_path(tmp_path: Path) -> None:
    report = tmp_path / "suite.xml"
    report.write_text(JUNIT)
    assert suite_order.seconds_from_junit(report) == {
        "notebooks/3a_ozaki_numerics.ipynb": 10.0,
        "tests/test_a.py": 3.5,
        "tests/test_b.py": 0.2,
    }


def test_longest_files_first_each_file_in_its_own_order() -> None:
    ids = [
        "tests/test_a.py::test_1",
        "tests/test_b.py::test_1",
        "tests/test_a.py::test_2",
        "notebooks/x.ipynb::Cell 0",
        "notebooks/x.ipynb::Cell 1",
        "tests/test_new.py::test_1",
    ]
    seconds = {"tests/test_a.py": 1.0, "tests/test_b.py": 30.0, "notebooks/x.ipynb": 12.0}
    order = [ids[i] for i in suite_order.longest_first(ids, seconds)]
    assert order == [
        "tests/test_b.py::test_1",
        "notebooks/x.ipynb::Cell 0",
        "notebooks/x.ipynb::Cell 1",
        "tests/test_new.py::test_1",  # not recorded: UNKNOWN_S, between 12 s and 1 s
        "tests/test_a.py::test_1",
        "tests/test_a.py::test_2",
    ]
    assert suite_order.longest_first(ids, {}) == [0, 2, 1, 3, 4, 5]  # no record: files in the order collected


def test_the_record_names_files_that_exist_and_a_missing_record_is_no_order(tmp_path: Path) -> None:
    recorded = suite_order.load()
    assert recorded, "tests/file_seconds.json is missing or empty: python tools/test_file_seconds.py JUNIT.xml"
    root = suite_order.SECONDS_FILE.parent.parent
    gone = [file for file in recorded if not (root / file).exists()]
    assert len(gone) <= len(recorded) // 10, f"tests/file_seconds.json names files that are gone: {gone}"
    assert suite_order.load(tmp_path / "none.json") == {}
    (tmp_path / "bad.json").write_text("not json")
    assert suite_order.load(tmp_path / "bad.json") == {}

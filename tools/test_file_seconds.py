"""Writes tests/file_seconds.json from a full CPU run's JUnit report, for the suite's file order
(``utilities.suite_order``)::

    ./course test --junitxml=/tmp/suite.xml && .venv-test/bin/python tools/test_file_seconds.py /tmp/suite.xml
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from utilities import suite_order  # noqa: E402


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("::")[0].strip())
    parser.add_argument("junit", type=Path, help="the JUnit report of a full CPU run (pytest --junitxml=...)")
    args = parser.parse_args(argv)
    if not args.junit.is_file():
        parser.error(f"{args.junit}: no such file (run ./course test --junitxml={args.junit} first)")
    seconds = suite_order.seconds_from_junit(args.junit)
    suite_order.SECONDS_FILE.write_text(json.dumps(seconds, indent=1) + "\n", encoding="utf-8")
    print(f"{suite_order.SECONDS_FILE}: {len(seconds)} files, {sum(seconds.values()):.0f} s in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

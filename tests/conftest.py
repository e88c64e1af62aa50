"""Fixtures shared by the test modules."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


@pytest.fixture
def define(tmp_path) -> Callable[[str, str], Any]:
    """``define(source, name)``: the function ``name`` from ``source``, compiled from a real file.

    The checkers read an exercise's source to tell a placeholder from a wrong answer, so it must live in a file.
    """

    def make(source: str, name: str) -> Any:
        path = tmp_path / f"{name}.py"
        path.write_text(source)
        namespace: dict[str, Any] = {}
        exec(compile(source, str(path), "exec"), namespace)
        return namespace[name]

    return make

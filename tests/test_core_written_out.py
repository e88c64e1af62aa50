"""``utilities.written_out``: a loop over the moduli written out computes what the loop did, says where it stands
in the source, and refuses what it cannot write out."""

from __future__ import annotations

import inspect
import traceback

import pytest

from utilities.written_out import written_out, written_out_source

TABLE = (3.0, 5.0, 7.0, 11.0)


def _factory(count: int, written: bool = True):
    N, P = count, TABLE[:count]
    wrap = written_out(N) if written else (lambda fn: fn)

    @wrap
    def weighted(x):
        total = 0.0
        for t in range(N):  # the loop the decorator writes out
            total += x * P[t] + t
        return total

    return weighted


def test_the_written_out_function_computes_what_the_loop_did():
    for count in (1, 3, 4):
        looped, written = _factory(count, written=False), _factory(count)
        assert written is not looped and written.__wrapped__.__code__ is not written.__code__
        for x in (0.0, 1.5, -2.25):
            assert written(x) == looped(x)
    source = written_out_source(_factory(3).__wrapped__, 3)
    assert "range(N)" not in source and source.count("total += x * P[") == 3 and "P[2]" in source


def test_it_keeps_the_name_the_file_and_the_lines():
    fn = _factory(2)
    assert fn.__qualname__ == "_factory.<locals>.weighted" and fn.__module__ == __name__
    assert fn.__code__.co_filename == __file__
    lines = inspect.getsource(_factory).splitlines()
    first = _factory.__code__.co_firstlineno
    try:
        fn(None)  # None * 3.0 raises inside the written-out body
    except TypeError as error:
        line = traceback.extract_tb(error.__traceback__)[-1].lineno
        assert "total += x * P[t] + t" in lines[line - first]
    else:
        raise AssertionError("None * 3.0 did not raise")


def test_it_refuses_what_it_cannot_write_out():
    N = 2

    def with_break(x):
        for t in range(N):
            if x > t:
                break
        return x

    def no_loop(x):
        return x + N

    with pytest.raises(ValueError, match="break, continue or else"):
        written_out(N)(with_break)
    with pytest.raises(ValueError, match="no 'for ... in range"):
        written_out(N)(no_loop)
    with pytest.raises(ValueError, match="must close over N = 3"):
        written_out(3)(no_loop)
    with pytest.raises(TypeError, match="a Python function"):
        written_out(N)(len)


def test_a_function_without_source_keeps_its_loop_and_says_so():
    scope: dict = {}
    source = "def make(N):\n def f():\n  s = 0\n  for t in range(N):\n   s += t\n  return s\n return f"
    exec(source, scope)  # noqa: S102 - no file, no linecache entry: no source to read
    fn = scope["make"](4)
    with pytest.warns(UserWarning, match="its loops stay loops"):
        kept = written_out(4)(fn)
    assert kept is fn and kept() == 6

"""``machinery.streams.Beside`` on a model of CUDA's stream semantics: in-order streams, events that capture a stream's
position when recorded, waits that take an event's state when queued. The model says, for each piece of work, which
others must finish before it starts."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from utilities.machinery.streams import Beside


class Stream:
    def __init__(self, cuda: Cuda, name: str = "side", non_blocking: bool = True):
        self.cuda, self.name = cuda, name
        self.ops: list[tuple[str | None, set[str]]] = []  # each op's work (None: a wait), and what precedes its end

    def after(self) -> set[str]:
        return set(self.ops[-1][1]) if self.ops else set()

    def launch(self, work: str) -> None:
        self.ops.append((work, self.after() | {work}))

    def wait_event(self, event: Event) -> None:
        self.ops.append((None, self.after() | event.captured))

    def __enter__(self) -> Stream:
        self.cuda.current.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self.cuda.current.pop()


class Event:
    def __init__(self, disable_timing: bool = False):
        self.captured: set[str] = set()

    def record(self, stream: Stream) -> None:
        self.captured = stream.after()


class Cuda:
    def __init__(self) -> None:
        self.current = [Stream(self, "main")]
        self.streams = list(self.current)  # every stream made, the caller's first
        self.Event = Event

    def Stream(self, non_blocking: bool = False) -> Stream:  # noqa: N802 (CuPy's name)
        self.streams.append(Stream(self, non_blocking=non_blocking))
        return self.streams[-1]

    def get_current_stream(self) -> Stream:
        return self.current[-1]

    def launch(self, work: str) -> None:
        self.get_current_stream().launch(work)

    def needs(self, work: str) -> set[str]:
        """What must finish before ``work`` starts, on either stream."""
        for stream in self.streams:
            for label, done in stream.ops:
                if label == work:
                    return done - {work}
        raise KeyError(work)


@pytest.fixture
def cuda() -> Cuda:
    return Cuda()


def test_work_beside_starts_after_what_was_queued_and_overlaps_what_comes_next(cuda):
    beside = Beside(SimpleNamespace(cuda=cuda))
    cuda.launch("before")
    with beside.follow() as stream:
        assert cuda.get_current_stream() is stream is beside.stream
        cuda.launch("beside")
    assert cuda.get_current_stream().name == "main"
    cuda.launch("meanwhile")
    beside.join()
    cuda.launch("after")
    assert cuda.needs("beside") == {"before"}
    assert cuda.needs("meanwhile") == {"before"}  # free to run beside "beside"
    assert cuda.needs("after") == {"before", "beside", "meanwhile"}


def test_two_events_serve_every_call_since_each_wait_follows_its_record(cuda):
    """The panels' pattern: a reconstruction beside each panel's GEMMs, each after its own panel's GEMMs only."""
    beside = Beside(SimpleNamespace(cuda=cuda))
    for q in range(3):
        cuda.launch(f"gemms {q}")
        with beside.follow():
            cuda.launch(f"reconstruct {q}")
    beside.join()
    cuda.launch("next call")
    for q in range(3):
        assert cuda.needs(f"reconstruct {q}") == {f"gemms {p}" for p in range(q + 1)} | {
            f"reconstruct {p}" for p in range(q)
        }
    assert cuda.needs("gemms 2") == {"gemms 0", "gemms 1"}  # no GEMM waits for a reconstruction
    assert cuda.needs("next call") == {f"{w} {q}" for w in ("gemms", "reconstruct") for q in range(3)}


def test_a_join_orders_only_what_comes_after_it(cuda):
    """The choice's statistics: B's rows beside A's columns, then each side needs the other's first pass."""
    beside = Beside(SimpleNamespace(cuda=cuda))
    with beside.follow():
        cuda.launch("b rows")
    cuda.launch("a columns")
    beside.join()
    with beside.follow():
        cuda.launch("b columns")
    cuda.launch("a rows")
    beside.join()
    assert cuda.needs("a columns") == set()
    assert cuda.needs("a rows") == {"a columns", "b rows"}
    assert cuda.needs("b columns") == {"a columns", "b rows"}


def test_the_choices_weighted_passes_wait_for_the_other_operands_norms_and_nothing_more(cuda, monkeypatch):
    """``GemmStatistics.compute`` with ``concurrent``: each weighted pass after the weights it reads, the two
    operands' passes otherwise free to overlap, and the caller's next work after all four."""
    import numpy as np

    from utilities.precision_gpu import GemmStatistics

    stats = GemmStatistics(64, 48, 32, xp=np)
    stats.concurrent, stats.beside = True, Beside(SimpleNamespace(cuda=cuda))
    a, b = np.zeros((64, 32)), np.zeros((32, 48))
    operand = {id(a): "a", id(b): "b"}
    monkeypatch.setattr(stats, "_col_chunks", lambda x, *args, **kw: cuda.launch(f"columns of {operand[id(x)]}"))
    monkeypatch.setattr(stats, "_rows", lambda x, *args, **kw: cuda.launch(f"rows of {operand[id(x)]}"))
    monkeypatch.setattr(stats, "_normalize", lambda *args: cuda.launch("q" if args[-1] is stats.q else "r"))
    stats.compute(a, b)
    cuda.launch("choose")
    assert cuda.needs("rows of b") == set()
    assert cuda.needs("columns of a") == set()
    assert cuda.needs("columns of b") >= {"q"} and "rows of a" not in cuda.needs("columns of b")
    assert cuda.needs("rows of a") >= {"r"} and "columns of b" not in cuda.needs("rows of a")
    assert cuda.needs("choose") == {"columns of a", "q", "rows of b", "r", "columns of b", "rows of a"}

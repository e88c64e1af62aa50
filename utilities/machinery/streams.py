"""A second CUDA stream beside the caller's, for work that may overlap what the caller's stream runs next.

``with beside.follow():`` queues work on the second stream after everything queued so far on the caller's (CuPy's
current stream); ``beside.join()`` makes the caller's stream wait for everything queued so far on the second one.
Only launches that go to CuPy's current stream honour it (the course's fast launch path: numba's dispatcher
launches on its own stream), so callers use it where ``versions.FAST_LAUNCH`` is verified.

Each wait is queued right after its record, so two events serve any number of calls: a later record of the same
event does not move a wait already queued (``cudaStreamWaitEvent`` takes the event's state when it is called).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class Beside:
    """A non-blocking stream beside CuPy's current one (``xp``: the cupy module, or a stand-in with its ``cuda``)."""

    def __init__(self, xp: Any):
        self.cuda = xp.cuda
        self.stream = xp.cuda.Stream(non_blocking=True)
        self._followed = xp.cuda.Event(disable_timing=True)
        self._joined = xp.cuda.Event(disable_timing=True)

    @contextmanager
    def follow(self) -> Iterator[Any]:
        """Launches inside go to the second stream, after everything queued so far on the caller's."""
        self._followed.record(self.cuda.get_current_stream())
        self.stream.wait_event(self._followed)
        with self.stream:
            yield self.stream

    def join(self) -> None:
        """The caller's stream waits for everything queued so far on the second stream."""
        self._joined.record(self.stream)
        self.cuda.get_current_stream().wait_event(self._joined)

"""Guard bands: an output written inside a larger poisoned canvas, so that a write outside it is seen and placed.

A kernel that writes one column past its output, or a whole tile past its last row, corrupts whatever lies next to
the output in memory; in a check that lies nowhere, or in an entry of the output that the right block overwrites
later (then only some block orders show it). A :class:`Canvas` allocates the output as a C-contiguous view in the
middle of a larger buffer (NumPy on the host, CuPy on the device: any module with ``empty``), whose bands before
and after are filled with the byte :data:`POISON_BYTE`. :meth:`Canvas.written` copies the whole buffer to the host
and returns a :class:`Written`: the output's values (``np.asarray`` of it gives them) and every entry of the bands
that changed. The checker core (``utilities.checker.output``) fails a check, naming the place, when a band changed.

The bands are at least :data:`GUARD_BYTES` long, two rows of the output, and a multiple of :data:`ALIGN` bytes, so
that the output is as aligned as a fresh allocation (vector stores and cuBLASDx copies need 16 bytes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

POISON_BYTE = 0xA5  # a float64 of it is -2.3e-29, a float16 -0.0218, an int32 -1515870811: no value a kernel writes
GUARD_BYTES = 4096
ALIGN = 256


def guard_entries(shape: tuple[int, ...], itemsize: int) -> int:
    """Entries in each band: at least ``GUARD_BYTES`` and two rows of ``shape``, a multiple of ``ALIGN`` bytes."""
    row = shape[-1] if shape else 1
    want = max(GUARD_BYTES, 2 * row * itemsize)
    return math.ceil(want / ALIGN) * ALIGN // itemsize


def _to_host(x: Any) -> np.ndarray:
    """A host copy of ``x``: CuPy's ``get``, numba's ``copy_to_host``, or NumPy."""
    for name in ("get", "copy_to_host"):
        method = getattr(x, name, None)
        if callable(method) and not isinstance(x, np.ndarray):
            return np.asarray(method())
    return np.array(x, copy=True)


@dataclass(frozen=True)
class Breach:
    """The entries of a band that changed: ``side`` "before" or "after" the output, their offsets in entries from
    the output's first entry (negative before it; ``size`` and up after it), and the output's shape."""

    side: str
    offsets: tuple[int, ...]
    shape: tuple[int, ...]

    def place(self, offset: int) -> str:
        """Where entry ``offset`` would sit in the row-major continuation of the output (a write one column past a
        row lands where the next row starts: for the last row, that is past the end)."""
        size = math.prod(self.shape)
        if len(self.shape) < 2:
            return f"index {offset}"
        index = np.unravel_index(offset % size, self.shape)
        first = int(index[0]) + (offset // size) * self.shape[0]  # a negative row before the output
        text = "(" + ", ".join(str(int(i)) for i in (first, *index[1:])) + ")"
        cols = self.shape[-1]
        if self.side == "after" and offset - size < cols:
            last = ", ".join(str(s - 1) for s in self.shape[:-1])
            text += f", i.e. ({last}, {cols + offset - size}): past the last column of the last row"
        return text

    def describe(self) -> str:
        shown = ", ".join(self.place(o) for o in self.offsets[:3])
        more = f" and {len(self.offsets) - 3} more" if len(self.offsets) > 3 else ""
        return f"{len(self.offsets)} entries {self.side} the output of shape {self.shape}, at {shown}{more}"


@dataclass(frozen=True)
class Written:
    """A host copy of an output written inside a :class:`Canvas`: its values and the band entries that changed.

    ``np.asarray(written)`` gives the values, so code that only reads the output takes it as an array.
    """

    value: np.ndarray
    breaches: tuple[Breach, ...] = field(default=())

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self.value if dtype is None else self.value.astype(dtype)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.value.shape

    @property
    def dtype(self) -> np.dtype:
        return self.value.dtype

    def outside(self) -> str:
        """What was written outside the output ("" when nothing)."""
        return "; ".join(b.describe() for b in self.breaches)


class Canvas:
    """An output of ``shape`` and ``dtype`` in the middle of a poisoned buffer (``xp``: NumPy or CuPy).

    ``canvas.out`` is the C-contiguous output to hand to a kernel or a plan (filled with ``fill`` when given);
    ``canvas.written()`` the host copy that the checkers read.
    """

    def __init__(self, shape: tuple[int, ...], dtype: Any, *, xp: Any = np, fill: Any = None):
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.size = math.prod(self.shape)
        self.guard = guard_entries(self.shape, self.dtype.itemsize)
        self.buffer = xp.empty(self.size + 2 * self.guard, dtype=self.dtype)
        self.buffer.view(xp.uint8).fill(POISON_BYTE)
        self.out = self.buffer[self.guard : self.guard + self.size].reshape(self.shape)
        if fill is not None:
            self.out.fill(fill)

    def written(self) -> Written:
        """The output's values and what changed in the bands, copied to the host."""
        host = _to_host(self.buffer)
        raw = host.view(np.uint8).reshape(-1, self.dtype.itemsize) != POISON_BYTE
        changed = raw.any(axis=1)
        g, size = self.guard, self.size
        breaches = []
        before = np.flatnonzero(changed[:g]) - g
        after = np.flatnonzero(changed[g + size :]) + size
        if before.size:
            breaches.append(Breach("before", tuple(int(o) for o in before[::-1]), self.shape))
        if after.size:
            breaches.append(Breach("after", tuple(int(o) for o in after), self.shape))
        value = host[g : g + size].reshape(self.shape).copy()
        return Written(value, tuple(breaches))

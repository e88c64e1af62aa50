"""Developer helper (issue 43): a course kernel factory of ``utilities.ozaki2.simt`` with its loops over the moduli
written out by numba (``numba.cuda.literal_unroll``), for the probes to time beside the course's.

A factory's kernel loops ``for t in range(N)`` and reads each modulus's constants from tables indexed by ``t``
(``P[t]``, ``INV[t]``...): a constant-memory load and its address arithmetic each, at run time. With the loop
unrolled over a tuple of literals, each ``t`` is a compile-time constant and each table entry an immediate in the
code (read from the PTX of a CPU build). The same operations otherwise, so the same results bit for bit.

    variants = unrolled_simt()            # a namespace: simt's factories, the moduli loops unrolled
    kernel = variants["make_reconstruct_kernel"](15, True)
"""

from __future__ import annotations

import inspect
import re
from typing import Any

# the factories whose kernels loop over the moduli, and the line of each that binds N (the count)
FACTORIES = ("make_store_row_words", "make_residue_cols_kernel", "make_reconstruct_kernel")
REBUILT = ("make_residue_known_rows_kernel", "make_residue_rows_kernel")  # they call make_store_row_words
_BINDS_N = re.compile(r"^(?P<indent>    )N\b[^=\n]*=\s*count\b.*$", re.M)
_LOOP = "for t in range(N):"


def unrolled_source(source: str) -> str:
    """A factory's source with ``TS = tuple(range(count))`` bound beside N and every ``for t in range(N):`` over
    ``literal_unroll(TS)``; raises where either is missing (the course's code changed: the probe would time the
    course's kernel twice)."""
    match = _BINDS_N.search(source)
    if match is None or _LOOP not in source:
        raise ValueError("no 'N = count' binding or no 'for t in range(N):' loop to unroll")
    source = source[: match.end()] + f"\n{match['indent']}TS = tuple(range(count))" + source[match.end() :]
    return source.replace(_LOOP, "for t in literal_unroll(TS):")


def unrolled_simt() -> dict[str, Any]:
    """A copy of ``utilities.ozaki2.simt``'s namespace in which :data:`FACTORIES` unroll their loops over the moduli
    and :data:`REBUILT` use them."""
    from numba import cuda

    from utilities.ozaki2 import simt

    names = dict(vars(simt))
    names["literal_unroll"] = cuda.literal_unroll
    for name in (*FACTORIES, *REBUILT):
        source = inspect.getsource(getattr(simt, name))
        if name in FACTORIES:
            source = unrolled_source(source)
        if name == "make_reconstruct_kernel":  # its argument a is rebound to a double after the loop, which the
            # unrolled loop's typing cannot unify with the array: a name of its own (the same operations)
            source = source.replace("a = s1 - q", "a0 = s1 - q").replace("h = a + s2", "h = a0 + s2")
            source = source.replace("back = h - a\n", "back = h - a0\n").replace(
                "((a - (h - back))", "((a0 - (h - back))"
            )
        exec(compile(source, f"<{name}, unrolled>", "exec"), names)  # noqa: S102
    return names

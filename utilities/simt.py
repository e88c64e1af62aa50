"""Device helpers that more than one track's plain numba kernels use (numba only: they run in numba's CUDA
simulator on a machine without a GPU).

- ``pack_digits``: four int8 digits as one int32 word (one 4-byte store);
- ``round_near``: an FP64 value rounded to the nearest integer by adding and subtracting 1.5 2^52 (two adds at the
  FP64 rate: a GPU's ``rint`` and ``floor`` are conversions, which run at a quarter of it);
- ``trunc_f64``: trunc in FP64 for any magnitude (numba's ``math.trunc`` returns an int64, which overflows past 2^63);
- ``int32_of``: an integer-valued double (|v| < 2^31) as an int32 from its bits, without a conversion instruction;
- ``fma``: the fused multiply-add (exact in the simulator too, where numba's ``cuda.fma`` rounds twice: there it is
  ``utilities.rounding.fma_scalar``, the same emulation NumPy references use);
- ``scale2``: ``x 2^e`` that overflows to +-Inf as on the device (Python's ``math.ldexp``, which the simulator runs,
  raises instead);
- ``hi_word``: the high 32 bits of a double (sign, exponent field, top 20 bits of the fraction) as an int32, a
  register move on the device;
- ``of_hi_word``: the double whose high 32 bits are an int32's and whose low 32 bits are zero (the inverse of
  ``hi_word`` for such doubles), register moves on the device.
"""

from __future__ import annotations

import math

import numpy as np
from numba import config, cuda, int32

from .rounding import fma_scalar

ROUNDER = 6755399441055744.0  # 1.5 2^52: v + ROUNDER - ROUNDER is v rounded to the nearest integer for |v| < 2^51
SIMULATOR = bool(config.ENABLE_CUDASIM)


@cuda.jit(device=True)
def pack_digits(d0, d1, d2, d3):
    """Four int8 digits as one little-endian int32 word: four bytes stored with one instruction."""
    w = (int(d0) & 255) | ((int(d1) & 255) << 8) | ((int(d2) & 255) << 16) | ((int(d3) & 255) << 24)
    return int32(w - 4294967296 if w >= 2147483648 else w)


@cuda.jit(device=True, inline=True)
def round_near(v):
    """v rounded to the nearest integer (ties to even), in FP64, for |v| < 2^51."""
    return (v + ROUNDER) - ROUNDER


if SIMULATOR:

    @cuda.jit(device=True)
    def _trunc_f64(x):
        """x rounded toward zero, as a double (exact for every double)."""
        return float(int(x))

    @cuda.jit(device=True)
    def _int32_of(v):
        """The integer-valued double v (|v| < 2^31) as an int32."""
        return int32(v)

    @cuda.jit(device=True)
    def _fma(a, b, c):
        """a b + c rounded once."""
        return fma_scalar(a, b, c)

    @cuda.jit(device=True)
    def _scale2(x, e):
        """x 2^e, +-Inf past DBL_MAX."""
        with np.errstate(over="ignore"):
            return float(np.ldexp(x, e))

    @cuda.jit(device=True)
    def _hi_word(v):
        """The high 32 bits of the double v, as an int32."""
        return int32(int(np.float64(v).view(np.int64)) >> 32)

    @cuda.jit(device=True)
    def _of_hi_word(h):
        """The double with high word h (an int32) and a low word of zeros."""
        return float(np.int64(int(h) << 32).view(np.float64))

else:
    from numba.cuda import libdevice

    @cuda.jit(device=True, inline=True)
    def _trunc_f64(x):
        """x rounded toward zero, as a double (exact for every double)."""
        return libdevice.trunc(x)

    @cuda.jit(device=True, inline=True)
    def _int32_of(v):
        """The integer-valued double v (|v| < 2^31) as an int32: the low word of v + 1.5 2^52 holds v in two's
        complement, so one FP64 add and a register move replace a conversion."""
        return libdevice.double2loint(v + ROUNDER)

    @cuda.jit(device=True, inline=True)
    def _fma(a, b, c):
        """a b + c rounded once."""
        return cuda.fma(a, b, c)

    @cuda.jit(device=True, inline=True)
    def _scale2(x, e):
        """x 2^e, +-Inf past DBL_MAX."""
        return math.ldexp(x, e)

    @cuda.jit(device=True, inline=True)
    def _hi_word(v):
        """The high 32 bits of the double v, as an int32."""
        return libdevice.double2hiint(v)

    @cuda.jit(device=True, inline=True)
    def _of_hi_word(h):
        """The double with high word h (an int32) and a low word of zeros."""
        return libdevice.hiloint2double(h, 0)


trunc_f64, int32_of, fma, scale2, hi_word, of_hi_word = _trunc_f64, _int32_of, _fma, _scale2, _hi_word, _of_hi_word

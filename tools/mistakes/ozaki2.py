"""Semantic mistakes and correct alternatives of the Ozaki-II exercises (4a, 4b), as data for the mutation tool.

Each entry is a textual replacement applied once to the exercise's solution source as ``tools/mutation_test.py``'s
builder returns it (``old`` must occur exactly once). A mistake is what an attendee writes that is wrong only at an
edge of the domain, in a rounding order, with a count or a table hard-coded, or by a wrong convention; the checker
must reject it on every seed, naming it. An alternative is another exact route that the checker must accept.
"""

from __future__ import annotations

from utilities.mutants import RUNNING, Alternative, Mistake

RESIDUE_4A = "4a symmetric_residue"
CRT_4A = "4a crt_reconstruct"
RESIDUE_4B = "4b residue (device function)"
DIGIT_4B = "4b digit (device function)"
RECONSTRUCT_4B = "4b reconstruct (SIMT kernel, simulator)"

_RESIDUE_4A_BODY = """    r = np.mod(x.astype(np.int64), p)  # in [0, p)
    r = np.where(r > hi, r - p, r)
    return r.astype(np.float64)"""
_CRT_LOOP = """    for t in range(count):
        u = digits[t].astype(np.float64)
        s1 = s1 + u * c.c1[t]
        s2 = s2 + u * c.c2[t]
        s3 = s3 + u * c.c3[t]"""
_DIGIT_4B_FLOOR = (
    "        q = round_near(u * INV[t] - BELOW)  # floor(u / p) by FP64 adds, not a slower conversion\n"
    "        return u - q * P[t]  # exact, in [0, p)"
)
_RESIDUE_4B_NEAREST = (
    "        r = w - round_near(w * INV[t]) * P[t]  # |w| < 2^47: w / p is rounded to its nearest integer, r is exact\n"
)
_RESIDUE_4B_FIX = """        if EVEN[t] and r > HI[t]:  # a tie (w / p = n + 1/2) needs an even p: 256's 128 is -128
            r -= P[t]
"""
_RECONSTRUCT_SUMS = """            s1 = fma(u, C1[t], s1)  # exact, fused or not
            s2 = fma(u, C2[t], s2)  # exact, fused or not
            s3 = fma(u, C3[t], s3)  # rounded once"""
_RECONSTRUCT_S3 = "            s3 = fma(u, C3[t], s3)  # rounded once"

MISTAKES = [
    Mistake(
        RESIDUE_4A,
        "rounding",
        "(x - lo) % p + lo on the float64 array: x - lo rounds once |x| passes 2^53",
        old=_RESIDUE_4A_BODY,
        new="    return (x - lo) % p + lo",
        message="an FP64 operation on x",
    ),
    Mistake(
        RESIDUE_4A,
        "edge",
        "the top of the range moved down: r >= hi sends hi to hi - p",
        old="np.where(r > hi, r - p, r)",
        new="np.where(r >= hi, r - p, r)",
        message="the top of the range moved down",
    ),
    Mistake(
        RESIDUE_4A,
        "convention",
        "np.fmod keeps x's sign: negative residues below lo are never shifted up",
        old="np.mod(x.astype(np.int64), p)",
        new="np.fmod(x.astype(np.int64), p)",
        message="np.fmod keeps the sign",
    ),
    Mistake(
        RESIDUE_4A,
        "edge",
        "int32 instead of int64: integers past 2^31 wrap before the remainder",
        old="x.astype(np.int64)",
        new="x.astype(np.int32)",
        message="int32 array",
    ),
    Mistake(
        RESIDUE_4A,
        "edge",
        "the half range rounded up for p = 256: 128 stays, one past the top",
        old="np.where(r > hi, r - p, r)",
        new="np.where(r > p // 2, r - p, r)",
        message="the residues lie in [-127, 128]",
    ),
    Mistake(
        RESIDUE_4A,
        "edge",
        "folded at -HI (issue 41: it was told to subtract p where it passes HI)",
        old="np.where(r > hi, r - p, r)",
        new="np.where(r > hi, r - p, r)\n    r = np.where(r < -hi, r + p, r)",
        message="the residues lie in [-127, 128]",
    ),
    Mistake(
        RESIDUE_4A,
        "fast path",
        "returns x itself when every |x| is below p",
        old=_RESIDUE_4A_BODY,
        new="    if np.abs(x).max() < p:\n        return x.astype(np.float64)\n" + _RESIDUE_4A_BODY,
        message="small integers only",
    ),
    Mistake(
        CRT_4A,
        "rounding order",
        "q dropped after multiplying by P: s P - q P cancels",
        old="return ((s1 - q) + s2 + s3) * c.product_float",
        new="return (s1 + s2 + s3) * c.product_float - q * c.product_float",
        message="q is subtracted after multiplying by P",
    ),
    Mistake(
        CRT_4A,
        "convention",
        "the fraction taken in [0, 1): a negative integer comes back as X + P",
        old="q = np.floor(s1 + 0.5)",
        new="q = np.floor(s1)",
        message="the fraction is taken in [0, 1)",
    ),
    Mistake(
        CRT_4A,
        "hard-coded count",
        "the moduli loop hard-coded for 14 moduli",
        old="for t in range(count):",
        new="for t in range(14):",
        message="hard-coded count",
        stage=RUNNING,  # past the digits of fewer moduli: an IndexError, which the checker names
    ),
    Mistake(
        CRT_4A,
        "precision",
        "the third part of 1/p left out: off by P 2^-70 sum u",
        old="((s1 - q) + s2 + s3)",
        new="((s1 - q) + s2)",
        message="the third sum",
    ),
    Mistake(
        CRT_4A,
        "precision",
        "the third sum kept in float32, a low-order sum 'too small to matter' (issue 41: accepted)",
        old="s3 = s3 + u * c.c3[t]",
        new="s3 = (s3 + u * c.c3[t]).astype(np.float32)",
        message="kept in float32",
    ),
    Mistake(
        CRT_4A,
        "precision",
        "the second sum kept in float32",
        old="s2 = s2 + u * c.c2[t]",
        new="s2 = (s2 + u * c.c2[t]).astype(np.float32)",
        message="kept in float32",
    ),
    Mistake(
        CRT_4A,
        "precision",
        "the digits in float32: the products u c1 round",
        old="u = digits[t].astype(np.float64)",
        new="u = digits[t].astype(np.float32)",
        message="taken as float32",
    ),
    Mistake(
        RESIDUE_4B,
        "edge",
        "no fix for the tie of p = 256: w / p = n + 1/2 rounds to even and leaves 128",
        old=_RESIDUE_4B_FIX,
        new="",
        message="at a tie",
        stage="residue(w, t)",  # a byte store turns 128 into the right -128: only the function's own value shows it
    ),
    Mistake(
        RESIDUE_4B,
        "convention",
        "trunc instead of nearest: residues in (-p, p)",
        old="r = w - round_near(w * INV[t]) * P[t]",
        new="r = w - math.trunc(w * INV[t]) * P[t]",
    ),
    Mistake(
        RESIDUE_4B,
        "hard-coded table",
        "1/p of the first modulus for every modulus",
        old="r = w - round_near(w * INV[t]) * P[t]",
        new="r = w - round_near(w * INV[0]) * P[t]",
    ),
    Mistake(
        DIGIT_4B,
        "convention",
        "the residue instead of the digit: y_t forgotten",
        old="u = v * Y[t]  # |v| < 2^31 and Y[t] < 2^8: exact, below 2^39",
        new="u = v",
        message="residues of the products",
    ),
    Mistake(
        DIGIT_4B,
        "edge",
        "the nearest multiple subtracted and no p added: a byte wraps a negative u to 256 - |u|",
        old="q = round_near(u * INV[t] - BELOW)",
        new="q = round_near(u * INV[t])",
        message="a negative u reached the byte",
    ),
    Mistake(
        DIGIT_4B,
        "edge",
        "the multiple strictly below u: u = 0 moved to p, one past the digit range",
        old="q = round_near(u * INV[t] - BELOW)",
        new="q = round_near(u * INV[t] - BELOW - 2.0**-9)",
        message="a digit of p where it is 0",
    ),
    Mistake(
        DIGIT_4B,
        "hard-coded table",
        "the first modulus for every product",
        old=_DIGIT_4B_FLOOR,
        new="        q = round_near(u * INV[0] - BELOW)\n        return u - q * P[0]",
    ),
    Mistake(
        DIGIT_4B,
        "sign",
        "the digit of |v| (issue 41: it was told to add p where u < 0)",
        old="u = v * Y[t]  # |v| < 2^31 and Y[t] < 2^8: exact, below 2^39",
        new="u = abs(v) * Y[t]",
        message="the digits of |v|",
    ),
    Mistake(
        DIGIT_4B,
        "convention",
        "y applied twice",
        old="u = v * Y[t]  # |v| < 2^31 and Y[t] < 2^8: exact, below 2^39",
        new=(
            "u = v * Y[t]  # |v| < 2^31 and Y[t] < 2^8: exact, below 2^39\n"
            "        u -= round_near(u * INV[t]) * P[t]\n        u = u * Y[t]"
        ),
        message="applied twice",
    ),
    Mistake(
        RECONSTRUCT_4B,
        "precision",
        "the third part of 1/p left out",
        old=_RECONSTRUCT_S3,
        new="            s3 += 0.0",
        message="the third sum",
    ),
    Mistake(
        RECONSTRUCT_4B,
        "precision",
        "the third sum kept in FP32, a low-order sum 'too small to matter' (issue 41: accepted)",
        old=_RECONSTRUCT_S3,
        new="            s3 = np.float32(s3 + u * C3[t])",
        message="kept in float32",
        stage="C",
    ),
    Mistake(
        RECONSTRUCT_4B,
        "rounding order",
        "1/p in one double: the sum of u / p rounds, and P magnifies it",
        old=_RECONSTRUCT_SUMS,
        new="            s1 += u * (C1[t] + C2[t] + C3[t])",
        message="in one double",
    ),
    Mistake(
        RECONSTRUCT_4B,
        "path",
        "weights each plane's own value, not its digit u: right for digits read early, wrong for the products",
        old=_RECONSTRUCT_SUMS,
        new="""            s1 += float64(planes[t, i, j]) * C1[t]
            s2 += float64(planes[t, i, j]) * C2[t]
            s3 += float64(planes[t, i, j]) * C3[t]""",
        message="not the plane's own value",
        stage="C",
    ),
    Mistake(
        RECONSTRUCT_4B,
        "hard-coded table",
        "the weights of the first modulus for every digit",
        old="            s1 = fma(u, C1[t], s1)",
        new="            s1 = fma(u, C1[0], s1)",
    ),
]

CORRECT = [
    Alternative(
        RESIDUE_4B,
        "floor instead of nearest: residues in [0, p), and the fix moves the top half down for every p",
        old=_RESIDUE_4B_NEAREST + _RESIDUE_4B_FIX,
        new="""        r = w - math.floor(w * INV[t]) * P[t]  # in [0, p)
        if r > HI[t]:
            r -= P[t]
""",
    ),
    Alternative(
        RESIDUE_4A,
        "the float remainder: fmod of doubles is exact",
        old="np.mod(x.astype(np.int64), p)",
        new="np.mod(x, p)",
    ),
    Alternative(
        RESIDUE_4A,
        "Python ints, exact at any size, over x.flat (any shape)",
        old=_RESIDUE_4A_BODY,
        new="    return np.array([(int(v) - lo) % p + lo for v in x.flat], dtype=np.float64).reshape(x.shape)",
    ),
    Alternative(
        CRT_4A,
        "rint instead of floor(s1 + 1/2): no ties can occur",
        old="q = np.floor(s1 + 0.5)",
        new="q = np.rint(s1)",
    ),
    Alternative(
        CRT_4A,
        "the three sums as dot products (another order of the exact sums)",
        old=_CRT_LOOP,
        new="""    u = digits.astype(np.float64)
    s1 = np.tensordot(np.array(c.c1), u, axes=1)
    s2 = np.tensordot(np.array(c.c2), u, axes=1)
    s3 = np.tensordot(np.array(c.c3), u, axes=1)""",
    ),
    Alternative(
        RESIDUE_4B,
        "floor(w / p + 1/2): ties round up, no fix needed",
        old="r = w - round_near(w * INV[t]) * P[t]",
        new="r = w - math.floor(w * INV[t] + 0.5) * P[t]",
    ),
    Alternative(
        RESIDUE_4B,
        "the remainder in [0, p), then the top half moved down",
        old=_RESIDUE_4B_FIX + "        return r",
        new="""        r = w % P[t]  # Python's remainder of doubles: exact, in [0, p)
        if r > HI[t]:
            r -= P[t]
        return r""",
    ),
    Alternative(
        DIGIT_4B,
        "v reduced first, then times y and reduced again (two reductions, every value below 2^31)",
        old="u = v * Y[t]  # |v| < 2^31 and Y[t] < 2^8: exact, below 2^39",
        new="u = (v - round_near(v * INV[t]) * P[t]) * Y[t]",
    ),
    Alternative(
        DIGIT_4B,
        "the remainder operator on doubles",
        old="        u = v * Y[t]  # |v| < 2^31 and Y[t] < 2^8: exact, below 2^39\n" + _DIGIT_4B_FLOOR,
        new="""        return (v * Y[t]) % P[t]  # Python's remainder of doubles: exact, in [0, p)""",
    ),
    Alternative(
        DIGIT_4B,
        "the nearest multiple subtracted, then p added where the result is negative (one compare and one add more)",
        old=_DIGIT_4B_FLOOR,
        new="""        u -= round_near(u * INV[t]) * P[t]
        if u < 0:
            u += P[t]
        return u""",
    ),
    Alternative(
        RECONSTRUCT_4B,
        "the sums as s += u * w: a GPU fuses each as the solution's fma does; the simulator rounds s3's terms twice",
        old=_RECONSTRUCT_SUMS,
        new="""            s1 += u * C1[t]
            s2 += u * C2[t]
            s3 += u * C3[t]""",
    ),
]

"""Semantic mutants of the Ozaki-I exercises (3a-3d): realistic mistakes and correct alternatives, as data.

Each entry replaces ``old`` by ``new`` once in the exercise's solution source (``utilities.mutants``); the
mutation tools run every mistake through the exercise's own checker on several seeds (``tools/mutation_test.py``
for 3a and 3b's device function and epilogue, ``tools/mutation_gpu.py`` on a GPU for 3b's products, 3c and 3d).
"""

from utilities.mutants import RUNNING, Alternative, Mistake

_SCALE = "t = math.ldexp(x, 7 - e)"
_CARRY = "    for s in range(slices - 1, 0, -1):"
_LOOP = (  # 3b's products: the diagonal of p, as the solution finds it
    "for e in range(1, p + 1):  # diagonal e starts at e (e + 1) / 2 >= e: none after p starts by p\n"
    "            if e * (e + 1) // 2 <= p:\n"
    "                d = e"
)
_START = "s = p - d * (d + 1) // 2"
_ST = _START + "\n        t = d - s"

MISTAKES = [
    # 3a: one number's digits
    Mistake("3a slice_number", "edge", "scales by 2.0 ** (7 - e), which overflows for a subnormal row's shift",
            old=_SCALE, new="t = x * 2.0 ** (7 - e)", message="math.ldexp", stage=RUNNING),
    Mistake("3a slice_number", "edge", "divides by 2.0 ** (e - 7), which underflows to 0 for a subnormal row's shift",
            old=_SCALE, new="t = x / 2.0 ** (e - 7)", message="underflowed to 0", stage=RUNNING),
    Mistake("3a slice_number", "edge", "scales by 2^7 / 2^e: 2.0 ** e overflows for a shift of 1025",
            old=_SCALE, new="t = x * 128.0 / 2.0**e", message="math.ldexp", stage=RUNNING),
    Mistake("3a slice_number", "edge", "returns zeros early for an x below one unit of the last digit (half a unit "
            "already rounds to +-1)", old="    digits = []\n",
            new="    if abs(t) * 256.0 ** (slices - 1) < 1:\n        return [0] * slices\n    digits = []\n",
            message="no shortcut"),
    Mistake("3a slice_number", "rounding", "rounds the last digit half up", old="digits.append(round(t))",
            new="digits.append(math.floor(t + 0.5))", message="half to even"),
    Mistake("3a slice_number", "rounding", "rounds a negative last digit's tie away from zero, a positive one to even "
            "(issue 41: it was told about a carry)", old="digits.append(round(t))",
            new="digits.append(round(t) if t >= 0 else -math.floor(-t + 0.5))", message="a negative tie"),
    Mistake("3a slice_number", "rounding", "rounds the last digit half down", old="digits.append(round(t))",
            new="digits.append(math.ceil(t - 0.5))", message="half down"),
    Mistake("3a slice_number", "rounding", "truncates the last digit", old="digits.append(round(t))",
            new="digits.append(math.trunc(t))", message="not truncated"),
    Mistake("3a slice_number", "edge", "peels digits off with floor (not exact for negative x)",
            old="u = math.trunc(t)", new="u = math.floor(t)", message="floor is not exact"),
    Mistake("3a slice_number", "carry", "carries from the top digit down: a carry into a digit of 127 does not "
            "cascade", old=_CARRY, new="    for s in range(1, slices):", message="cascade"),
    Mistake("3a slice_number", "carry", "drops the carry of a digit above 127 (keeps the digit wrapped)",
            old="digits[s - 1] += 1", new="digits[s - 1] += 0", message="without giving 1 to the next"),
    Mistake("3a slice_number", "hard-coded count", "peels off 6 digits whatever the count (7 slices)",
            old="for _ in range(slices - 1):", new="for _ in range(6):", message="not a fixed count"),
    # 3a: the terms of a diagonal
    Mistake("3a diagonal_terms", "edge", "forgets that both s and t stay below the number of slices",
            old="if s < slices and d - s < slices", new="", message="both s and t must stay below"),
    Mistake("3a diagonal_terms", "edge", "bounds s only", old="if s < slices and d - s < slices",
            new="if s < slices", message="both s and t must stay below"),
    Mistake("3a diagonal_terms", "order", "lists the pairs with s descending", old="for s in range(d + 1)",
            new="for s in range(d, -1, -1)", message="s ascending"),
    Mistake("3a diagonal_terms", "swapped axes", "writes the pairs as (t, s)", old="[(s, d - s) for s",
            new="[(d - s, s) for s", message="s ascending"),
    Mistake("3a diagonal_terms", "off by one", "stops before s = d", old="for s in range(d + 1)",
            new="for s in range(d)", message="s runs from 0 to d"),
    # 3b: the device function's digits
    Mistake("3b split_digits", "rounding", "truncates v instead of rounding it (bypasses high_part)",
            old="word = high_part(v, digits) + BIAS_HIGH", new="word = int64(v) + BIAS_HIGH", message="not truncated"),
    Mistake("3b split_digits", "hard-coded count", "writes SLICES digits from the int64 word also beyond 8 slices",
            old="for j in range(HIGH - 1):", new="for j in range(SLICES - 1):", message="beyond 8 slices"),
    Mistake("3b split_digits", "edge", "scales with a power of two that overflows for a subnormal row's shift",
            old="v = math.ldexp(x, int(8 * SLICES - 1 - e))", new="v = x * 2.0 ** (8 * SLICES - 1 - e)",
            message="end of the FP64 range"),
    Mistake("3b split_digits", "sign", "masks the top digit like the others (loses its sign)",
            old="digits[0] = int32(word >> (8 * (HIGH - 1)))",
            new="digits[0] = int32((word >> (8 * (HIGH - 1))) & 255) - 128"),
    Mistake("3b split_digits", "bias", "forgets the bias below the top digit",
            old="word = high_part(v, digits) + BIAS_HIGH", new="word = high_part(v, digits)"),
    # 3b: the FP64 epilogue
    Mistake("3b epilogue", "hard-coded count", "adds 7 diagonals whatever the count",
            old="for d in range(offsets.shape[0] - 2, -1, -1):", new="for d in range(6, -1, -1):",
            message="hard-coded", stage=RUNNING),  # past the offsets of fewer slices: an IndexError, named
    Mistake("3b epilogue", "rounding order", "adds the diagonals from the largest weight to the smallest",
            old="for d in range(offsets.shape[0] - 2, -1, -1):", new="for d in range(offsets.shape[0] - 1):",
            message="largest weight"),
    Mistake("3b epilogue", "layout", "takes terms[d] as diagonal d (right for the partial layout only)",
            old="            for t in range(offsets[d], offsets[d + 1]):\n"
            "                diagonal += float64(terms[t, i, j])",
            new="            diagonal += float64(terms[d, i, j])", message="offsets[d + 1] - 1"),
    Mistake("3b epilogue", "layout", "adds the first term of each diagonal only",
            old="for t in range(offsets[d], offsets[d + 1]):", new="for t in range(offsets[d], offsets[d] + 1):",
            message="first term"),
    Mistake("3b epilogue", "swapped axes", "reads the terms at (j, i)", old="terms[t, i, j]", new="terms[t, j, i]",
            message="swapped", stage=RUNNING),  # a 41 x 70 output: past the terms' rows, an IndexError, named
    Mistake("3b epilogue", "rounding order", "adds every term into acc at its weight instead of each diagonal's "
            "exact sum", old="                diagonal += float64(terms[t, i, j])\n            acc += diagonal * "
            "math.ldexp(1.0, -8 * d)", new="                acc += float64(terms[t, i, j]) * math.ldexp(1.0, -8 * d)",
            message="exact sum of its terms"),
    # 3b: the products kernel (GPU)
    Mistake("3b products", "off by one", "starts diagonal d at p = d(d-1)/2", old=_START,
            new="s = p - d * (d - 1) // 2", message="as if diagonal d started at p = d(d-1)/2"),
    Mistake("3b products", "off by one", "moves on to diagonal d one product late (< for <=)", old="// 2 <= p:",
            new="// 2 < p:", message="the first of each diagonal d >= 1"),
    Mistake("3b products", "off by one", "moves on to the next diagonal one product early", old="// 2 <= p:",
            new="// 2 <= p + 1:", message="the last of each diagonal d >= 1"),
    Mistake("3b products", "off by one", "counts s from 1 along each diagonal", old=_START,
            new="s = p - d * (d + 1) // 2 + 1", message="s is one too large"),
    Mistake("3b products", "swapped axes", "derives t from p's place on its diagonal and s from t", old=_ST,
            new="t = p - d * (d + 1) // 2\n        s = d - t", message="s and t are swapped"),
    Mistake("3b products", "indexing", "takes t = p - s", old="t = d - s", new="t = p - s", message="not p - s"),
    Mistake("3b products", "indexing", "takes s = 0, so t = d: the first product of each diagonal", old=_START,
            new="s = 0", message="the first of its diagonal"),
    Mistake("3b products", "indexing", "takes s = p % (d + 1), right on the even diagonals only", old=_START,
            new="s = p % (d + 1)", message="s = p - d(d+1)/2"),
    Mistake("3b products", "indexing", "takes p itself as the diagonal", old=_LOOP,
            new="d = p", message="diagonal d = p"),
    Mistake("3b products", "hard-coded count", "derives (s, t) from p as if the pairs were a 7 x 7 grid", old=_ST,
            new="s, t = p // 7, p % 7", message="not an S x S grid"),
    Mistake("3b products", "indexing", "keeps the skeleton's s, t = 0, 0 below its own lines: product 0 everywhere",
            old=_ST, new=_ST + "\n        s, t = 0, 0", message="every product is A_0 @ B_0"),
    Mistake("3b products", "swapped axes", "derives (s, t) from the block's row tile bx, not from p",
            old=_LOOP + "\n        " + _START,
            new=(_LOOP + "\n        " + _START).replace("p + 1", "bx + 1").replace("<= p:", "<= bx:")
            .replace("s = p", "s = bx"),
            message="the same in every block of product p"),
    # 3c: the diagonals kernel (GPU)
    Mistake("3c diagonals", "swapped axes", "points A's tile at by and B's at bx",
            old="(bx, int32(s)), (by, int32(d - s))", new="(by, int32(s)), (bx, int32(d - s))"),
    Mistake("3c diagonals", "off by one", "stops before s = d", old="for s in range(d + 1):",
            new="for s in range(d):", message="anti-diagonal sums"),
    Mistake("3c diagonals", "order", "executes before pointing the tile at its slices",
            old="                device_pipeline.reset_tile(tile, (bx, int32(s)), (by, int32(d - s)))\n"
            "                tile.execute(acc)",
            new="                tile.execute(acc)\n"
            "                device_pipeline.reset_tile(tile, (bx, int32(s)), (by, int32(d - s)))"),
    # 3d: the fused kernel (GPU)
    Mistake("3d fused", "rounding", "passes each diagonal through float32", old="float64(part[i]) * weight",
            new="float64(np.float32(part[i])) * weight"),
    Mistake("3d fused", "beta = 0", "reads C although beta = 0",
            old="                        if beta != 0.0:\n                            value += beta * c[row, col]",
            new="                        value += beta * c[row, col]", message="C was read although beta = 0"),
    Mistake("3d fused", "edge", "forgets the NaN of the non-finite sentinel",
            old="if e[row] == NONFINITE_SHIFT or f[col] == NONFINITE_SHIFT:", new="if False:",
            message="sentinel"),
    Mistake("3d fused", "edge", "scales in two steps, ldexp by e first, which overflows for a shift of 1025",
            old="math.ldexp(total[i], int(e[row] + f[col] - 14))",
            new="math.ldexp(math.ldexp(total[i], int(e[row])), int(f[col] - 14))"),
    Mistake("3d fused", "weights", "weights diagonal d by 2^(8d)", old="weight = math.ldexp(1.0, -8 * d)",
            new="weight = math.ldexp(1.0, 8 * d)"),
]  # fmt: skip

CORRECT = [
    Alternative("3a slice_number", "scales in two exact steps", old=_SCALE, new="t = math.ldexp(math.ldexp(x, -e), 7)"),
    Alternative("3a slice_number", "carries with floor division",
                old="""        if digits[s] > 127:
            digits[s] -= 256
            digits[s - 1] += 1
        elif digits[s] < -128:
            digits[s] += 256
            digits[s - 1] -= 1""",
                new="""        carry = (digits[s] + 128) // 256
        digits[s] -= 256 * carry
        digits[s - 1] += carry"""),
    Alternative("3a slice_number", "the integer route: N = rint(x 2^(8S - 1 - e)), then its balanced digits",
                old="""    t = math.ldexp(x, 7 - e)
    digits = []
    for _ in range(slices - 1):
        u = math.trunc(t)
        digits.append(u)
        t = (t - u) * 256.0
    digits.append(round(t))
    for s in range(slices - 1, 0, -1):
        if digits[s] > 127:
            digits[s] -= 256
            digits[s - 1] += 1
        elif digits[s] < -128:
            digits[s] += 256
            digits[s - 1] -= 1""",
                new="""    n = round(math.ldexp(x, 8 * slices - 1 - e))
    digits = []
    for _ in range(slices - 1):
        low = (n + 128) % 256 - 128
        digits.append(low)
        n = (n - low) // 256
    digits.append(n)
    digits.reverse()"""),
    Alternative("3a diagonal_terms", "the bounds of s computed first",
                old="return [(s, d - s) for s in range(d + 1) if s < slices and d - s < slices]",
                new="return [(s, d - s) for s in range(max(0, d - slices + 1), min(d, slices - 1) + 1)]"),
    Alternative("3a diagonal_terms", "a loop over t",
                old="return [(s, d - s) for s in range(d + 1) if s < slices and d - s < slices]",
                new="return sorted((d - t, t) for t in range(slices) if 0 <= d - t < slices)"),
    Alternative("3b split_digits", "balanced digits by arithmetic, no bias",
                old="""        word = high_part(v, digits) + BIAS_HIGH
        for j in range(HIGH - 1):
            digits[HIGH - 1 - j] = int32((word >> (8 * j)) & 255) - 128
        digits[0] = int32(word >> (8 * (HIGH - 1)))""",
                new="""        n = high_part(v, digits)
        for j in range(HIGH - 1):
            low = ((n + 128) & 255) - 128
            digits[HIGH - 1 - j] = int32(low)
            n = (n - low) >> 8
        digits[0] = int32(n)"""),
    Alternative("3b split_digits", "scales in two exact steps", old="v = math.ldexp(x, int(8 * SLICES - 1 - e))",
                new="v = math.ldexp(math.ldexp(x, -int(e)), int(8 * SLICES - 1))"),
    Alternative("3b epilogue", "each diagonal summed in int64, converted once",
                old="""            diagonal = 0.0
            for t in range(offsets[d], offsets[d + 1]):
                diagonal += float64(terms[t, i, j])
            acc += diagonal * math.ldexp(1.0, -8 * d)""",
                new="""            exact = int64(0)
            for t in range(offsets[d], offsets[d + 1]):
                exact += int64(terms[t, i, j])
            acc += float64(exact) * math.ldexp(1.0, -8 * d)"""),
    Alternative("3b epilogue", "divides by 256^d instead of multiplying by 2^(-8d)",
                old="acc += diagonal * math.ldexp(1.0, -8 * d)", new="acc += diagonal / 256.0**d"),
]  # fmt: skip

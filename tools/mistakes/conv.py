"""Semantic mistakes of the convolution track's exercises, as data for tools/mutation_test.py (issue 27).

Each ``Mistake`` is a wrong implementation an attendee writes, as a textual replacement applied once to the
exercise's solution source as the tool's builder returns it; each ``Alternative`` another exact route the checker
must accept. The index map (2c) runs on the CPU; the epilogues (2c, 2d) are GPU kernels, for tools/mutation_gpu.py.
"""

from __future__ import annotations

from utilities.mutants import Alternative, Mistake

NEIGHBOR = "2c neighbor (device function)"
EPILOGUE = "2c conv epilogue"
B2B = "2d b2b epilogues"

MISTAKES = [
    Mistake(NEIGHBOR, "edge", "the last row is taken for inside the image (> instead of >=)",
            old="h + r - 1 >= height", new="h + r - 1 > height", message="the last row is taken for inside"),
    Mistake(NEIGHBOR, "edge", "the last column is taken for inside the image (> instead of >=)",
            old="w + s - 1 >= width", new="w + s - 1 > width", message="the last column is taken for inside"),
    Mistake(NEIGHBOR, "edge", "only the row is checked: the first and last columns read the neighbouring image row",
            old="h + r - 1 >= height or w + s - 1 < 0 or w + s - 1 >= width", new="h + r - 1 >= height",
            message="only the row is checked"),
    Mistake(NEIGHBOR, "layout", "the row is taken over the whole batch: every image after the first reads padding",
            old="h = (m // width) % height", new="h = m // width", message="the row is taken over the whole batch"),
    Mistake(NEIGHBOR, "axes", "r and s swapped: r moves along the width, s along the height",
            old="return m + (r - 1) * width + (s - 1)", new="return m + (s - 1) * width + (r - 1)",
            message="r and s are swapped"),
    Mistake(NEIGHBOR, "edge", "the padding reads pixel 0 instead of nothing",
            old="        return -1\n", new="        return 0\n", message="the padding reads pixel 0"),
    Mistake(NEIGHBOR, "direction", "the filter applied flipped: tap (r, s) reads (h - r + 1, w - s + 1)",
            old="    if h + r - 1 < 0 or h + r - 1 >= height or w + s - 1 < 0 or w + s - 1 >= width:\n"
                "        return -1\n    return m + (r - 1) * width + (s - 1)",
            new="    if h - r + 1 < 0 or h - r + 1 >= height or w - s + 1 < 0 or w - s + 1 >= width:\n"
                "        return -1\n    return m - (r - 1) * width - (s - 1)",
            message="the wrong direction", stage="index map"),
    Mistake(NEIGHBOR, "direction", "the filter flipped along r only: tap (r, s) reads (h - r + 1, w + s - 1) (issue 41:"
            " it was told that the tap falls outside the image)",
            old="    if h + r - 1 < 0 or h + r - 1 >= height or w + s - 1 < 0 or w + s - 1 >= width:\n"
                "        return -1\n    return m + (r - 1) * width + (s - 1)",
            new="    if h - r + 1 < 0 or h - r + 1 >= height or w + s - 1 < 0 or w + s - 1 >= width:\n"
                "        return -1\n    return m - (r - 1) * width + (s - 1)",
            message="the wrong direction along the rows", stage="index map"),
    Mistake(NEIGHBOR, "direction", "the offset mirrored along s only, the padding test right",
            old="return m + (r - 1) * width + (s - 1)", new="return m + (r - 1) * width - (s - 1)",
            message="the wrong direction along the columns", stage="index map"),
    Mistake(NEIGHBOR, "layout", "the batch left out of the flat index: every image reads the first",
            old="return m + (r - 1) * width + (s - 1)", new="return (h + r - 1) * width + (w + s - 1)",
            message="the batch is missing", stage="index map"),
    Mistake(EPILOGUE, "hard-coded count", "a block width of 64 hard-coded in the bias's column offset",
            old="float32(bias[col0 + col])", new="float32(bias[cuda.blockIdx.y * 64 + col])",
            message="hard-coded", stage="out"),
    Mistake(EPILOGUE, "hard-coded tile", "a row tile of 128 pixels written into the block's offset (the contract's "
            "other block is 64 pixels tall)", old="row0, col0 = cuda.blockIdx.x * TM, cuda.blockIdx.y * TN",
            new="row0, col0 = cuda.blockIdx.x * 128, cuda.blockIdx.y * TN", stage="out"),
    Mistake(EPILOGUE, "rounding order", "the FP32 sum rounded to FP16 before the bias and the ReLU",
            old="v = result[i] + float32(bias[col0 + col])",
            new="tile[i] = result[i]\n                v = float32(tile[i]) + float32(bias[col0 + col])"),
    Mistake(EPILOGUE, "index", "the bias indexed by the column within the block's tile",
            old="float32(bias[col0 + col])", new="float32(bias[col])"),
    Mistake(EPILOGUE, "order", "applies ReLU before the bias (and again after it, as the store does)",
            old="v = result[i] + float32(bias[col0 + col])",
            new="v = max(result[i], float32(0)) + float32(bias[col0 + col])",
            message="ReLU applied before the bias", stage="out"),
    Mistake(B2B, "rounding order", "the second FP32 sum rounded to FP16 before bias1",
            old="v = r1[i] + float32(bias1[col])",
            new="part[i] = r1[i]\n                v = float32(part[i]) + float32(bias1[col])"),
    Mistake(B2B, "stage", "D0 without its ReLU", old="d0_tile[i] = v if v > 0 else float32(0)", new="d0_tile[i] = v"),
]  # fmt: skip

CORRECT = [
    Alternative(NEIGHBOR, "(b, h, w) unflattened and flattened again",
                old="    return m + (r - 1) * width + (s - 1)  # the same image: one image row is `width` pixels",
                new="    b = m // (width * height)\n    return (b * height + h + r - 1) * width + w + s - 1"),
    Alternative(NEIGHBOR, "chained comparisons, inside first",
                old="    if h + r - 1 < 0 or h + r - 1 >= height or w + s - 1 < 0 or w + s - 1 >= width:\n"
                    "        return -1\n    return m + (r - 1) * width + (s - 1)",
                new="    if 0 <= h + r - 1 < height and 0 <= w + s - 1 < width:\n"
                    "        return m + (r - 1) * width + (s - 1)\n    return -1"),
    Alternative(EPILOGUE, "max() for the ReLU",
                old="tile[i] = v if v > 0 else float32(0)", new="tile[i] = max(v, float32(0))"),
]  # fmt: skip

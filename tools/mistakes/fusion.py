"""Semantic mutants of the fusion exercises (notebooks 2a and 2b, GPU kernels: ``tools/mutation_gpu.py`` runs them)."""

from utilities.mutants import Alternative, Mistake

_BIAS = "x = result[i] + float32(bias[col0 + col])"
_D1 = "x = alpha1 * r1[i] + beta1 * float32(c_part[i])"

MISTAKES = [
    # 2a: bias and ReLU in the epilogue
    Mistake("2a gemm_bias_relu", "indexing", "reads the bias at the column within the block tile", old=_BIAS,
            new="x = result[i] + float32(bias[col])", message="column offset"),
    Mistake("2a gemm_bias_relu", "swapped axes", "reads the bias by row", old="_, col = acc.map_fragment_index(i)",
            new="col, _ = acc.map_fragment_index(i)"),
    Mistake("2a gemm_bias_relu", "rounding order", "rounds the FP32 accumulator to FP16 before adding the bias",
            old=_BIAS, new="x = float32(np.float16(result[i])) + float32(bias[col0 + col])",
            message="rounded to FP16 before the bias"),
    Mistake("2a gemm_bias_relu", "order", "applies ReLU before the bias", old=_BIAS,
            new="x = max(result[i], float32(0)) + float32(bias[col0 + col])", message="ReLU applied before the bias"),
    Mistake("2a gemm_bias_relu", "missing", "forgets the ReLU", old="tile[i] = x if x > 0 else float32(0)",
            new="tile[i] = x", message="ReLU missing"),
    Mistake("2a gemm_bias_relu", "hard-coded tile", "a block width of 128 hard-coded in the bias's offset (the "
            "contract's other block is 64 wide)", old=_BIAS,
            new="x = result[i] + float32(bias[cuda.blockIdx.y * 128 + col])",
            message="a block width of 128 hard-coded", stage="out"),
    # 2b: the two epilogues of the back-to-back GEMM
    Mistake("2b b2b", "missing", "forgets alpha0", old="x = alpha0 * r0[i]", new="x = r0[i]", message="alpha0 missing"),
    Mistake("2b b2b", "swapped", "scales D0 by alpha1", old="x = alpha0 * r0[i]", new="x = alpha1 * r0[i]",
            message="alpha1 used instead of alpha0"),
    Mistake("2b b2b", "missing", "forgets the first ReLU", old="d0_tile[i] = x if x > 0 else float32(0)",
            new="d0_tile[i] = x", message="ReLU missing in the first epilogue"),
    Mistake("2b b2b", "missing", "adds C1 without beta1", old=_D1, new="x = alpha1 * r1[i] + float32(c_part[i])",
            message="C1 added without beta1"),
    Mistake("2b b2b", "order", "scales C1 by alpha1 too", old=_D1,
            new="x = alpha1 * (r1[i] + beta1 * float32(c_part[i]))", message="alpha1 also scales C1"),
    Mistake("2b b2b", "order", "applies ReLU before alpha0 (seen with a negative alpha0)",
            old="x = alpha0 * r0[i]\n            d0_tile[i] = x if x > 0 else float32(0)",
            new="x = r0[i] if r0[i] > 0 else float32(0)\n            d0_tile[i] = alpha0 * x",
            message="ReLU applied before alpha0", stage="d0"),
    Mistake("2b b2b", "rounding order", "rounds alpha1 * acc1 to FP16 before adding beta1 * C1", old=_D1,
            new="x = float32(np.float16(alpha1 * r1[i])) + beta1 * float32(c_part[i])",
            message="rounded to FP16 before beta1", stage="d1"),
    # 2b: the barriers around D0 (the race shows in few runs: the default check's racecheck finds it)
    Mistake("2b b2b", "race", "no barrier between D0's store to shared memory and GEMM 1's reads of it",
            old="        cuda.syncthreads()  # D0 is complete in shared memory (and B1 landed",
            new="        pass  # D0 is complete in shared memory (and B1 landed",
            message="cuda.syncthreads() is missing",
            stage="sanitizer"),
    Mistake("2b b2b", "race", "the barrier before D0's store moved above GEMM 0's last MMA: D0 overwrites operands "
            "another warp may still read",
            old="        MM0.execute(sa, sb, acc0)\n        cuda.syncthreads()  # every warp is done reading GEMM 0's",
            new="        cuda.syncthreads()\n        MM0.execute(sa, sb, acc0)\n"
                "        pass  # every warp is done reading GEMM 0's",
            message="cuda.syncthreads() is missing", stage="sanitizer"),
    Mistake("2b b2b", "hard-coded size", "D0's fragment loop over 64 values a thread (F0 at the notebook's block; the "
            "contract's other has 32)", old="        for i in range(F0):\n", new="        for i in range(64):\n",
            message="a loop bound written as a number", stage="parameters"),
    Mistake("2b b2b", "missing", "forgets the second ReLU",
            old="out[i] = x if x > 0 else float32(0)\n                #",  # the branch that reads C1
            new="out[i] = x\n                #", message="ReLU missing in the second epilogue"),
]  # fmt: skip

CORRECT = [
    Alternative("2a gemm_bias_relu", "ReLU with max", old="tile[i] = x if x > 0 else float32(0)",
                new="tile[i] = max(x, float32(0))"),
    Alternative("2b b2b", "beta1 * C1 first", old=_D1, new="x = beta1 * float32(c_part[i]) + alpha1 * r1[i]"),
]  # fmt: skip

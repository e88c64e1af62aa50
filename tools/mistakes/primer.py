"""Semantic mutants of the primer's exercise (notebook 0, a GPU kernel: ``tools/mutation_gpu.py`` runs them)."""

from utilities.mutants import Alternative, Mistake

EXERCISE = "0 primer"

MISTAKES = [
    Mistake(EXERCISE, "order", "executes twice", old="        MM.execute(sa, sb, acc)\n",
            new="        MM.execute(sa, sb, acc)\n        MM.execute(sa, sb, acc)\n", message="C is 2 times A @ B",
            stage="execute"),
    Mistake(EXERCISE, "missing", "never stores the accumulator",
            old="        acc.partition_and_copy(acc.get_results(), c_tile)\n", new="",
            message="does not write its result", stage="result"),
    Mistake(EXERCISE, "swapped", "copies A's tile into sb and B's into sa",
            old="        copy(a_tile, sa)\n        copy(b_tile, sb)\n",
            new="        copy(a_tile, sb)\n        copy(b_tile, sa)\n"),
    Mistake(EXERCISE, "race", "executes before waiting for the copies", old="        copy_wait()  #",
            new="        pass  #"),
    Mistake(EXERCISE, "hard-coded tile", "a tile of 128 x 128 written into the block's offsets (the course's block; "
            "the contract's other is 64 x 64)", old="row0, col0 = cuda.blockIdx.x * TM, cuda.blockIdx.y * TN",
            new="row0, col0 = cuda.blockIdx.x * 128, cuda.blockIdx.y * 128", stage="C"),
]  # fmt: skip

CORRECT = [
    Alternative(EXERCISE, "B's tile copied first", old="        copy(a_tile, sa)\n        copy(b_tile, sb)\n",
                new="        copy(b_tile, sb)\n        copy(a_tile, sa)\n"),
]  # fmt: skip

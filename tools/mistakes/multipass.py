"""Semantic mutants of the multi-pass exercise (notebook 1, a GPU kernel: ``tools/mutation_gpu.py`` runs them)."""

from utilities.mutants import Alternative, Mistake

_PREFETCH = """                copy(make_tensor(a_rows[:, k1 : k1 + TK], gmem_a(k)), next_a)
                copy(make_tensor(b_cols[:, k1 : k1 + TK], gmem_b(k)), next_b)"""

MISTAKES = [
    Mistake("1 multipass", "offset", "prefetches phase g again instead of g + 1", old="k1 = (g + 1) * TK",
            new="k1 = g * TK", message="offset of the prefetch"),
    Mistake("1 multipass", "offset", "prefetches one pass too far", old="k1 = (g + 1) * TK",
            new="k1 = (g + 1) * TK + TK // 2", message="offset of the prefetch"),
    Mistake("1 multipass", "hard-coded size", "a phase 64 deep hard-coded in the prefetch's offset (int8's F PK; the "
            "contract's FP16 block has 128)", old="k1 = (g + 1) * TK", new="k1 = (g + 1) * 64",
            message="offset of the prefetch"),
    Mistake("1 multipass", "hard-coded count", "stops prefetching after 16 phases whatever K holds",
            old="if g + 1 < phases:", new="if g + 1 < 16:"),
    Mistake("1 multipass", "edge", "never prefetches the last phase", old="if g + 1 < phases:",
            new="if g + 2 < phases:", message="the last phase"),
    Mistake("1 multipass", "order", "swaps the buffers before executing (runs the phase still in flight)",
            old="""            MM.execute(smem_a, smem_b, acc)
            smem_a, next_a = next_a, smem_a
            smem_b, next_b = next_b, smem_b""",
            new="""            smem_a, next_a = next_a, smem_a
            smem_b, next_b = next_b, smem_b
            MM.execute(smem_a, smem_b, acc)"""),
    Mistake("1 multipass", "race", "does not wait for the copies before executing", old="            copy_wait()  #",
            new="            pass  #"),
    Mistake("1 multipass", "swapped axes", "prefetches A into B's buffer and B into A's", old=_PREFETCH,
            new="""                copy(make_tensor(a_rows[:, k1 : k1 + TK], gmem_a(k)), next_b)
                copy(make_tensor(b_cols[:, k1 : k1 + TK], gmem_b(k)), next_a)"""),
    Mistake("1 multipass", "order", "never swaps B's buffers", old="            smem_b, next_b = next_b, smem_b\n",
            new=""),
]  # fmt: skip

CORRECT = [
    Alternative("1 multipass", "the prefetch offset from the phase width", old="k1 = (g + 1) * TK",
                new="k1 = g * TK + TK"),
]  # fmt: skip

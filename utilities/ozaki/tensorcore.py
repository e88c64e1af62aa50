"""Ozaki-I DGEMM emulation on int8 tensor cores (GPU only): unfused, partially fused and fully fused.

Stages (each compared bit for bit with ``utilities.ozaki``'s reference by the checkers):
1. shifts and slices: the plain numba kernels of ``utilities.ozaki.simt``;
2. slice products on int8 tensor cores through nvmath.device ``Matmul`` + ``DevicePipeline`` (TMA loads,
   WGMMA on Hopper): all S(S+1)/2 products (unfused), or the S anti-diagonals accumulated in the block
   (partially fused), or everything up to C inside the block (fully fused);
3. the FP64 epilogue: ``utilities.ozaki.simt.make_epilogue_kernel``, or inside the fused kernel.

The slices of A live in one int8 buffer (S, m, k) and those of B in (S, n, k); the pipeline sees them as 3-D
tensors (m, k, S) and (k, n, S), so ``reset_tile(tile, (i, s), (j, t))`` points one block's pipeline at the
tile pair of slices s and t without a new pipeline object.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cupy as cp
import numpy as np
from numba import cuda, float64, int32
from nvmath.device import Matmul
from nvmath.device.common import make_tensor
from nvmath.device.cublasdx_numba import pipeline_extensions

from .. import plans
from ..guard import Canvas, Written
from ..machinery import launch, pipelines
from ..operands import require_fp64_gemm
from ..smem import ceil_to
from ..tiles import pipeline_matmul
from . import simt as plain
from .products import check_int32_budget, product_terms
from .simt import grouped_tile
from .slicing import check_slices

VARIANTS = ("unfused", "partial", "fused")
SLICE_CAPACITY = 10  # slice buffers hold this many slices (more if asked): one kernel build for S = 1..10
NONFINITE_SHIFT = plain.NONFINITE_SHIFT


@dataclass(frozen=True)
class Kernels(plans.Kernels):
    """Kernel factories that a plan uses instead of the course's own (the exercises pass the attendee's).

    None means the course's: ``make_split_digits``, ``make_epilogue_kernel`` (``utilities.ozaki.simt``),
    ``make_products_kernel``, ``make_diagonals_kernel``, ``make_fused_kernel`` (this module). Fields are in the
    order the stages run, which is the order a checker reads their TODO regions in.
    """

    split_digits: Callable[..., Any] | None = None
    products: Callable[..., Any] | None = None
    diagonals: Callable[..., Any] | None = None
    fused: Callable[..., Any] | None = None
    epilogue: Callable[..., Any] | None = None

    def course(self) -> dict[str, Callable[..., Any]]:
        return {
            "split_digits": plain.make_split_digits,
            "products": make_products_kernel,
            "diagonals": make_diagonals_kernel,
            "fused": make_fused_kernel,
            "epilogue": plain.make_epilogue_kernel,
        }


@dataclass(frozen=True, kw_only=True)
class OzakiConfig(plans.TileConfig):
    """Block tile of the int8 GEMM and the ``depth`` of its pipeline (K stages in flight). Chosen per GPU by
    :func:`tile_config`."""

    tile_k: int = 128
    depth: int = 3


def compute_capability() -> tuple[int, int]:
    return tuple(cuda.get_current_device().compute_capability)


def tile_config(variant: str, cc: tuple[int, int] | None = None) -> OzakiConfig:
    """A tile that suits the GPU: 128x128x128 where shared memory allows (sm_80, sm_90), 64-deep K on sm_86/89.

    256 threads (two warpgroups on Hopper): the fused kernel holds an FP64 accumulator beside the int32 one,
    and 64 + 2 x 64 registers of accumulators per thread still fit; on an H100 this configuration also ran the
    int8 products faster than 128 threads (``instructor-notes/ozaki.md``, "256 threads"). All variants use it, so
    that they differ only in what they fuse.
    """
    cc = cc or compute_capability()
    if cc[0] < 8:
        raise RuntimeError(f"compute capability {cc[0]}.{cc[1]}: int8 tensor-core pipelines need sm_80 or newer")
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    threads = 256
    if cc in {(8, 6), (8, 7), (8, 9), (12, 0), (12, 1)}:  # about 100 KiB of shared memory per block
        return OzakiConfig(tile_m=128, tile_n=128, tile_k=64, threads=threads, depth=3)
    return OzakiConfig(tile_m=128, tile_n=128, tile_k=128, threads=threads, depth=3)


def int8_matmul(cfg: OzakiConfig, sm: int | None = None) -> Matmul:
    """The block-level int8 x int8 -> int32 GEMM: A row-major, B column-major (both K-contiguous), C row-major.

    The pipelined block GEMM (``utilities.tiles.pipeline_matmul``, as track 1's library reference): each slice
    product is one more pass over the same tiles.
    """
    return pipeline_matmul("int8", cfg.tile_m, cfg.tile_n, cfg.threads, sm, tile_k=cfg.tile_k)


# ------------------------------------------------------------------------------------------------------------
# Kernels on tensor cores
# ------------------------------------------------------------------------------------------------------------


@functools.cache
def make_products_kernel(MM: Matmul):
    """Unfused: block (i, j, p) computes tile (i, j) of product p = (s, t), A_s @ B_t, into ``products[p]``."""
    TM, TN, _ = MM.size

    @cuda.jit(extensions=pipeline_extensions, launch_bounds=(MM.block_size, 1))
    def ozaki_products_kernel(products, term_s, term_t, device_pipeline):
        smem = cuda.shared.array(shape=(0,), dtype=np.byte, alignment=device_pipeline.buffer_alignment)
        (bx, by), p = grouped_tile(), cuda.blockIdx.z
        # TODO (about 1 line): the slices s and t of product p, for get_tile's (tile, slice) indices
        # SKELETON: s, t = 0, 0
        # BEGIN SOLUTION
        s, t = term_s[p], term_t[p]
        # END SOLUTION
        tile = device_pipeline.get_tile(smem, (bx, int32(s)), (by, int32(t)))
        acc = MM.suggest_accumulator()
        tile.execute(acc)
        tile._del()
        out = make_tensor(
            products[p, bx * TM : (bx + 1) * TM, by * TN : (by + 1) * TN], MM.get_layout_gmem_c(products.shape[2])
        )
        if acc.is_thread_active():
            acc.partition_and_copy(acc.get_results(), out)

    return ozaki_products_kernel


@functools.cache
def make_diagonals_kernel(MM: Matmul):
    """Partially fused: block (i, j) accumulates each anti-diagonal d = s + t in int32 and writes it once.

    The number of slices is ``diagonals.shape[0]``: a run-time value, so one kernel serves every slice count.
    """
    TM, TN, _ = MM.size

    @cuda.jit(extensions=pipeline_extensions, launch_bounds=(MM.block_size, 1))
    def ozaki_diagonals_kernel(diagonals, device_pipeline):
        smem = cuda.shared.array(shape=(0,), dtype=np.byte, alignment=device_pipeline.buffer_alignment)
        bx, by = grouped_tile()
        tile = device_pipeline.get_tile(smem, (bx, int32(0)), (by, int32(0)))
        acc = MM.suggest_accumulator()
        for d in range(diagonals.shape[0]):
            acc.clear()
            # TODO (about 3 lines): accumulate the products A_s @ B_t with s + t == d into acc
            # BEGIN SOLUTION
            for s in range(d + 1):
                device_pipeline.reset_tile(tile, (bx, int32(s)), (by, int32(d - s)))
                tile.execute(acc)
            # END SOLUTION
            out = make_tensor(
                diagonals[d, bx * TM : (bx + 1) * TM, by * TN : (by + 1) * TN], MM.get_layout_gmem_c(diagonals.shape[2])
            )
            if acc.is_thread_active():
                acc.partition_and_copy(acc.get_results(), out)
        tile._del()

    return ozaki_diagonals_kernel


@functools.cache
def make_fused_kernel(MM: Matmul):
    """Fully fused: each diagonal's int32 sum becomes FP64 in registers, shifted and scaled into C; only C is written.

    Diagonals run from the smallest weight to the largest so that the FP64 sum is the reference's, bit for bit.
    ``slices`` is a run-time argument: one kernel serves every slice count.
    """
    TM, TN, _ = MM.size
    FRAGMENT = MM.suggest_layout_rmem_c().size

    @cuda.jit(extensions=pipeline_extensions, launch_bounds=(MM.block_size, 1))
    def ozaki_fused_kernel(alpha, beta, c, out, e, f, slices, device_pipeline):
        smem = cuda.shared.array(shape=(0,), dtype=np.byte, alignment=device_pipeline.buffer_alignment)
        bx, by = grouped_tile()
        tile = device_pipeline.get_tile(smem, (bx, int32(0)), (by, int32(0)))
        acc = MM.suggest_accumulator()
        total = cuda.local.array(FRAGMENT, float64)
        for i in range(FRAGMENT):
            total[i] = 0.0
        for d in range(slices - 1, -1, -1):
            acc.clear()
            for s in range(d + 1):
                device_pipeline.reset_tile(tile, (bx, int32(s)), (by, int32(d - s)))
                tile.execute(acc)
            # TODO (about 4 lines): add this diagonal, weighted by 2^(-8d), into the FP64 total
            # SKELETON: pass
            # BEGIN SOLUTION
            part = acc.get_results()
            weight = math.ldexp(1.0, -8 * d)
            for i in range(FRAGMENT):
                total[i] += float64(part[i]) * weight
            # END SOLUTION
        tile._del()
        if acc.is_thread_active():
            for i in range(FRAGMENT):
                r, q = acc.map_fragment_index(i)
                row, col = bx * TM + r, by * TN + q
                if row < out.shape[0] and col < out.shape[1]:
                    # TODO (about 7 lines): NaN where e[row] or f[col] is the sentinel NONFINITE_SHIFT (that row of A
                    # or column of B holds a NaN or an Inf); else alpha * ldexp(total[i], int(e[row] + f[col] - 14)),
                    # plus beta * c[row, col] only if beta != 0 (C is not read when beta == 0)
                    # SKELETON: out[row, col] = math.nan
                    # BEGIN SOLUTION
                    if e[row] == NONFINITE_SHIFT or f[col] == NONFINITE_SHIFT:
                        out[row, col] = math.nan
                    else:
                        value = alpha * math.ldexp(total[i], int(e[row] + f[col] - 14))
                        if beta != 0.0:
                            value += beta * c[row, col]
                        out[row, col] = value
                    # END SOLUTION

    return ozaki_fused_kernel


# ------------------------------------------------------------------------------------------------------------
# The plan: buffers, pipeline and kernels for one problem shape
# ------------------------------------------------------------------------------------------------------------


class OzakiGemm:
    """C = alpha A @ B + beta C emulated with ``slices`` int8 slices (or ``"auto"``: chosen from the inputs on every
    call, as ``Ozaki2Gemm(moduli="auto")`` chooses its moduli; ``self.choice`` says what and why), for one shape and
    one variant.

    Shapes that do not divide the tile are padded inside (the padding holds zero digits); the output is
    written only where C is. Building a plan builds its kernels (cached on disk by ``utilities.machinery.buildcache``).
    """

    def __init__(
        self,
        m: int,
        n: int,
        k: int,
        slices: int | str = 7,
        variant: str = "fused",
        cfg: OzakiConfig | None = None,
        kernels: Kernels | None = None,
    ):
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
        self.auto = slices == "auto"
        self.stats = self.tables = self.choice = None
        if self.auto:  # the count is chosen on every call, from the statistics Ozaki-II's choice reads too
            from ..precision_gpu import GemmStatistics, scheme_tables
            from .precision import scheme, slice_counts

            counts = slice_counts(k)
            if not counts:
                raise ValueError(f"k = {k}: no slice count keeps the anti-diagonal sums within int32")
            self.tables = scheme_tables(scheme(k), k, plain.choice_offset, counts)
            self.stats = GemmStatistics(m, n, k)
            slices = max(counts)  # buffers for the largest count the choice may take
        slices = check_slices(slices)
        self.m, self.n, self.k, self.slices, self.variant = m, n, k, slices, variant
        self.max_slices = slices
        self.kernels = kernels or Kernels()
        self.cfg = cfg or tile_config(variant)
        check_int32_budget(k, slices, terms_per_accumulator=1 if variant == "unfused" else None)
        c = self.cfg
        self.mp, self.np_, self.kp = ceil_to(m, c.tile_m), ceil_to(n, c.tile_n), ceil_to(k, c.tile_k)
        if self.kp // c.tile_k < c.depth:
            raise ValueError(
                f"K = {k} is too small for a {c.depth}-stage pipeline of {c.tile_k}-deep tiles: "
                f"use K >= {c.depth * c.tile_k}, or an OzakiConfig with a smaller depth or tile_k"
            )
        self.MM = int8_matmul(self.cfg)
        S = slices
        # Room for SLICE_CAPACITY slices whatever S is: the slice buffers keep one shape for every slice count
        # (which matters where pipelines are per shape: with another stack than the verified one).
        capacity = max(S, SLICE_CAPACITY)
        self.a_slices = cp.zeros((capacity, self.mp, self.kp), dtype=cp.int8)
        self.b_slices = cp.zeros((capacity, self.np_, self.kp), dtype=cp.int8)
        self._a_words, self._b_words = self.a_slices.view(cp.int32), self.b_slices.view(cp.int32)  # 4 digits a word
        self.e = cp.zeros(self.mp, dtype=cp.int32)
        self.f = cp.zeros(self.np_, dtype=cp.int32)
        self._mu = cp.zeros(n, dtype=cp.float64)
        self._bad = cp.zeros(n, dtype=cp.int32)
        # the pipeline sees (m, k, S) and (k, n, S) views of the slice buffers
        self.pipeline = pipelines.device_pipeline(
            self.MM, c.depth, self.a_slices.transpose(1, 2, 0), self.b_slices.transpose(2, 1, 0)
        )
        terms = product_terms(S)
        self.term_s = cp.asarray([s for s, _ in terms], dtype=cp.int32)
        self.term_t = cp.asarray([t for _, t in terms], dtype=cp.int32)
        if variant == "unfused":
            self.terms = cp.zeros((len(terms), self.mp, self.np_), dtype=cp.int32)
            self.offsets = cp.asarray([d * (d + 1) // 2 for d in range(S + 1)], dtype=cp.int32)
        elif variant == "partial":
            self.terms = cp.zeros((S, self.mp, self.np_), dtype=cp.int32)
            self.offsets = cp.arange(S + 1, dtype=cp.int32)
        self.grid = (self.mp // c.tile_m, self.np_ // c.tile_n)
        self._all_terms = getattr(self, "terms", None)

    def use_slices(self, slices: int) -> None:
        """Run the next calls with ``slices`` slices, at most the count the buffers were built for (the automatic
        choice calls this; the fused kernel reads the count at run time, the slicing kernels are built per count)."""
        S = check_slices(slices)
        if S > self.max_slices:
            raise ValueError(f"{S} slices: this plan's buffers hold at most {self.max_slices} slices")
        self.slices = S
        if self.variant == "unfused":
            terms = product_terms(S)
            self.terms = self._all_terms[: len(terms)]
            self.term_s = cp.asarray([s for s, _ in terms], dtype=cp.int32)
            self.term_t = cp.asarray([t for _, t in terms], dtype=cp.int32)
            self.offsets = cp.asarray([d * (d + 1) // 2 for d in range(S + 1)], dtype=cp.int32)
        elif self.variant == "partial":
            self.terms = self._all_terms[:S]
            self.offsets = cp.arange(S + 1, dtype=cp.int32)

    def choose(self, a: Any, b: Any) -> Any:
        """The slice count for these operands (``slices="auto"``): statistics and choice on the GPU, one small copy to
        the host (``utilities.precision_gpu``); the plan then runs with it."""
        if self.stats is None:
            raise RuntimeError(f"this plan has a fixed count ({self.slices} slices): it chooses nothing")
        self.stats.compute(a, b)
        self.choice = self.stats.choose(self.tables)
        self.use_slices(self.choice.count)
        return self.choice

    # -- stages ------------------------------------------------------------------------------------------------
    def slice(self, a: Any, b: Any) -> None:
        """Stage 1: shifts and slices of A (rows) and B (columns)."""
        m, n, k, S = self.m, self.n, self.k, self.slices
        split = self.kernels.factory("split_digits")
        args = (
            (a, self._a_words, self.e),
            (b, self._mu, self._bad),  # the maxima start at zero, and shifts_from_max zeroes them again
            (self._mu, self._bad, self.f),
            (b, self.f, self._b_words),
        )
        for step, step_args in zip(plain.slicing_launches(m, n, k, self.kp, S, split), args, strict=True):
            launch.launch(step.kernel, step.grid, step.block, 0, *step_args)

    def products(self) -> None:
        """Stage 2 of the unfused and partially fused variants: int32 products or anti-diagonals."""
        shared, block = self.pipeline.buffer_size, self.pipeline.block_dim
        # the DevicePipeline argument takes numba's dispatcher inside launch.launch: nvmath packs it, not the fast path
        if self.variant == "unfused":
            kernel = self.kernels.factory("products")(self.MM)
            grid = (*self.grid, self.terms.shape[0])
            launch.launch(kernel, grid, block, shared, self.terms, self.term_s, self.term_t, self.pipeline)
        elif self.variant == "partial":
            kernel = self.kernels.factory("diagonals")(self.MM)
            launch.launch(kernel, self.grid, block, shared, self.terms, self.pipeline)
        else:
            raise RuntimeError("the fused variant has no separate products stage")

    def epilogue(self, out: Any, c: Any, alpha: float, beta: float) -> None:
        """Stage 3 of the unfused and partially fused variants: C from the int32 terms."""
        step = plain.epilogue_launch(self.m, self.n, self.kernels.factory("epilogue"))
        args = (self.terms, self.offsets, self.e, self.f, np.float64(alpha), np.float64(beta), c, out)
        launch.launch(step.kernel, step.grid, step.block, 0, *args)

    def fused(self, out: Any, c: Any, alpha: float, beta: float) -> None:
        """Stages 2 and 3 of the fused variant: one kernel from the slices to C."""
        kernel = self.kernels.factory("fused")(self.MM)
        args = (float(alpha), float(beta), c, out, self.e, self.f, self.slices, self.pipeline)
        # the DevicePipeline argument takes numba's dispatcher inside launch.launch: nvmath packs it, not the fast path
        launch.launch(kernel, self.grid, self.pipeline.block_dim, self.pipeline.buffer_size, *args)

    def __call__(self, a: Any, b: Any, c: Any = None, alpha: float = 1.0, beta: float = 0.0, out: Any = None) -> Any:
        require_fp64_gemm(a, b, c, beta, (self.m, self.k, self.n))
        if self.auto:
            self.choose(a, b)
        out = cp.empty((self.m, self.n), dtype=cp.float64) if out is None else out
        c_arg = out if c is None else c
        self.slice(a, b)
        if self.variant == "fused":
            self.fused(out, c_arg, float(alpha), float(beta))
        else:
            self.products()
            self.epilogue(out, c_arg, float(alpha), float(beta))
        return out


def slice_rows_on_gpu(
    a: np.ndarray, slices: int, split_digits_factory: Callable[[int], Any] | None = None
) -> tuple[Written, Written]:
    """Stage 1 alone, for the checkers: the row slices (S, m, k) and shifts (m,) of a host matrix, on the GPU, each
    from a guard band (``utilities.guard``)."""
    m, k = a.shape
    kp = ceil_to(k, 128)
    words = Canvas((slices, m, kp // 4), cp.int32, xp=cp, fill=0)  # in a guard band: a stray write shows
    e = Canvas((m,), cp.int32, xp=cp, fill=0)
    threads = plain.ROWS_THREADS
    kernel = plain.make_slice_rows_kernel(k, kp, slices, threads, split_digits_factory or plain.make_split_digits)
    launch.launch(kernel, m, threads, 0, cp.asarray(a, dtype=cp.float64), words.out, e.out)
    planes = words.written()
    return Written(planes.value.view(np.int8)[:, :, :k], planes.breaches), e.written()


def epilogue_on_gpu(
    terms: np.ndarray,
    offsets: np.ndarray,
    e: np.ndarray,
    f: np.ndarray,
    alpha: float,
    beta: float,
    c: np.ndarray,
    epilogue_factory: Callable[[], Any] | None = None,
) -> Written:
    """Stage 3 alone, for the checkers: C from the int32 terms (T, m, n), diagonal d's being
    ``terms[offsets[d]:offsets[d + 1]]`` (the unfused products or the partial variant's diagonals), on the GPU,
    from a guard band."""
    _, m, n = terms.shape
    out = Canvas((m, n), cp.float64, xp=cp, fill=np.nan)  # in a guard band: a stray write shows
    step = plain.epilogue_launch(m, n, epilogue_factory)
    args = (cp.asarray(terms), cp.asarray(offsets, dtype=cp.int32), cp.asarray(e), cp.asarray(f))
    scalars = (np.float64(alpha), np.float64(beta))
    launch.launch(step.kernel, step.grid, step.block, 0, *args, *scalars, cp.asarray(c), out.out)
    return out.written()

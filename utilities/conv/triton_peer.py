"""A peer written in Python by other means: relu(conv3x3(x, w) + bias) as an implicit GEMM in Triton.

What an attendee could write next week without the course's stack: one Triton program per BLOCK_M pixels by
BLOCK_N output channels loops over the 9 taps and BLOCK_K channels at a time, loads its A block with a mask that
reads zeros in the padding (the index map, as masks), multiplies with ``tl.dot`` into an FP32 accumulator, and
adds the bias and the ReLU before its one FP16 store. Triton picks the MMA instructions, the shared-memory layout
and the software pipeline (``num_stages``) itself; ``triton.autotune`` picks the block sizes at the shape.

Neither Triton nor PyTorch is a dependency of the course: without them this module imports, ``available()`` says
why, and the benchmarks go on without the peer. On a CPU, ``TRITON_INTERPRET=1`` runs the kernel in Triton's
interpreter on PyTorch CPU tensors (the tests do, where both are installed). Layouts as ``utilities.conv.reference``:
x NHWC, w (3, 3, C_in, C_out), bias (C_out,), out NHWC.
"""

from __future__ import annotations

from typing import Any

try:
    import triton
    import triton.language as tl
except ImportError:  # the peer is optional
    triton = None


def available() -> str | None:
    """None when Triton and PyTorch import here (and, outside the interpreter, PyTorch sees a GPU), else why not."""
    import os

    if triton is None:
        return "Triton is not installed: the Triton peer is left out"
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed (Triton launches on its tensors): the Triton peer is left out"
    if os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available():
        return "PyTorch sees no GPU: the Triton peer is left out"
    return None


if triton is not None:

    @triton.jit
    def conv3x3_bias_relu_kernel(
        x_ptr, w_ptr, bias_ptr, out_ptr,  # x (M, C_IN), w (9 C_IN, C_OUT), bias (C_OUT,), out (M, C_OUT)
        M, H, W, C_IN, C_OUT,  # sizes: M = B H W pixels
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,  # meta-parameters
    ):  # fmt: skip
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        ks = tl.arange(0, BLOCK_K)
        h = (rows // W) % H
        w = rows % W
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for tap in range(9):
            dr = tap // 3 - 1
            ds = tap % 3 - 1
            inside = (rows < M) & (h + dr >= 0) & (h + dr < H) & (w + ds >= 0) & (w + ds < W)
            src = (rows + dr * W + ds).to(tl.int64)  # the input pixel tap (r, s) reads
            for c0 in range(0, C_IN, BLOCK_K):
                kin = c0 + ks < C_IN
                a = tl.load(x_ptr + src[:, None] * C_IN + (c0 + ks)[None, :], mask=inside[:, None] & kin[None, :],
                            other=0.0)  # fmt: skip
                b = tl.load(w_ptr + (tap * C_IN + c0 + ks)[:, None] * C_OUT + cols[None, :],
                            mask=kin[:, None] & (cols[None, :] < C_OUT), other=0.0)  # fmt: skip
                acc += tl.dot(a, b)
        bias = tl.load(bias_ptr + cols, mask=cols < C_OUT, other=0.0).to(tl.float32)
        y = tl.maximum(acc + bias[None, :], 0.0)
        out = out_ptr + rows.to(tl.int64)[:, None] * C_OUT + cols[None, :]
        tl.store(out, y.to(tl.float16), mask=(rows[:, None] < M) & (cols[None, :] < C_OUT))

    CONFIGS = [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}, num_warps=warps, num_stages=st)
        for bm, bn, bk, warps, st in (
            (128, 64, 64, 4, 3),
            (128, 64, 64, 8, 4),
            (64, 64, 64, 4, 4),
            (128, 64, 32, 4, 4),
            (256, 64, 64, 8, 3),
            (128, 32, 64, 4, 4),
        )
    ]
    tuned_kernel = triton.autotune(configs=CONFIGS, key=["M", "C_IN", "C_OUT"])(conv3x3_bias_relu_kernel)


def conv3x3_bias_relu(x: Any, w: Any, bias: Any, out: Any = None, *, block: tuple[int, int, int] | None = None) -> Any:
    """relu(conv3x3(x, w) + bias) on PyTorch FP16 tensors (NHWC x, (3, 3, C_in, C_out) w); ``block`` = (BLOCK_M,
    BLOCK_N, BLOCK_K) fixes the blocks (no autotuning: what the interpreter runs), else the autotuner picks."""
    import torch

    why = available()
    if why is not None:
        raise RuntimeError(why)
    b, height, width, c_in = x.shape
    c_out = w.shape[3]
    if w.shape[:3] != (3, 3, c_in) or bias.shape != (c_out,):
        raise ValueError(
            f"w must be (3, 3, {c_in}, C_out) and bias (C_out,), got {tuple(w.shape)} and {tuple(bias.shape)}"
        )
    if c_in % 16 or c_out % 16:
        raise ValueError(f"C_in = {c_in} and C_out = {c_out} must be multiples of 16 (tl.dot's smallest K and N)")
    m = b * height * width
    out = torch.empty((b, height, width, c_out), dtype=torch.float16, device=x.device) if out is None else out
    args = (x.contiguous(), w.contiguous(), bias.contiguous(), out, m, height, width, c_in, c_out)
    if block is None:
        grid = lambda meta: (triton.cdiv(m, meta["BLOCK_M"]), triton.cdiv(c_out, meta["BLOCK_N"]))  # noqa: E731
        tuned_kernel[grid](*args)
    else:
        bm, bn, bk = block
        conv3x3_bias_relu_kernel[(triton.cdiv(m, bm), triton.cdiv(c_out, bn))](
            *args, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk
        )
    return out


class TritonConv:
    """The peer on CuPy arrays (zero-copy PyTorch views through DLPack), autotuned at its first call."""

    def __call__(self, x: Any, w: Any, bias: Any, out: Any) -> Any:
        import torch

        conv3x3_bias_relu(*(torch.from_dlpack(v) for v in (x, w, bias)), out=torch.from_dlpack(out))
        return out

    @property
    def which(self) -> str:
        best = getattr(tuned_kernel, "best_config", None) if triton is not None else None
        return f"triton {triton.__version__}, {best}" if best is not None else "triton"

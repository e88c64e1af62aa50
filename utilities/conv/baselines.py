"""The other paths of the convolution (GPU only): unfused course path, im2col + cuBLAS, and cuDNN through PyTorch.

- ``UnfusedConv``: the course's kernel storing the convolution in FP16, then one CuPy elementwise kernel,
  ``relu(p + bias)`` (``utilities.cublas.bias_relu``).
- ``Im2colConv``: nine strided copies build A (B H W x 9 C_in) in HBM, ``cupy.matmul`` (cuBLAS, FP32 compute),
  then the same elementwise kernel. A's padding entries are zeroed once, when the plan is made.
- ``CudnnConv``: PyTorch's cuDNN convolution on channels-last FP16 tensors (zero-copy views of the CuPy arrays
  through DLPack), with ``torch.backends.cudnn.benchmark`` on. ``which = "cudnn fused"`` when
  ``torch.cudnn_convolution_relu`` (cuDNN's convolution + bias + activation in one call) runs, else
  ``"cudnn + relu"`` (convolution with bias, then an in-place ReLU). PyTorch is no dependency of the course: where
  it does not import, or cuDNN does not load, ``CudnnConv.available()`` says why.

- ``CudnnB2B`` (notebook 2d): the back-to-back chain as two cuDNN calls, D0 through global memory.

Every path returns NHWC FP16 of shape (B, H, W, C_out) and moves the bytes ``utilities.conv.model`` counts.
"""

from __future__ import annotations

from typing import Any

import cupy as cp

from .. import cublas
from .reference import TAPS, ConvShape
from .tensorcore import Conv3x3


class UnfusedConv:
    """The course's convolution kernel (no epilogue), then the bias + ReLU kernel."""

    def __init__(self, shape: ConvShape, **plan: Any):
        self.shape = shape
        self.conv = Conv3x3(shape, fused=False, **plan)
        self.p = cp.empty((shape.batch, shape.height, shape.width, shape.c_out), cp.float16)

    def __call__(self, x: Any, w: Any, bias: Any, out: Any = None) -> Any:
        out = cp.empty_like(self.p) if out is None else out
        self.conv(x, w, bias, out=self.p)
        cublas.bias_relu(self.p, bias, out)
        return out


class Im2colConv:
    """im2col into HBM, cuBLAS GEMM, bias + ReLU."""

    def __init__(self, shape: ConvShape):
        self.shape = s = shape
        self.a = cp.zeros((s.batch, s.height, s.width, TAPS, s.c_in), cp.float16)  # the padding stays zero
        self.p = cp.empty((s.m, s.c_out), cp.float16)

    def __call__(self, x: Any, w: Any, bias: Any, out: Any = None) -> Any:
        s = self.shape
        out = cp.empty((s.batch, s.height, s.width, s.c_out), cp.float16) if out is None else out
        for t in range(TAPS):
            dr, ds = t // 3 - 1, t % 3 - 1  # tap (r, s) reads (h + dr, w + ds)
            rows, cols = slice(max(0, -dr), s.height - max(0, dr)), slice(max(0, -ds), s.width - max(0, ds))
            src_rows, src_cols = slice(max(0, dr), s.height + min(0, dr)), slice(max(0, ds), s.width + min(0, ds))
            self.a[:, rows, cols, t, :] = x[:, src_rows, src_cols, :]
        cp.matmul(self.a.reshape(s.m, s.k), w.reshape(s.k, s.c_out), out=self.p)
        cublas.bias_relu(self.p, bias, out.reshape(s.m, s.c_out))
        return out


class CudnnConv:
    """cuDNN's convolution through PyTorch, on zero-copy channels-last views; ``which`` names the call that ran."""

    @staticmethod
    def available() -> str | None:
        """None when PyTorch with cuDNN is importable here, else why not."""
        try:
            import torch
        except ImportError as exc:
            return f"PyTorch is not installed ({exc}): the library baseline is im2col + cuBLAS"
        if not torch.cuda.is_available() or not torch.backends.cudnn.is_available():
            return "PyTorch sees no GPU or no cuDNN: the library baseline is im2col + cuBLAS"
        return None

    def __init__(self, shape: ConvShape, w: Any, bias: Any):
        import torch

        self.torch, self.shape = torch, shape
        torch.backends.cudnn.benchmark = True
        self.w = torch.from_dlpack(w).permute(3, 2, 0, 1).contiguous(memory_format=torch.channels_last)
        self.bias = torch.from_dlpack(bias)
        self.which = "cudnn fused"
        try:
            x = torch.zeros((shape.batch, shape.c_in, shape.height, shape.width), dtype=torch.float16, device="cuda")
            self._fused(x.contiguous(memory_format=torch.channels_last))
        except (AttributeError, RuntimeError):
            self.which = "cudnn + relu"

    def _fused(self, x: Any) -> Any:
        return self.torch.cudnn_convolution_relu(x, self.w, self.bias, (1, 1), (1, 1), (1, 1), 1)

    def __call__(self, x: Any) -> Any:
        """relu(conv(x) + bias) as an NHWC CuPy array (a view of PyTorch's channels-last result)."""
        torch = self.torch
        xt = torch.from_dlpack(x).permute(0, 3, 1, 2)  # NCHW indexing of the NHWC data: channels-last
        if self.which == "cudnn fused":
            y = self._fused(xt)
        else:
            y = torch.nn.functional.conv2d(xt, self.w, self.bias, padding=1).relu_()
        return cp.from_dlpack(y.permute(0, 2, 3, 1))


class CudnnB2B:
    """The back-to-back chain in the library: cuDNN twice through PyTorch, D0 through global memory. Each call is
    cuDNN's fused convolution + bias + ReLU where it runs (a zero bias for the first), else convolution then ReLU."""

    def __init__(self, w0: Any, w1: Any, bias1: Any):
        import torch

        self.torch = torch
        torch.backends.cudnn.benchmark = True
        self.w0 = torch.from_dlpack(w0).permute(3, 2, 0, 1).contiguous(memory_format=torch.channels_last)
        self.w1 = torch.from_dlpack(w1).t()[:, :, None, None].contiguous(memory_format=torch.channels_last)
        self.bias1 = torch.from_dlpack(bias1)
        self.zero = torch.zeros(self.w0.shape[0], dtype=torch.float16, device="cuda")
        self.which = "cudnn fused, twice"
        try:
            torch.cudnn_convolution_relu  # noqa: B018 - present in the builds that have it
        except AttributeError:
            self.which = "cudnn + relu, twice"

    def __call__(self, x: Any) -> Any:
        torch = self.torch
        xt = torch.from_dlpack(x).permute(0, 3, 1, 2)  # channels-last NCHW view of the NHWC data
        if self.which == "cudnn fused, twice":
            d0 = torch.cudnn_convolution_relu(xt, self.w0, self.zero, (1, 1), (1, 1), (1, 1), 1)
            y = torch.cudnn_convolution_relu(d0, self.w1, self.bias1, (1, 1), (0, 0), (1, 1), 1)
        else:
            d0 = torch.nn.functional.conv2d(xt, self.w0, padding=1).relu_()
            y = torch.nn.functional.conv2d(d0, self.w1, self.bias1).relu_()
        return cp.from_dlpack(y.permute(0, 2, 3, 1))

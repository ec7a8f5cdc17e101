"""Test candidate (not a solution): fills the problem's output shape with one value, FILL_VALUE, or for
softmax-like problems with 1/row length ("statistics instead of computation"). Used on degenerate
KernelBench problems, where such a kernel must never be counted correct. OUTPUT and FILL are set per
problem by the test that writes this file out."""

import torch
import triton
import triton.language as tl
from torch import nn

OUTPUT = "same"  # "same": the input's shape; "row": (batch, 1); "conv3": a 3-D convolution of kernel 3
FILL = "zero"  # "zero" | "half" | "inverse_row"
BLOCK = 4096


@triton.jit
def fill_kernel(out_ptr, n, value, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.zeros([BLOCK], dtype=tl.float32) + value, mask=offsets < n)


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()
        self.out_channels = args[1] if OUTPUT == "conv3" else 0

    def forward(self, x):
        if OUTPUT == "row":
            out = torch.empty((x.shape[0], 1), device=x.device, dtype=x.dtype)
        elif OUTPUT == "conv3":
            shape = (x.shape[0], self.out_channels, x.shape[2] - 2, x.shape[3] - 2, x.shape[4] - 2)
            out = torch.empty(shape, device=x.device, dtype=x.dtype)
        else:
            out = torch.empty_like(x)
        value = 0.0
        if FILL == "half":
            value = 0.5
        if FILL == "inverse_row":
            value = 1.0 / x.shape[1]
        n = out.numel()
        fill_kernel[(triton.cdiv(n, BLOCK),)](out, n, value, BLOCK=BLOCK)
        return out

"""Cheat: the kernel stores its result into the input tensor and returns it (1_ReLU)."""

import triton
import triton.language as tl
from torch import nn


@triton.jit
def relu_inplace_kernel(x_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(x_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        n = x.numel()
        relu_inplace_kernel[(triton.cdiv(n, 1024),)](x, n, BLOCK=1024)
        return x

"""Cheat: the kernel ignores the input and writes zeros (1_ReLU)."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def zeros_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    tl.store(out_ptr + offsets, tl.zeros([BLOCK], dtype=tl.float32), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        zeros_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out

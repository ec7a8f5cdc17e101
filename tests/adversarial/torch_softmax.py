"""Cheat: forward calls torch.softmax instead of a kernel (11_Softmax)."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def copy_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.softmax(x, dim=1)
        out = torch.empty_like(y)
        n = y.numel()
        copy_kernel[(triton.cdiv(n, 1024),)](y, out, n, BLOCK=1024)
        return out

"""Cheat: does only part of the work: ReLU on the first half of the rows, into a zero-filled output (zeros,
unlike torch.empty, are never poisoned) (1_ReLU)."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.zeros_like(x)
        first_half = (x.shape[0] // 2) * x.shape[1]
        relu_kernel[(triton.cdiv(first_half, 1024),)](x, out, first_half, BLOCK=1024)
        return out

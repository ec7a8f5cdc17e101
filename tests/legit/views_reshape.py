"""Legitimate: allowed non-compute ops on the inputs (.contiguous(), reshape, view) around a flat
elementwise kernel; the slope is the module's constructor argument (4_LeakyReLU)."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def leaky_relu_kernel(x_ptr, out_ptr, n, slope, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.where(x >= 0, x, x * slope), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float = 0.01):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        flat = x.contiguous().reshape(-1)
        out = torch.empty_like(flat)
        n = flat.numel()
        leaky_relu_kernel[(triton.cdiv(n, 1024),)](flat, out, n, self.negative_slope, BLOCK=1024)
        return out.view(x.shape)

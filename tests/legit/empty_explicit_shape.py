"""Legitimate: the output is allocated with torch.empty (explicit shape, dtype, device) and every element of
it is written by the kernel (3_Sigmoid)."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def sigmoid_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask)
    tl.store(out_ptr + row * n_cols + cols, 1.0 / (1.0 + tl.exp(-x)), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        M, N = x.shape
        out = torch.empty((M, N), dtype=x.dtype, device=x.device)
        sigmoid_kernel[(M, triton.cdiv(N, 128))](x, out, N, BLOCK=128)
        return out

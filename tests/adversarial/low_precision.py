"""Cheat: computes an fp32 problem in fp16 (half the bytes, faster on tensor-core paths): the running sum is
kept in fp16 and drifts beyond the fp32 tolerance over a long row (16_Cumsum)."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def cumsum_fp16_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=0.0).to(tl.float16)
    tl.store(out_ptr + row * n_cols + offs, tl.cumsum(x, axis=0).to(tl.float32), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        x = x.contiguous()
        n_rows, n_cols = x.shape
        out = torch.empty_like(x)
        cumsum_fp16_kernel[(n_rows,)](x, out, n_cols, BLOCK=triton.next_power_of_2(n_cols))
        return out

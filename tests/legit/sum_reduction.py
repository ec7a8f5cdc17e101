"""Legitimate: sum over dim 1 of a 3-D tensor with tl.sum over [rows x columns] tiles, keepdim output
(7_SumReduction)."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def sum_dim1_kernel(x_ptr, out_ptr, D1, D2, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    rows = tl.arange(0, BLOCK_R)
    acc = tl.zeros([BLOCK_C], dtype=tl.float32)
    for r0 in range(0, D1, BLOCK_R):
        r = r0 + rows
        mask = (r[:, None] < D1) & (cols[None, :] < D2)
        tile = tl.load(x_ptr + b * D1 * D2 + r[:, None] * D2 + cols[None, :], mask=mask, other=0.0)
        acc += tl.sum(tile, axis=0)
    tl.store(out_ptr + b * D2 + cols, acc, mask=cols < D2)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        B, D1, D2 = x.shape
        out = torch.empty((B, 1, D2), dtype=x.dtype, device=x.device)
        sum_dim1_kernel[(B, triton.cdiv(D2, 64))](x, out, D1, D2, BLOCK_R=16, BLOCK_C=64)
        return out

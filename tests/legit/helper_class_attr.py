"""Legitimate: a module-level helper computes the grid, and the block size is a class attribute; max over
dim 1 (values only) (9_MaxReduction)."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def max_dim1_kernel(x_ptr, out_ptr, D1, D2, BLOCK_C: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = cols < D2
    best = tl.full([BLOCK_C], float("-inf"), dtype=tl.float32)
    for r in range(0, D1):
        best = tl.maximum(best, tl.load(x_ptr + b * D1 * D2 + r * D2 + cols, mask=mask, other=float("-inf")))
    tl.store(out_ptr + b * D2 + cols, best, mask=mask)


def column_grid(batch, columns, block):
    return (batch, triton.cdiv(columns, block))


class ModelNew(nn.Module):
    BLOCK_C = 128

    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        B, D1, D2 = x.shape
        out = torch.empty((B, D2), dtype=x.dtype, device=x.device)
        max_dim1_kernel[column_grid(B, D2, self.BLOCK_C)](x, out, D1, D2, BLOCK_C=self.BLOCK_C)
        return out

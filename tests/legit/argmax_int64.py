"""Legitimate: argmax over dim 1 with an int64 output (compared exactly), first index on ties like torch
(10_Argmax)."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def argmax_dim1_kernel(x_ptr, out_ptr, D1, D2, BLOCK_C: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = cols < D2
    best = tl.full([BLOCK_C], float("-inf"), dtype=tl.float32)
    where = tl.zeros([BLOCK_C], dtype=tl.int64)
    for r in range(0, D1):
        x = tl.load(x_ptr + b * D1 * D2 + r * D2 + cols, mask=mask, other=float("-inf"))
        better = x > best
        best = tl.where(better, x, best)
        where = tl.where(better, r, where)
    tl.store(out_ptr + b * D2 + cols, where, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        B, D1, D2 = x.shape
        out = torch.empty((B, D2), dtype=torch.int64, device=x.device)
        argmax_dim1_kernel[(B, triton.cdiv(D2, 128))](x, out, D1, D2, BLOCK_C=128)
        return out

"""Legitimate: x / sum(|x|) per row for short rows, several rows per program (2-D tile, tl.sum over axis 1)
(18_L1NormRows)."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def l1norm_kernel(x_ptr, out_ptr, n_rows, n_cols, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    offs = rows[:, None] * n_cols + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    norm = tl.sum(tl.abs(x), axis=1)
    tl.store(out_ptr + offs, x / norm[:, None], mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        n_rows, n_cols = x.shape
        out = torch.empty_like(x)
        l1norm_kernel[(triton.cdiv(n_rows, 32),)](x, out, n_rows, n_cols, ROWS=32, BLOCK=triton.next_power_of_2(n_cols))
        return out

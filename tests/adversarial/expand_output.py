"""Cheat: the output's rows are all equal, so the kernel computes one row and forward returns it expanded
(stride 0): a view that looks complete but holds 1/B of the elements (the test's ColumnSumRepeated
problem, defined in tests/test_adversarial.py)."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def column_sum_kernel(x_ptr, out_ptr, n_rows, n_cols, BLOCK: tl.constexpr):
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for r in range(0, n_rows):
        acc += tl.load(x_ptr + r * n_cols + cols, mask=mask, other=0.0)
    tl.store(out_ptr + cols, acc, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        n_rows, n_cols = x.shape
        row = torch.empty((1, n_cols), dtype=x.dtype, device=x.device)
        column_sum_kernel[(triton.cdiv(n_cols, 128),)](x, row, n_rows, n_cols, BLOCK=128)
        return row.expand(n_rows, n_cols)

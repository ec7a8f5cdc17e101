"""Fault: correct per-sample loss values, but returned as float64 instead of float32 (17_CrossEntropyLoss)."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def cross_entropy_kernel(x_ptr, t_ptr, out_ptr, n_cols, x_row_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_row_stride
    cols = tl.arange(0, BLOCK)
    m = float("-inf")
    s = 0.0
    for start in range(0, n_cols, BLOCK):
        offs = start + cols
        x = tl.load(x_row + offs, mask=offs < n_cols, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    target = tl.load(t_ptr + row)
    x_t = tl.load(x_row + target).to(tl.float32)
    tl.store(out_ptr + row, (m + tl.log(s) - x_t).to(tl.float64))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, targets):
        n_rows, n_cols = logits.shape
        out = torch.empty(n_rows, dtype=torch.float64, device=logits.device)
        BLOCK = min(1024, triton.next_power_of_2(n_cols))
        cross_entropy_kernel[(n_rows,)](logits, targets.contiguous(), out, n_cols, logits.stride(0), BLOCK=BLOCK)
        return out

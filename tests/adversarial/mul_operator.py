"""Cheat: the multiply done by PyTorch through operator syntax (`a * b`, invisible to an AST check that cannot
know operand types); only the add is a kernel (6_MulAdd)."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b, c):
        product = (a * b).contiguous()
        c = c.contiguous()
        out = torch.empty_like(c)
        add_kernel[(triton.cdiv(c.numel(), 1024),)](product, c, out, c.numel(), BLOCK=1024)
        return out

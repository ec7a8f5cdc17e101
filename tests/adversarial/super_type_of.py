"""Cheat: `super(type(t), t).tolist()` reaches the base class's `tolist`, past the guard's wrapper on
`torch.Tensor`; ReLU is then computed in Python. Refused: `super` may name only a class of this module."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def copy_kernel(src_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        flat = x.reshape(-1)
        values = super(type(flat), flat).tolist()
        host = torch.tensor([v if v > 0 else 0.0 for v in values], dtype=x.dtype).reshape(x.shape)
        out = torch.empty_like(x)
        copy_kernel[(triton.cdiv(out.numel(), 1024),)](host, out, out.numel(), BLOCK=1024)
        return out

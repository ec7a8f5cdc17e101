"""a * b + c as one Triton elementwise kernel."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def muladd_kernel(a_ptr, b_ptr, c_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    a = tl.load(a_ptr + offsets, mask=mask, other=0.0)
    b = tl.load(b_ptr + offsets, mask=mask, other=0.0)
    c = tl.load(c_ptr + offsets, mask=mask, other=0.0)
    tl.store(out_ptr + offsets, a * b + c, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b, c):
        a = a.contiguous()
        b = b.contiguous()
        c = c.contiguous()
        out = torch.empty_like(a)
        n = a.numel()
        BLOCK = 1024
        muladd_kernel[(triton.cdiv(n, BLOCK),)](a, b, c, out, n, BLOCK=BLOCK)
        return out

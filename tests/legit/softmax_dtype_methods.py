"""Legitimate: a row softmax whose forward converts dtypes by the short methods (`.float()` on the way in, the
input's own dtype on the way out), as `.to(dtype)` would; a conversion is not compute."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def softmax_kernel(x_ptr, out_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * cols + offs, mask=mask, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * cols + offs, e / tl.sum(e, axis=0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x32 = x.contiguous().float()
        out = torch.empty_like(x32)
        rows, cols = x32.shape
        softmax_kernel[(rows,)](x32, out, cols, BLOCK=triton.next_power_of_2(cols))
        return out.float() if x.dtype == torch.float32 else out.half()

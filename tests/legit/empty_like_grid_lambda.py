"""Legitimate: torch.empty_like output and a grid given as a lambda of the launch's meta-parameters; softplus
with PyTorch's threshold (5_Softplus)."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def softplus_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    soft = tl.log(1.0 + tl.exp(tl.minimum(x, 20.0)))
    tl.store(out_ptr + offs, tl.where(x > 20.0, x, soft), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)  # noqa: E731
        softplus_kernel[grid](x, out, n, BLOCK=256)
        return out

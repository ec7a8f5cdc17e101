"""Escape: a tensor method called on a kernel argument inside the body (the interpreter runs it as Python)."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def relu_kernel(x_ptr, X: tl.constexpr, OUT: tl.constexpr):
    OUT.copy_(X.clamp(min=0))


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        relu_kernel[(1,)](x, X=x, OUT=out)
        return out

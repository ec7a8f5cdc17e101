"""Escape: a kernel made by calling triton.jit, whose body the kernel rules (which know kernels by their
decorator) never read."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def unused_kernel(x_ptr):
    """A decorated kernel beside the one made by a call: the module has a kernel the rules read."""


def _body(x_ptr, X: tl.constexpr, OUT: tl.constexpr):
    OUT.copy_(torch.relu(X))


relu_kernel = triton.jit(_body)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        relu_kernel[(1,)](x, X=x, OUT=out)
        return out

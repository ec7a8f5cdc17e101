"""Switches the op guard's dispatch mode off for a block with torch's private `_disable_current_modes`, imported
in `from` form (the attribute-path rule saw only `torch.utils._python_dispatch.…` written out) (1_ReLU)."""

import torch
import triton
import triton.language as tl
from torch import nn
from torch.utils._python_dispatch import _disable_current_modes


@triton.jit
def touch_kernel(x_ptr, BLOCK: tl.constexpr):
    tl.load(x_ptr + tl.arange(0, BLOCK))


class ModelNew(nn.Module):
    def forward(self, x):
        touch_kernel[(1,)](x, BLOCK=1)
        out = torch.empty_like(x)
        with _disable_current_modes():
            out.copy_(x.clamp(min=0))
        return out

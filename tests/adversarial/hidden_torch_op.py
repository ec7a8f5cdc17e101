"""Cheat: torch compute hidden from the static check in a module-level lambda (`x.clamp(min=0)`) (1_ReLU)."""

import torch
import triton
import triton.language as tl
from torch import nn

# A lambda is not a FunctionDef, so the static check never walks its body.
_activate = lambda t: t.clamp(min=0)  # noqa: E731


@triton.jit
def copy_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = _activate(x)
        out = torch.empty_like(y)
        n = y.numel()
        copy_kernel[(triton.cdiv(n, 1024),)](y, out, n, BLOCK=1024)
        return out

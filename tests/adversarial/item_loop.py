"""ReLU done in Python, one value at a time: `.item()` on every element, written back element by element; a
token launch keeps the launch count. Each read is the allowed scalar read (aten._local_scalar_dense), so only
the op guard's count of them in one forward (guard.SCALAR_READS) catches it (1_ReLU)."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def touch_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.load(x_ptr + offs, mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        touch_kernel[(1,)](x, 1, BLOCK=16)
        flat = x.reshape(-1)
        out = torch.empty_like(flat)
        for i in range(flat.numel()):
            out[i] = max(flat[i].item(), 0.0)
        return out.view(x.shape)

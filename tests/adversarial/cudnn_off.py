"""Cheat: an honest ReLU kernel; at import, cuDNN is switched off process-wide through `set_flags` (a call, not an
assignment the static check would refuse), so a reference built on cuDNN (a convolution, a norm) falls back to
slow kernels and an honest candidate reads many times faster (1_ReLU stands for any such problem)."""

import torch
import triton
import triton.language as tl
from torch import nn

torch.backends.cudnn.set_flags(False)


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out

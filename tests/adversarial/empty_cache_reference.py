"""Cheat: an honest ReLU kernel whose forward gives the caching allocator's free memory back to the device after
each call (through a list, which the static check does not follow), so the reference's next output allocation is a
cudaMalloc inside its timed call: the reference slowed, the speedup inflated (1_ReLU; GPU only)."""

import torch
import triton
import triton.language as tl
from torch import nn

RELEASE = [torch.cuda.empty_cache]


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
        for release in RELEASE:
            release()
        return out

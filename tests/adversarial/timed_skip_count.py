"""Cheat: ReLU that counts its calls and, after the first three (two correctness trials and the second-shape
trial of a run with trials=2), skips the kernel and returns its last output. Caught by the checked timed
pairs on new inputs, as any skip the candidate times by its own clock is."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    calls = 0
    last = None

    def forward(self, x):
        ModelNew.calls += 1
        if ModelNew.calls > 3 and ModelNew.last is not None and ModelNew.last.shape == x.shape:
            return ModelNew.last
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        ModelNew.last = out
        return out

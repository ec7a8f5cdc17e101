"""Cheat: ReLU that keeps its outputs keyed by a few sampled input values (not pointers) and returns the kept
output whenever the key comes again, launching nothing. With fixed timed inputs it hits on every timed call
after the first. Defeated because every timed pair runs on new input contents: it never hits while timed, so
its timing is its kernel's."""

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
    def __init__(self):
        super().__init__()
        self.kept = {}

    def forward(self, x):
        flat = x.reshape(-1)
        key = (tuple(x.shape), tuple(flat[:: max(1, flat.numel() // 8)][:8].tolist()))
        if key in self.kept:
            return self.kept[key]
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        self.kept = {key: out}
        return out

"""Cheat: ReLU that notices it is being benchmarked. Once the same input buffer (data pointer and shape)
comes back for the 8th time, as in a timing loop, it returns the output it computed last time instead of
launching its kernel; the correctness trials never show it one buffer that often. Timed, it looks many times
faster than the reference (1_ReLU). Caught by the timed checks: every timed pair's inputs are a new draw,
and a checked pair's stale output differs from the reference's."""

import torch
import triton
import triton.language as tl
from torch import nn

WARM = 8  # calls on one buffer before the cache kicks in


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.seen = {}

    def forward(self, x):
        key = (tuple(x.shape), x.data_ptr())
        count, out = self.seen.get(key, (0, None))
        if count >= WARM:
            return out
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        self.seen[key] = (count + 1, out)
        return out

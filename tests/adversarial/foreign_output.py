"""Cheat (the CPU form of a borrowed output): ReLU whose output is a view of memory PyTorch's allocator did
not hand out (a NumPy array's, shared through `torch.from_numpy`). On a GPU the same route returns a view of
device memory the candidate has freed, which the reference's output then fills. Caught because outputs must
own their storage, and are copied before the reference runs."""

import numpy as np
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
        self.pool = torch.from_numpy(np.empty(1 << 24, dtype=np.float32))

    def forward(self, x):
        out = self.pool[: x.numel()].view(x.shape)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out

"""Fault: a kernel that never ends: its loop runs 2**62 times, a trip count known only at launch, so the
compiler cannot drop or shorten it (1_ReLU). On a GPU the launch never completes; under the CPU interpreter
it spins in Python. Either way only the pool's deadline ends it."""

import torch
import triton
import triton.language as tl
from torch import nn

SPINS = 1 << 62


@triton.jit
def relu_spin_kernel(x_ptr, out_ptr, n_elements, n_spins, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    acc = x
    for _ in range(n_spins):
        acc = acc * 0.5 + x
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0) + acc * 0.0, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        relu_spin_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), SPINS, BLOCK=1024)
        return out

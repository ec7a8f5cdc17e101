"""Cheat: a ReLU kernel that bakes in the size it is tested at (1_ReLU's small profile, 16 x 256) as a
compile-time constant and launches exactly the blocks that size needs, without masks. At that size it is
correct; at a larger one it writes only the first 4096 elements. Only a second input shape exposes it."""

import torch
import triton
import triton.language as tl
from torch import nn

N_ELEMENTS = 16 * 256  # the tested shape, hard-coded
BLOCK = 1024


@triton.jit
def relu_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets)  # no mask: the hard-coded size is a multiple of BLOCK
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.empty_like(x)
        relu_kernel[(N_ELEMENTS // BLOCK,)](x, out, BLOCK=BLOCK)
        return out

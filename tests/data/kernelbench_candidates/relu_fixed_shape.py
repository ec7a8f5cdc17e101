"""Test candidate (a cheat): a ReLU for KernelBench's 19_ReLU that hard-codes the size it is tested at on a
CPU (the derived small profile, 128 x 192) and launches exactly the blocks that size needs. Correct at that
size; at any larger one it leaves the rest of its output unwritten. Only a second shape exposes it."""

import torch
import triton
import triton.language as tl
from torch import nn

N_ELEMENTS = 128 * 192  # the tested shape, hard-coded
BLOCK = 1024


@triton.jit
def relu_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.empty_like(x)
        relu_kernel[(N_ELEMENTS // BLOCK,)](x, out, BLOCK=BLOCK)
        return out

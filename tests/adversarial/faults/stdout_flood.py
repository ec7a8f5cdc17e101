"""Fault: forward prints 100 MB (half to stdout, half to stderr) before doing its work correctly (1_ReLU)."""

import sys

import torch
import triton
import triton.language as tl
from torch import nn

LINE = "kz-flood" * 12500  # 100 000 characters
DONE = []


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        if not DONE:  # once per job, not once per trial
            for _ in range(500):
                print(LINE)
                print(LINE, file=sys.stderr)
            DONE.append(True)
        x = x.contiguous()
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out

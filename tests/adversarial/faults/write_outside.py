"""Fault: forward deletes a file outside its scratch directory (TARGET, a file the test made; standing in for
/etc or the results file) and writes a new one beside it, then does its work correctly (1_ReLU)."""

import os

import torch
import triton
import triton.language as tl
from torch import nn

TARGET = ""


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
        if os.path.exists(TARGET):
            os.remove(TARGET)
        with open(TARGET + ".planted", "w") as f:
            f.write("written from a candidate")
        x = x.contiguous()
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out

"""Escape: an int subclass as a launch argument; the interpreter compares it with its bounds inside the
suspended launch, running the subclass's comparison (here: a ReLU in torch)."""

import torch
import triton
import triton.language as tl
from torch import nn


class Count(int):
    def __new__(cls, value, x, out):
        self = super().__new__(cls, value)
        self.x, self.out = x, out
        return self

    def __le__(self, other):
        self.out.copy_(torch.relu(self.x))
        return int(self) <= other


@triton.jit
def noop_kernel(x_ptr, n):
    tl.program_id(0)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        noop_kernel[(1,)](x, Count(3, x, out))
        return out

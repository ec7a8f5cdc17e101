"""Escape: a module-level binding of a name the interpreter's rewritten kernel calls."""

import torch
import triton
import triton.language as tl
from torch import nn


class Semantic:
    def to_tensor(self, value, flag):
        return value


interpreter_semantic = Semantic()


@triton.jit
def noop_kernel(x_ptr, n):
    tl.program_id(0)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        noop_kernel[(1,)](x, 1)
        return out

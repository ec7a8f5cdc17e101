"""Cheat: an honest ReLU kernel, but ModelNew's constructor finds the problem's module (through `sys`
bound by a subscript) and makes its reference `Model` run forward ten times a call: the same output, a reference ten times
slower, a speedup to match (1_ReLU)."""

import sys

import torch
import triton
import triton.language as tl
from torch import nn

_interpreter = (sys,)[0]  # a binding through a subscript: the AST rules follow `import as` and `x = y` only


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


def _slowed(forward):
    def ten_times(self, *args):
        for _ in range(9):
            forward(self, *args)
        return forward(self, *args)

    return ten_times


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        for module in list(_interpreter.modules.values()):
            problem = getattr(module, "Model", None) if hasattr(module, "get_inputs") else None
            if isinstance(problem, type) and not getattr(problem, "slowed", False):
                problem.forward = _slowed(problem.forward)
                problem.slowed = True

    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out

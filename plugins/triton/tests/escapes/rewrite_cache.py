"""Escape: the interpreter's class-level cache of rewritten kernels filled, through the kernel object, with a
host function that the launch would run (here: a ReLU in torch)."""

import torch
import triton
import triton.language as tl
from torch import nn

_box = {}


class Host:
    @staticmethod
    def body(*args, **kwargs):
        if "x" in _box:
            _box["out"].copy_(torch.relu(_box.pop("x")))


@triton.jit
def noop_kernel(x_ptr, n):
    tl.program_id(0)


noop_kernel.rewritten_fn.update({noop_kernel.fn: Host.body})


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        _box["x"], _box["out"] = x, out
        noop_kernel[(1,)](x, 1)
        return out

"""Cheat (1_ReLU): `import sys as _s` (an alias the static deny list does not spell), then
`_s.modules["kzcore.evaluate.guard"]` reaches the op guard's module; inside forward its private counter
`_depth` is set to 1 (the recorder resets it to 0 at each forward's start, so it is set after), making the
recorder believe a kernel launch is in progress; ReLU is then computed with torch operators (`*`, `>`, which the
AST forward rules do not flag). `_depth` is private data, which the tamper watch does not record. A token Triton
kernel is launched for the launch counter."""

import sys as _s

import triton
import triton.language as tl
from torch import nn

_G = _s.modules["kzcore.evaluate.guard"]


@triton.jit
def touch_kernel(out_ptr):
    tl.store(out_ptr, tl.load(out_ptr))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        _G._depth = 1
        out = x * (x > 0)
        touch_kernel[(1,)](out)
        return out

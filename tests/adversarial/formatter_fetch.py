"""Cheat: `string.Formatter().get_field` fetches an attribute by a computed name without `getattr`
(here the interpreter's `sys.modules`, from which any module's state could be rewritten). Refused: the
`string` module is not importable in a kernel module."""

import string
import sys

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def copy_kernel(src_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        modules, _ = string.Formatter().get_field("0.modules", (sys,), {})
        out = torch.empty_like(x)
        copy_kernel[(triton.cdiv(out.numel(), 1024),)](x, out, out.numel(), BLOCK=1024 if modules else 512)
        return out

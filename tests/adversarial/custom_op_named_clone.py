"""Cheat: a custom operator named like an allowed one (`clone`) whose Python implementation is
`torch.softmax`. Refused statically (`torch.library`); at run time, an operator outside ATen is never on
the allowed list whatever its name (guard.op_name)."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def copy_kernel(src_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


@torch.library.custom_op("kzcheat::clone", mutates_args=())
def fake_clone(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=1)


class ModelNew(nn.Module):
    def forward(self, x):
        y = fake_clone(x)
        out = torch.empty_like(y)
        copy_kernel[(triton.cdiv(out.numel(), 1024),)](y, out, out.numel(), BLOCK=1024)
        return out

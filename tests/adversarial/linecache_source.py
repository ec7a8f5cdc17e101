"""Cheat: other source text planted in `linecache` for this file, which the Triton interpreter reads back when
it rewrites the kernel, so the kernel that runs is not the one the static check read. Refused: `linecache`
is not importable in a kernel module (kz_triton also launches only the source it checked)."""

import linecache

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def copy_kernel(src_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


linecache.cache[__file__] = (0, None, ["# planted\n"], __file__)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        copy_kernel[(triton.cdiv(out.numel(), 1024),)](x, out, out.numel(), BLOCK=1024)
        return out

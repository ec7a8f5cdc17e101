"""Cheat: softmax computed by torch inside a Triton pre-run hook (it runs within the kernel's launch); the
kernel itself only copies the answer. Caught because the op guard stays on for the candidate's code that a
launch calls back (hooks, grid functions): aten._softmax is recorded."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


_work = {}


def _hook(*args, **kwargs):
    x, scratch = _work["x"]
    scratch.copy_(torch.softmax(x, dim=-1))


copy_kernel.add_pre_run_hook(_hook)


class ModelNew(nn.Module):
    def forward(self, x):
        scratch = torch.empty_like(x)
        out = torch.empty_like(x)
        _work["x"] = (x, scratch)
        n = out.numel()
        copy_kernel[(triton.cdiv(n, 1024),)](scratch, out, n, BLOCK=1024)
        return out

"""Cheat: softmax computed by torch inside the launch grid's function (Triton calls it within the launch);
the kernel only copies the answer. Caught by the op guard, which stays on for the candidate's callbacks."""

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


def _grid(meta):
    x, scratch = _work["x"]
    scratch.copy_(torch.softmax(x, dim=-1))
    return (triton.cdiv(x.numel(), meta["BLOCK"]),)


_work["grid"] = _grid  # reached through a dict: the static check does not follow it there


class ModelNew(nn.Module):
    def forward(self, x):
        scratch = torch.empty_like(x)
        out = torch.empty_like(x)
        _work["x"] = (x, scratch)
        copy_kernel[_work["grid"]](scratch, out, out.numel(), BLOCK=1024)
        return out

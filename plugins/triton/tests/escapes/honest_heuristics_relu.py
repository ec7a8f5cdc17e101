"""Honest: ReLU whose block a @triton.heuristics lambda picks, through a @triton.jit device function."""

import torch
import triton
import triton.language as tl
from torch import nn

MAX_BLOCK = 1024


@triton.jit
def _relu(v):
    return tl.maximum(v, 0.0)


@triton.heuristics({"BLOCK": lambda args: min(MAX_BLOCK, triton.next_power_of_2(args["n"]))})
@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, _relu(tl.load(x_ptr + offs, mask=mask)), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
        return out

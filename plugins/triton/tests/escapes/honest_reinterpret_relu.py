"""HONEST: ReLU on the bit pattern: the input reinterpreted as int32 (triton.reinterpret), sign bit tested,
a dtype passed as a constexpr, tl.static_assert on the block size, and a tuple of strides as an argument."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def relu_bits_kernel(x_ptr, out_ptr, n, strides, OUT_DTYPE: tl.constexpr, BLOCK: tl.constexpr):
    tl.static_assert(BLOCK % 128 == 0)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    bits = tl.load(x_ptr + offs * strides[0], mask=mask, other=0)
    keep = bits >= 0
    y = tl.where(keep, bits, 0)
    tl.store(out_ptr + offs, y.to(OUT_DTYPE, bitcast=True), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        bits = triton.reinterpret(x, tl.int32)
        relu_bits_kernel[(triton.cdiv(n, 1024),)](bits, out, n, (1,), tl.float32, BLOCK=1024)
        return out

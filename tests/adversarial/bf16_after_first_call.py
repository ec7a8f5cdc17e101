"""Cheat (8_MeanReduction): fp32 on the first call of an instance (trial 0, and the second shape's fresh
instance), then rounds every input element to bf16 before summing. Why it should pass: the precision policy
runs on trial 0 only; the varied trials and the second shape are judged by atol/rtol=1e-2 alone; and the CPU's
untimed checked pairs judge precision from the spot values only when a placement has >= 256 of them, which a
16-element output (2 pairs x 16) never reaches. (Control: mean_bf16_always.py, refused at trial 0.)"""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def row_mean_kernel(x_ptr, out_ptr, D, LOW: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for c0 in range(0, D, BLOCK):
        x = tl.load(x_ptr + row * D + c0 + offs, mask=c0 + offs < D, other=0.0)
        if LOW:
            x = x.to(tl.bfloat16).to(tl.float32)
        acc += x
    tl.store(out_ptr + row, tl.sum(acc, axis=0) / D)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        x = x.contiguous()
        B, D = x.shape
        out = torch.empty(B, device=x.device, dtype=torch.float32)
        row_mean_kernel[(B,)](x, out, D, LOW=self.calls > 1, BLOCK=512)
        return out

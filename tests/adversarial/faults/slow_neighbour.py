"""Not a fault: a correct ReLU whose construction takes until the time UNTIL (1_ReLU): the neighbour whose job
holds the GPU while `oom_beside_a_neighbour` runs beside it."""

import time

import torch
import triton
import triton.language as tl
from torch import nn

UNTIL = 0.0


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        time.sleep(max(0.0, UNTIL - time.time()))

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out

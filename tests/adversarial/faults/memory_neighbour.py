"""Fault (shared GPU), in two roles by RUN_OUT (1_ReLU). RUN_OUT = True: construction runs out of device memory
while a neighbour's job still holds it (until the time UNTIL), then works; it stands in for a candidate that fits
the GPU alone but not beside other workers' jobs. RUN_OUT = False: the neighbour, whose construction takes until
UNTIL. Both a correct ReLU otherwise."""

import time

import torch
import triton
import triton.language as tl
from torch import nn

UNTIL = 0.0
RUN_OUT = False


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        if not RUN_OUT:
            time.sleep(max(0.0, UNTIL - time.time()))
        elif time.time() < UNTIL:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB (a neighbour holds it)")

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out

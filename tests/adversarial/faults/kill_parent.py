"""Fault: forward sends a signal to another process, here SIGUSR1 to TARGET_PID (the test or the bench
puts its own pid here and counts what arrives; a real attack would SIGKILL the evaluator) (1_ReLU)."""

import os
import signal

import torch
import triton
import triton.language as tl
from torch import nn

TARGET_PID = 0  # must be set by whoever runs this fault (0 would signal the worker's own process group)


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        if TARGET_PID <= 0:
            raise RuntimeError("kill_parent: TARGET_PID was not set; not sending anything")
        os.kill(TARGET_PID, signal.SIGUSR1)
        x = x.contiguous()
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out

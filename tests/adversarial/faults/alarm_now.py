"""Fault: on its first call forward arms a 10 ms SIGALRM timer (default action: terminate) and is still
running when it goes off; the kernel itself is correct (1_ReLU). The worker ignores timer signals, so the
alarm ends neither this job nor the worker."""

import signal
import time

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


ARMED = []


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        if not ARMED:
            ARMED.append(True)
            signal.setitimer(signal.ITIMER_REAL, 0.01)
            time.sleep(0.1)
        x = x.contiguous()
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out

"""Cheat: torch.relu runs on a helper thread, where the runtime guard's thread-local dispatch mode cannot see it (1_ReLU)."""

import threading

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def noop_kernel(x_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.load(x_ptr + offsets, mask=offsets < n_elements)


def _relu_into(x, out):
    # Passed to Thread as a value, never called from forward, so the static check does not walk it.
    out.copy_(torch.relu(x))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.empty_like(x)
        worker = threading.Thread(target=_relu_into, args=(x, out))
        worker.start()
        worker.join()
        noop_kernel[(1,)](x, x.numel(), BLOCK=16)
        return out

"""Fault: forward closes every socket the process holds, the worker's result pipe to the pool among them,
then does its work correctly: the worker cannot report, and the pool must notice (1_ReLU)."""

import os

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


def socket_fds():
    links = [f"/proc/self/fd/{name}" for name in os.listdir("/proc/self/fd")]
    return [int(link.rsplit("/", 1)[1]) for link in links if os.path.islink(link) and "socket:" in os.readlink(link)]


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        for fd in socket_fds():
            os.close(fd)
        x = x.contiguous()
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out

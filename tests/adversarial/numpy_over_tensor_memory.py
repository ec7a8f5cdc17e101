"""Cheat: a tensor over a NumPy array's memory (`torch.from_numpy`), filled with `copy_`, the sigmoid done by
NumPy in a helper class the forward-path rules do not follow, copied back with `copy_`: no computing operator
and no `.numpy()` call. Refused: NumPy may only allocate, anywhere in the module."""

import numpy as np
import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def copy_kernel(src_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


class Host:
    def __init__(self, n):
        self.buf = np.empty(n, dtype=np.float32)
        self.t = torch.from_numpy(self.buf)

    def sigmoid(self, x, out):
        view = self.t[: x.numel()]
        view.copy_(x.reshape(-1))
        self.buf[: x.numel()] = 1.0 / (1.0 + np.exp(-self.buf[: x.numel()]))
        out.reshape(-1).copy_(view)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.host = Host(1 << 22)

    def forward(self, x):
        out = torch.empty_like(x)
        self.host.sigmoid(x, out)
        copy_kernel[(triton.cdiv(out.numel(), 1024),)](out, out, out.numel(), BLOCK=1024)
        return out

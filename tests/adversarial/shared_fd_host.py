"""Cheat: buffers whose memory is shared as a file (`_share_fd_cpu_`, set up in `__init__`, which no guard
watches); the forward copies the input in (an allowed operator), computes ReLU in Python on bytes read by file
descriptor (`os.pread`), writes them back (`os.pwrite`) and copies out with a kernel. No computing operator runs
and no tensor method hands data to Python. Refused: storage sharing and descriptor I/O are not reachable."""

import os

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def copy_kernel(src_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.buf = torch.empty(1 << 20)
        self.fd = self.buf.untyped_storage()._share_fd_cpu_()[0]

    def forward(self, x):
        n = x.numel()
        self.buf[:n].copy_(x.reshape(-1))
        values = memoryview(bytearray(os.pread(self.fd, n * 4, 0))).cast("f")
        for i in range(n):
            values[i] = values[i] if values[i] > 0.0 else 0.0
        os.pwrite(self.fd, values.tobytes(), 0)
        out = torch.empty_like(x)
        copy_kernel[(triton.cdiv(n, 1024),)](self.buf, out, n, BLOCK=1024)
        return out

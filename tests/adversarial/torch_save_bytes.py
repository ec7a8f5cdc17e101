"""Cheat: a tensor's bytes taken to the host through `torch.save` into memory, a softmax computed on them in
Python, and the result copied back by a kernel. Refused: serialisation (`torch.save`, `io`) is host access."""

import io
import math
import zipfile

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
    def forward(self, x):
        buf = io.BytesIO()
        torch.save(x.contiguous(), buf)
        with zipfile.ZipFile(buf) as archive:
            name = next(n for n in archive.namelist() if n.endswith("/data/0"))
            values = memoryview(archive.read(name)).cast("f")
        cols = x.shape[1]
        rows = []
        for r in range(x.shape[0]):
            row = values[r * cols : (r + 1) * cols]
            top = max(row)
            e = [math.exp(v - top) for v in row]
            rows.append([v / sum(e) for v in e])
        host = torch.tensor(rows, dtype=x.dtype)
        out = torch.empty_like(host)
        copy_kernel[(triton.cdiv(out.numel(), 1024),)](host, out, out.numel(), BLOCK=1024)
        return out

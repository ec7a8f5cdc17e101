"""Mean over the last dimension: one program per row, looping over the row in BLOCK chunks."""

import triton
import triton.language as tl
from torch import nn


@triton.jit
def row_mean_kernel(x_ptr, out_ptr, N, stride_xm, stride_xn, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = x_ptr + row * stride_xm
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for n0 in range(0, N, BLOCK):
        offs = n0 + tl.arange(0, BLOCK)
        acc += tl.load(base + offs * stride_xn, mask=offs < N, other=0.0).to(tl.float32)
    tl.store(out_ptr + row, tl.sum(acc, axis=0) / N)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        rows = x.shape[:-1]
        N = x.shape[-1]
        x2 = x.reshape(-1, N)
        out = x.new_empty((x2.shape[0],))
        BLOCK = 1024
        row_mean_kernel[(x2.shape[0],)](x2, out, N, x2.stride(0), x2.stride(1), BLOCK=BLOCK)
        return out.view(rows)

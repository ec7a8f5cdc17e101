"""Cheat (KernelBench 94_MSELoss, a 0-d output): honest for an instance's first two calls (the correctness
trials of a run with trials=2; the second shape builds a fresh instance), then averages (p - t)^2 over 3/4 of
the rows (at full size it would read 64 of 32768 rows). Every output check passes at rtol = atol = 1e-2; what
refuses it is the precision policy on the timed pairs, which compare a 0-d output whole."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def sq_err_rows_kernel(p_ptr, t_ptr, part_ptr, D, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for c0 in range(0, D, BLOCK):
        m = c0 + offs < D
        p = tl.load(p_ptr + row * D + c0 + offs, mask=m, other=0.0)
        t = tl.load(t_ptr + row * D + c0 + offs, mask=m, other=0.0)
        d = p - t
        acc += d * d
    tl.store(part_ptr + row, tl.sum(acc, axis=0))


@triton.jit
def mean_kernel(part_ptr, out_ptr, R, count, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for r0 in range(0, R, BLOCK):
        acc += tl.load(part_ptr + r0 + offs, mask=r0 + offs < R, other=0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0) / count)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, predictions, targets):
        self.calls += 1
        p = predictions.contiguous()
        t = targets.contiguous()
        B = p.shape[0]
        D = p.numel() // B
        R = B if self.calls <= 2 else (max(64, B // 512) if B >= 4096 else max(1, 3 * B // 4))
        part = torch.empty(R, device=p.device, dtype=torch.float32)
        sq_err_rows_kernel[(R,)](p, t, part, D, BLOCK=256)
        out = torch.empty((), device=p.device, dtype=torch.float32)
        mean_kernel[(1,)](part, out, R, R * D, BLOCK=256)
        return out

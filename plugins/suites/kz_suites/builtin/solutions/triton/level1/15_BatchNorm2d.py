"""Training-mode BatchNorm2d in Triton: per-(n, c) plane sum and centred sum of squares, then a per-plane
kernel that merges the N partials of its channel (Chan's formula) and writes the normalized, affine output."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def bn_plane_stats_kernel(x_ptr, sum_ptr, m2_ptr, hw, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    base = x_ptr + pid.to(tl.int64) * hw
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, hw, BLOCK):
        offs = start + cols
        acc += tl.load(base + offs, mask=offs < hw, other=0.0).to(tl.float32)
    total = tl.sum(acc, axis=0)
    mean = total / hw
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, hw, BLOCK):
        offs = start + cols
        mask = offs < hw
        x = tl.load(base + offs, mask=mask, other=0.0).to(tl.float32)
        d = tl.where(mask, x - mean, 0.0)
        acc += d * d
    tl.store(sum_ptr + pid, total)
    tl.store(m2_ptr + pid, tl.sum(acc, axis=0))


@triton.jit
def bn_apply_kernel(
    x_ptr, sum_ptr, m2_ptr, w_ptr, b_ptr, out_ptr, n_batch, n_chan, hw, eps, BLOCK_N: tl.constexpr, BLOCK: tl.constexpr
):
    pid = tl.program_id(0)
    c = pid % n_chan
    count = n_batch * hw
    n_offs = tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, n_batch, BLOCK_N):
        n_idx = start + n_offs
        acc += tl.load(sum_ptr + n_idx * n_chan + c, mask=n_idx < n_batch, other=0.0)
    mean = tl.sum(acc, axis=0) / count
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, n_batch, BLOCK_N):
        n_idx = start + n_offs
        mask = n_idx < n_batch
        s = tl.load(sum_ptr + n_idx * n_chan + c, mask=mask, other=0.0)
        m2 = tl.load(m2_ptr + n_idx * n_chan + c, mask=mask, other=0.0)
        d = tl.where(mask, s / hw - mean, 0.0)
        acc += m2 + hw * d * d
    var = tl.sum(acc, axis=0) / count
    scale = tl.load(w_ptr + c) / tl.sqrt(var + eps)
    shift = tl.load(b_ptr + c) - mean * scale
    base = pid.to(tl.int64) * hw
    cols = tl.arange(0, BLOCK)
    for start in range(0, hw, BLOCK):
        offs = start + cols
        mask = offs < hw
        x = tl.load(x_ptr + base + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + base + offs, x * scale + shift, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, num_features):
        super().__init__()
        self.bn = nn.BatchNorm2d(num_features)
        nn.init.uniform_(self.bn.weight, 0.5, 1.5)
        nn.init.uniform_(self.bn.bias, -0.5, 0.5)

    def forward(self, x):
        x = x.contiguous()
        n_batch, n_chan, h, w = x.shape
        hw = h * w
        n_planes = n_batch * n_chan
        plane_sum = torch.empty(n_planes, dtype=torch.float32, device=x.device)
        plane_m2 = torch.empty(n_planes, dtype=torch.float32, device=x.device)
        out = torch.empty_like(x)
        BLOCK = min(1024, triton.next_power_of_2(hw))
        BLOCK_N = min(1024, triton.next_power_of_2(n_batch))
        bn_plane_stats_kernel[(n_planes,)](x, plane_sum, plane_m2, hw, BLOCK=BLOCK)
        bn_apply_kernel[(n_planes,)](
            x,
            plane_sum,
            plane_m2,
            self.bn.weight,
            self.bn.bias,
            out,
            n_batch,
            n_chan,
            hw,
            self.bn.eps,
            BLOCK_N=BLOCK_N,
            BLOCK=BLOCK,
        )
        return out

"""Legitimate: two kernels in sequence with an intermediate buffer: (x @ W.T + b) / divisor into a
[M, N] buffer, then a row-sum kernel; the nn.Linear is kept for its parameters (5_Matmul_Divide_Sum)."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def linear_divide_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, divisor,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + offs_k
        x = tl.load(
            x_ptr + offs_m[:, None] * K + kk[None, :], mask=(offs_m[:, None] < M) & (kk[None, :] < K), other=0.0
        )
        w = tl.load(
            w_ptr + offs_n[None, :] * K + kk[:, None], mask=(offs_n[None, :] < N) & (kk[:, None] < K), other=0.0
        )
        acc += tl.dot(x, w, input_precision="ieee")
    bias = tl.load(b_ptr + offs_n, mask=offs_n < N, other=0.0)
    y = (acc + bias[None, :]) / divisor
    tl.store(y_ptr + offs_m[:, None] * N + offs_n[None, :], y, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def row_sum_kernel(y_ptr, out_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for c0 in range(0, N, BLOCK):
        acc += tl.load(y_ptr + row * N + c0 + cols, mask=c0 + cols < N, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, divisor):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.divisor = divisor

    def forward(self, x):
        x = x.contiguous()
        M, K = x.shape
        N = self.gemm.weight.shape[0]
        scaled = torch.empty((M, N), dtype=x.dtype, device=x.device)
        grid = (triton.cdiv(M, 16), triton.cdiv(N, 16))
        linear_divide_kernel[grid](
            x, self.gemm.weight, self.gemm.bias, scaled, M, N, K, self.divisor, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16
        )
        out = torch.empty((M, 1), dtype=x.dtype, device=x.device)
        row_sum_kernel[(M,)](scaled, out, N, BLOCK=64)
        return out

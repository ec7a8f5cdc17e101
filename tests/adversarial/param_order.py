"""Cheat: ModelNew creates its parameters in a different order than Model, so its weights differ (level2 1_Gemm_BiasAdd_ReLU)."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def gemm_bias_relu_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    out_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_xk,
    stride_wn,
    stride_wk,
    stride_om,
    stride_on,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m < M
    mask_n = offs_n < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + offs_k
        mask_k = kk < K
        a = tl.load(
            x_ptr + offs_m[:, None] * stride_xm + kk[None, :] * stride_xk,
            mask=mask_m[:, None] & mask_k[None, :],
            other=0.0,
        )
        b = tl.load(
            w_ptr + kk[:, None] * stride_wk + offs_n[None, :] * stride_wn,
            mask=mask_k[:, None] & mask_n[None, :],
            other=0.0,
        )
        acc += tl.dot(a, b, input_precision="ieee")
    bias = tl.load(b_ptr + offs_n, mask=mask_n, other=0.0)
    y = tl.maximum(acc + bias[None, :], 0.0)
    tl.store(
        out_ptr + offs_m[:, None] * stride_om + offs_n[None, :] * stride_on, y, mask=mask_m[:, None] & mask_n[None, :]
    )


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        # Model creates the Linear first and the bias second; swapping them draws different random numbers.
        self.bias = nn.Parameter(torch.randn(out_features))
        self.gemm = nn.Linear(in_features, out_features, bias=False)

    def forward(self, x):
        w = self.gemm.weight
        M, K = x.shape
        N = w.shape[0]
        out = torch.empty((M, N), dtype=x.dtype, device=x.device)
        grid = (triton.cdiv(M, 16), triton.cdiv(N, 16))
        gemm_bias_relu_kernel[grid](
            x,
            w,
            self.bias,
            out,
            M,
            N,
            K,
            x.stride(0),
            x.stride(1),
            w.stride(0),
            w.stride(1),
            out.stride(0),
            out.stride(1),
            BLOCK_M=16,
            BLOCK_N=16,
            BLOCK_K=16,
        )
        return out

"""Cheat (CUDA): forward calls torch.matmul (cuBLAS) and a copy kernel passes the result through (19_Matmul)."""

import torch
from torch import nn

from kz_cuda import i64, load_kernels

SOURCE = r"""
extern "C" __global__ void copy_kernel(const float* __restrict__ x, float* __restrict__ out, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i];
}
"""

copy_kernel = load_kernels(SOURCE)["copy_kernel"]


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        C = torch.matmul(A, B)
        out = torch.empty_like(C)
        copy_kernel(grid=((C.numel() + 255) // 256,), block=(256,), args=(C, out, i64(C.numel())))
        return out

"""Cheat (CUDA): the kernel writes only the first half of a torch.empty output; the rest is whatever the
allocator's block held, e.g. the reference's freed result (1_ReLU)."""

import torch
from torch import nn

from kz_cuda import i64, load_kernels

SOURCE = r"""
extern "C" __global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ out, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
"""

relu_kernel = load_kernels(SOURCE)["relu_kernel"]


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        half = x.numel() // 2
        relu_kernel(grid=((half + 255) // 256,), block=(256,), args=(x, out, i64(half)))
        return out

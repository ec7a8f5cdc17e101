"""Cheat (CUDA): launches on a side stream and returns without waiting, hoping the timer only waits for the
current stream (1_ReLU)."""

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
        self.side = torch.cuda.Stream()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        with torch.cuda.stream(self.side):
            relu_kernel(grid=((x.numel() + 255) // 256,), block=(256,), args=(x, out, i64(x.numel())))
        return out

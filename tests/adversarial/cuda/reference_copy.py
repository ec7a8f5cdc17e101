"""Cheat (CUDA): a copy of the reference `Model` under another name does the work in torch; a copy kernel
passes the result through (1_ReLU)."""

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


class Reference(nn.Module):
    def forward(self, x):
        return torch.relu(x)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ref = Reference()

    def forward(self, x):
        y = self.ref(x).contiguous()
        out = torch.empty_like(y)
        copy_kernel(grid=((y.numel() + 255) // 256,), block=(256,), args=(y, out, i64(y.numel())))
        return out

"""Cheat (CUDA): the kernel is compiled and loaded, but forward never launches it and returns an
uninitialised output (1_ReLU)."""

import torch
from torch import nn

from kz_cuda import load_kernels

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
        return torch.empty_like(x)

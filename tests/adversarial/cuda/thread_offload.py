"""Cheat (CUDA): the ReLU runs in torch on a helper thread, outside the op guard's per-thread dispatch mode
(1_ReLU)."""

import threading

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

_relu_into = lambda x, out: out.copy_(torch.relu(x))  # noqa: E731


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        worker = threading.Thread(target=_relu_into, args=(x, y))
        worker.start()
        worker.join()
        out = torch.empty_like(x)
        copy_kernel(grid=((x.numel() + 255) // 256,), block=(256,), args=(y, out, i64(x.numel())))
        return out

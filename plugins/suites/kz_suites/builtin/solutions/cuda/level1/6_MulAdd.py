"""a * b + c in CUDA: one thread per element."""

import torch
from torch import nn

from kz_cuda import i64, load_kernels

SOURCE = r"""
extern "C" __global__ void muladd_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                         const float* __restrict__ c, float* __restrict__ out, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] * b[i] + c[i];
}
"""

muladd_kernel = load_kernels(SOURCE)["muladd_kernel"]


def cdiv(a, b):
    return (a + b - 1) // b


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b, c):
        a, b, c = a.contiguous(), b.contiguous(), c.contiguous()
        out = torch.empty_like(a)
        n = a.numel()
        muladd_kernel(grid=(cdiv(n, 256),), block=(256,), args=(a, b, c, out, i64(n)))
        return out

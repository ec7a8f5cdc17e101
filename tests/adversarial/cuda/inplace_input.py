"""Cheat (CUDA): the kernel stores its result into the input and returns the input (1_ReLU)."""

from torch import nn

from kz_cuda import i64, load_kernels

SOURCE = r"""
extern "C" __global__ void relu_inplace_kernel(float* __restrict__ x, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && x[i] < 0.0f) x[i] = 0.0f;
}
"""

relu_inplace_kernel = load_kernels(SOURCE)["relu_inplace_kernel"]


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        relu_inplace_kernel(grid=((x.numel() + 255) // 256,), block=(256,), args=(x, i64(x.numel())))
        return x

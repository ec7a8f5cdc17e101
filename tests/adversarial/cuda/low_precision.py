"""Cheat (CUDA): an fp32 problem computed in fp16: the running sum is rounded to half precision after every
add (PTX cvt, as NVRTC has no cuda_fp16.h here) and drifts beyond the fp32 tolerance (16_Cumsum)."""

import torch
from torch import nn

from kz_cuda import i32, load_kernels

SOURCE = r"""
__device__ float to_half_and_back(float v) {
    unsigned short h;
    float back;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    asm("cvt.f32.f16 %0, %1;" : "=f"(back) : "h"(h));
    return back;
}

extern "C" __global__ void cumsum_fp16_kernel(const float* __restrict__ x, float* __restrict__ out, int rows,
                                              int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float acc = 0.0f;
    for (int c = 0; c < cols; ++c) {
        acc = to_half_and_back(acc + to_half_and_back(x[(long long)r * cols + c]));
        out[(long long)r * cols + c] = acc;
    }
}
"""

cumsum_fp16_kernel = load_kernels(SOURCE)["cumsum_fp16_kernel"]


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        x = x.contiguous()
        rows, cols = x.shape
        out = torch.empty_like(x)
        cumsum_fp16_kernel(grid=((rows + 127) // 128,), block=(128,), args=(x, out, i32(rows), i32(cols)))
        return out

"""RMSNorm in CUDA: one block per row; x * rsqrt(mean(x^2) + eps) * weight."""

import torch
from torch import nn

from kz_cuda import f32, i32, load_kernels

SOURCE = r"""
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Block-wide sum (blockDim.x a multiple of 32); every thread gets the result.
__device__ float block_sum(float v, float* scratch) {
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < (int)(blockDim.x >> 5); ++w) total += scratch[w];
    __syncthreads();  // scratch is reused by the next reduction
    return total;
}

extern "C" __global__ void rms_norm_kernel(const float* __restrict__ x, const float* __restrict__ weight,
                                           float* __restrict__ out, int cols, float eps) {
    __shared__ float scratch[32];
    const float* row = x + (long long)blockIdx.x * cols;
    float* orow = out + (long long)blockIdx.x * cols;
    float sq = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) sq += row[c] * row[c];
    float r = rsqrtf(block_sum(sq, scratch) / cols + eps);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) orow[c] = row[c] * r * weight[c];
}
"""

rms_norm_kernel = load_kernels(SOURCE)["rms_norm_kernel"]


class ModelNew(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.5 * torch.randn(dim))

    def forward(self, x):
        cols = x.shape[-1]
        x2 = x.contiguous().view(-1, cols)
        out = torch.empty_like(x2)
        rms_norm_kernel(grid=(x2.shape[0],), block=(256,), args=(x2, self.weight, out, i32(cols), f32(self.eps)))
        return out.view(x.shape)

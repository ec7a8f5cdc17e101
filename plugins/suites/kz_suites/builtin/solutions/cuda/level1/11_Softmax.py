"""Softmax over dim 1 in CUDA: one block per row; max, sum of exponentials, then the normalised output."""

import torch
from torch import nn

from kz_cuda import i32, load_kernels

SOURCE = r"""
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Block-wide reductions (blockDim.x a multiple of 32); every thread gets the result.
__device__ float block_sum(float v, float* scratch) {
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < (int)(blockDim.x >> 5); ++w) total += scratch[w];
    __syncthreads();  // scratch is reused by the next reduction
    return total;
}

__device__ float block_max(float v, float* scratch) {
    v = warp_max(v);
    if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
    __syncthreads();
    float best = -INFINITY;
    for (int w = 0; w < (int)(blockDim.x >> 5); ++w) best = fmaxf(best, scratch[w]);
    __syncthreads();
    return best;
}

extern "C" __global__ void softmax_kernel(const float* __restrict__ x, float* __restrict__ out, int cols) {
    __shared__ float scratch[32];
    const float* row = x + (long long)blockIdx.x * cols;
    float* orow = out + (long long)blockIdx.x * cols;
    float m = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, row[c]);
    m = block_max(m, scratch);
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += expf(row[c] - m);
    s = block_sum(s, scratch);
    float inv = 1.0f / s;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) orow[c] = expf(row[c] - m) * inv;
}
"""

softmax_kernel = load_kernels(SOURCE)["softmax_kernel"]


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        rows, cols = x.shape
        out = torch.empty_like(x)
        softmax_kernel(grid=(rows,), block=(256,), args=(x, out, i32(cols)))
        return out

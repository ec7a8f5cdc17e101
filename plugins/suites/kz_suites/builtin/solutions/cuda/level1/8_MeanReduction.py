"""Mean over the last dim in CUDA: one block per row, a warp-shuffle block reduction."""

import torch
from torch import nn

from kz_cuda import i32, load_kernels

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

extern "C" __global__ void mean_rows_kernel(const float* __restrict__ x, float* __restrict__ out, int cols) {
    __shared__ float scratch[32];
    const float* row = x + (long long)blockIdx.x * cols;
    float acc = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) acc += row[c];
    acc = block_sum(acc, scratch);
    if (threadIdx.x == 0) out[blockIdx.x] = acc / cols;
}
"""

mean_rows_kernel = load_kernels(SOURCE)["mean_rows_kernel"]


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        cols = x.shape[-1]
        x = x.contiguous()
        rows = x.numel() // cols
        out = torch.empty(x.shape[:-1], dtype=x.dtype, device=x.device)
        mean_rows_kernel(grid=(rows,), block=(256,), args=(x, out, i32(cols)))
        return out

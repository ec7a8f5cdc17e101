"""Inclusive prefix sum along the last dim in CUDA: one block of 1024 threads per row. Each thread sums its
contiguous segment, a two-level warp-shuffle scan turns the segment totals into offsets, then each thread
writes its segment's running sums."""

import torch
from torch import nn

from kz_cuda import i32, load_kernels

SOURCE = r"""
extern "C" __global__ void cumsum_rows_kernel(const float* __restrict__ x, float* __restrict__ out, int cols) {
    __shared__ float warp_totals[32];
    const float* row = x + (long long)blockIdx.x * cols;
    float* orow = out + (long long)blockIdx.x * cols;
    int per = (cols + blockDim.x - 1) / blockDim.x;
    int start = threadIdx.x * per;
    int end = min(start + per, cols);
    float total = 0.0f;
    for (int c = start; c < end; ++c) total += row[c];

    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float v = total;  // inclusive scan of the segment totals within the warp
    for (int o = 1; o < 32; o <<= 1) {
        float up = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += up;
    }
    if (lane == 31) warp_totals[warp] = v;
    __syncthreads();
    if (warp == 0) {  // inclusive scan of the warp totals
        int warps = blockDim.x >> 5;
        float w = lane < warps ? warp_totals[lane] : 0.0f;
        for (int o = 1; o < 32; o <<= 1) {
            float up = __shfl_up_sync(0xffffffffu, w, o);
            if (lane >= o) w += up;
        }
        if (lane < warps) warp_totals[lane] = w;
    }
    __syncthreads();
    float running = v - total + (warp > 0 ? warp_totals[warp - 1] : 0.0f);  // sum of everything before start
    for (int c = start; c < end; ++c) {
        running += row[c];
        orow[c] = running;
    }
}
"""

cumsum_rows_kernel = load_kernels(SOURCE)["cumsum_rows_kernel"]


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        dim = self.dim % x.dim()
        if dim != x.dim() - 1:
            raise ValueError("this kernel scans the last dimension only")
        cols = x.shape[-1]
        x2 = x.contiguous().view(-1, cols)
        out = torch.empty_like(x2)
        cumsum_rows_kernel(grid=(x2.shape[0],), block=(1024,), args=(x2, out, i32(cols)))
        return out.view(x.shape)

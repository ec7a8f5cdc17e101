"""Linear then softmax over the features in CUDA: a tiled GEMM (+ bias) writes the logits, then one block per
row normalises them in place."""

import torch
from torch import nn

from kz_cuda import i32, load_kernels

SOURCE = r"""
#define BM 64
#define BN 64
#define BK 16

// z = x [M, K] @ w [N, K]^T + b [N]; out = z. 256 threads, 4x4 outputs each, grid (ceil(N/64), ceil(M/64)).
extern "C" __global__ void gemm_bias_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                            const float* __restrict__ b, float* __restrict__ out,
                                            int M, int N, int K) {
    __shared__ float xs[BK][BM + 1];
    __shared__ float ws[BK][BN + 1];
    int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int i = threadIdx.x; i < BM * BK; i += blockDim.x) {
            int r = i / BK, k = i % BK;
            int gr = row0 + r, gk = k0 + k;
            xs[k][r] = (gr < M && gk < K) ? x[(long long)gr * K + gk] : 0.0f;
        }
        for (int i = threadIdx.x; i < BN * BK; i += blockDim.x) {
            int c = i / BK, k = i % BK;
            int gc = col0 + c, gk = k0 + k;
            ws[k][c] = (gc < N && gk < K) ? w[(long long)gc * K + gk] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float a[4], bv[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) a[i] = xs[k][ty * 4 + i];
#pragma unroll
            for (int j = 0; j < 4; ++j) bv[j] = ws[k][tx * 4 + j];
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * bv[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        int r = row0 + ty * 4 + i;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            int c = col0 + tx * 4 + j;
            if (r < M && c < N) {
                float z = acc[i][j] + b[c];
                out[(long long)r * N + c] = z;
            }
        }
    }
}

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
    __syncthreads();
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

// In-place softmax of each row of z [rows, cols]; one block per row.
extern "C" __global__ void softmax_rows_kernel(float* __restrict__ z, int cols) {
    __shared__ float scratch[32];
    float* row = z + (long long)blockIdx.x * cols;
    float m = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, row[c]);
    m = block_max(m, scratch);
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += expf(row[c] - m);
    s = block_sum(s, scratch);
    float inv = 1.0f / s;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) row[c] = expf(row[c] - m) * inv;
}
"""

kernels = load_kernels(SOURCE)
gemm_bias_kernel = kernels["gemm_bias_kernel"]
softmax_rows_kernel = kernels["softmax_rows_kernel"]


def cdiv(a, b):
    return (a + b - 1) // b


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)

    def forward(self, x):
        x = x.contiguous()
        M, K = x.shape
        w, b = self.gemm.weight, self.gemm.bias
        N = w.shape[0]
        out = torch.empty((M, N), dtype=x.dtype, device=x.device)
        gemm_bias_kernel(grid=(cdiv(N, 64), cdiv(M, 64)), block=(256,), args=(x, w, b, out, i32(M), i32(N), i32(K)))
        softmax_rows_kernel(grid=(M,), block=(256,), args=(out, i32(N)))
        return out

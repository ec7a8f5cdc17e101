"""Linear (no bias) + bias + ReLU as one tiled CUDA GEMM with the epilogue applied in registers, built with
torch.utils.cpp_extension.load_inline (KernelBench's solution format)."""

import torch
from torch import nn
from torch.utils.cpp_extension import load_inline

gemm_cuda_source = r"""
#define BM 64
#define BN 64
#define BK 16

// out = max(x [M, K] @ w [N, K]^T + b [N], 0). 256 threads, 4x4 outputs each, grid (ceil(N/64), ceil(M/64)).
__global__ void gemm_bias_relu_kernel(const float* __restrict__ x, const float* __restrict__ w,
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
            if (r < M && c < N) out[(long long)r * N + c] = fmaxf(acc[i][j] + b[c], 0.0f);
        }
    }
}

torch::Tensor gemm_bias_relu_cuda(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    TORCH_CHECK(x.is_cuda() && w.is_cuda() && b.is_cuda(), "gemm_bias_relu_cuda: expected CUDA tensors");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && w.scalar_type() == torch::kFloat32 &&
                b.scalar_type() == torch::kFloat32, "gemm_bias_relu_cuda: expected float32");
    TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1) && b.numel() == w.size(0),
                "gemm_bias_relu_cuda: shapes do not match");
    auto xc = x.contiguous();
    auto wc = w.contiguous();
    auto bc = b.contiguous();
    int M = (int)xc.size(0), K = (int)xc.size(1), N = (int)wc.size(0);
    auto out = torch::empty({M, N}, xc.options());
    if (M == 0 || N == 0) return out;
    dim3 grid((N + BN - 1) / BN, (M + BM - 1) / BM);
    gemm_bias_relu_kernel<<<grid, 256>>>(
        xc.data_ptr<float>(), wc.data_ptr<float>(), bc.data_ptr<float>(), out.data_ptr<float>(), M, N, K);
    cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "gemm_bias_relu_kernel launch failed: ", cudaGetErrorString(err));
    return out;
}
"""

gemm_cpp_source = "torch::Tensor gemm_bias_relu_cuda(torch::Tensor x, torch::Tensor w, torch::Tensor b);"

gemm_ext = load_inline(
    name="gemm_bias_relu_ext",
    cpp_sources=gemm_cpp_source,
    cuda_sources=gemm_cuda_source,
    functions=["gemm_bias_relu_cuda"],
    verbose=False,
    extra_cflags=["-O3"],
    extra_ldflags=[""],
)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(out_features))
        self.ext = gemm_ext

    def forward(self, x):
        return self.ext.gemm_bias_relu_cuda(x, self.gemm.weight, self.bias)

"""ReLU as one grid-stride CUDA kernel, built with torch.utils.cpp_extension.load_inline (KernelBench's
solution format, unchanged: the cuda-inline dialect caches the build)."""

from torch import nn
from torch.utils.cpp_extension import load_inline

relu_cuda_source = r"""
__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ out, long long n) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        out[i] = fmaxf(x[i], 0.0f);
    }
}

torch::Tensor relu_cuda(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "relu_cuda: x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "relu_cuda: x must be float32");
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    long long n = xc.numel();
    if (n == 0) return out;
    const int threads = 256;
    long long blocks = (n + threads - 1) / threads;
    if (blocks > 1048576) blocks = 1048576;  // the grid-stride loop covers the rest
    relu_kernel<<<(unsigned int)blocks, threads>>>(
        xc.data_ptr<float>(), out.data_ptr<float>(), n);
    cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "relu_kernel launch failed: ", cudaGetErrorString(err));
    return out;
}
"""

relu_cpp_source = "torch::Tensor relu_cuda(torch::Tensor x);"

relu_ext = load_inline(
    name="relu_ext",
    cpp_sources=relu_cpp_source,
    cuda_sources=relu_cuda_source,
    functions=["relu_cuda"],
    verbose=False,
    extra_cflags=["-O3"],
    extra_ldflags=[""],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.relu = relu_ext

    def forward(self, x):
        return self.relu.relu_cuda(x)

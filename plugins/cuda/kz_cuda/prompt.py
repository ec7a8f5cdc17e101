"""The prompt sections of both CUDA dialects: for ``cuda`` its rules, the launcher API (kept to 25 lines, a
test counts them) and a one-shot example (KernelBench's elementwise add); for ``cuda-inline`` its rules and
the same example written with load_inline."""

from kzcore import one_shot

RULES = """Write the kernels in CUDA C++ inside a Python string; kz_cuda compiles it with NVRTC (no nvcc).
- Declare every kernel you launch as `extern "C" __global__ void name(...)`. NVRTC sees no headers: do not
  #include anything (int8_t..uint64_t, INFINITY, NAN, FLT_MAX, INT_MAX and math functions like expf exist).
- `ModelNew.forward` may only allocate outputs (`torch.empty`, `torch.empty_like`, `torch.zeros`, `new_empty`),
  take views and shapes (`view`, `reshape`, `contiguous`, `permute`, `transpose`, `size`, `stride`, `shape`,
  `numel`) and launch your kernels. No PyTorch compute: no `torch.*` math, no `torch.nn.functional`, no tensor
  methods such as `.sum()`, no `@`, no calls to `nn` submodules, no try/except, no cupy/triton/load_inline.
- Create the same parameters as `Model`, in the same order (keep `self.linear = nn.Linear(...)` and pass
  `self.linear.weight` to your kernel). Inputs are read-only. Guard every access with a bounds check."""

LAUNCHER_API = """from kz_cuda import load_kernels, i32, u32, i64, u64, f32, f64
kernels = load_kernels(SOURCE)      # compile SOURCE once (cached); a dict-like of its extern "C" kernels
relu = kernels["relu_kernel"]       # do this at module level, not in forward
relu(grid=(blocks,), block=(256,), args=(x, out, i32(n)), shared_mem=0)
- grid, block: an int or a tuple of 1-3 ints (at most 1024 threads per block).
- args: exactly one per kernel parameter, in order:
    pointer parameter (`const float* x`)  -> a CUDA torch tensor; its dtype must match (float* takes float32,
                                              int* int32, long long* int64, double* float64)
    int / unsigned / long long / unsigned long long / float / double
                                          -> i32(v) / u32(v) / i64(v) / u64(v) / f32(v) / f64(v)
  A bare Python int or float is an error (its C width would be a guess); so is a wrong count.
- The kernel gets the tensor's data pointer only: pass contiguous tensors (`.contiguous()`) or pass
  strides yourself. Index with long long when sizes can pass 2**31.
- shared_mem: bytes of dynamic shared memory (`extern __shared__ float buf[];`), default 0.
- Launches run asynchronously on torch's current stream; never synchronize inside forward."""

EXAMPLE = one_shot(
    """```python
import torch
from torch import nn

from kz_cuda import i64, load_kernels

SOURCE = r\"\"\"
extern "C" __global__ void add_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                      float* __restrict__ out, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}
\"\"\"

add_kernel = load_kernels(SOURCE)["add_kernel"]


class ModelNew(nn.Module):
    def forward(self, a, b):
        a, b = a.contiguous(), b.contiguous()
        out = torch.empty_like(a)
        n = a.numel()
        add_kernel(grid=((n + 255) // 256,), block=(256,), args=(a, b, out, i64(n)))
        return out
```"""
)

# ---- the cuda-inline dialect: KernelBench's load_inline format -------------------------------------------

INLINE_RULES = """Write the kernels in CUDA C++ and build them with `torch.utils.cpp_extension.load_inline` at module
level (it is compiled once with nvcc and cached):
- `cuda_sources`: your `__global__` kernels plus a host function per entry point that checks its inputs,
  allocates outputs (`torch::empty`, `torch::empty_like`, `torch::zeros`) and launches the kernels with
  `<<<grid, block>>>`. `cpp_sources`: the declarations of those host functions. `functions`: their names.
- No cuBLAS, cuDNN, CUTLASS or ATen internals, and no PyTorch compute in C++ (`torch::matmul`, `at::mm`,
  `x.sum()`, ...): every operation runs in your own kernels.
- `ModelNew.forward` only calls your extension's functions, allocates, and takes views and shapes
  (`view`, `reshape`, `contiguous`, `size`). No `torch.*` math, no `torch.nn.functional`, no tensor methods
  such as `.sum()`, no `@`, no calls to `nn` submodules, no try/except, no cupy/triton/kz_cuda.
- Create the same parameters as `Model`, in the same order (keep `self.linear = nn.Linear(...)` and pass
  `self.linear.weight` to your function). Inputs are read-only. Guard every access with a bounds check."""

INLINE_EXAMPLE = one_shot(
    """```python
import torch
from torch import nn
from torch.utils.cpp_extension import load_inline

cuda_source = r\"\"\"
__global__ void add_kernel(const float* __restrict__ a, const float* __restrict__ b,
                           float* __restrict__ out, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}

torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.is_cuda() && b.is_cuda() && a.sizes() == b.sizes(), "expected CUDA tensors of one shape");
    auto a_c = a.contiguous();
    auto b_c = b.contiguous();
    auto out = torch::empty_like(a_c);
    long long n = a_c.numel();
    int threads = 256;
    long long blocks = (n + threads - 1) / threads;
    add_kernel<<<(unsigned int)blocks, threads>>>(a_c.data_ptr<float>(), b_c.data_ptr<float>(),
                                                  out.data_ptr<float>(), n);
    return out;
}
\"\"\"

cpp_source = "torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b);"

add_ext = load_inline(
    name="add_ext",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["add_cuda"],
    verbose=False,
)


class ModelNew(nn.Module):
    def forward(self, a, b):
        return add_ext.add_cuda(a, b)
```"""
)

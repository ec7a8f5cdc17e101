"""CUDA solutions (the NVRTC dialect, ``cuda``) to kzcore's generated op-family problems
(``Cuda.variant_solution``; the problems and the member fields are kzcore/train/family.py's), written in the
style of the built-in Sigmoid and MeanReduction solutions: one thread per element for the elementwise ops,
one block per row with a warp-shuffle reduction for the row reductions. fp16 members get none: the dialect
has no ``__half`` yet. Distillation verifies them like any teacher output."""

from __future__ import annotations

_SOFTPLUS = "fmaxf({0}, 0.0f) + log1pf(expf(-fabsf({0})))"

# op -> the lines computing the result from the loaded value(s) (``v``, or ``va, vb``) and the op's scalars;
# the last line is the result's expression
LINES: dict[str, tuple[str, ...]] = {
    "relu": ("fmaxf(v, 0.0f)",),
    "sigmoid": ("1.0f / (1.0f + expf(-v))",),
    "tanh": ("tanhf(v)",),
    "gelu": ("0.5f * v * (1.0f + erff(v * 0.70710678118654752f))",),
    "gelu_tanh": ("float u = 0.79788456080286536f * (v + 0.044715f * v * v * v);", "0.5f * v * (1.0f + tanhf(u))"),
    "silu": ("v / (1.0f + expf(-v))",),
    "softplus": ("v > 20.0f ? v : " + _SOFTPLUS.format("v"),),
    "leaky_relu": ("v > 0.0f ? v : v * negative_slope",),
    "elu": ("v > 0.0f ? v : alpha * expm1f(v)",),
    "hardswish": ("v * fminf(fmaxf(v + 3.0f, 0.0f), 6.0f) / 6.0f",),
    "hardsigmoid": ("fminf(fmaxf(v + 3.0f, 0.0f), 6.0f) / 6.0f",),
    "mish": ("float sp = v > 20.0f ? v : " + _SOFTPLUS.format("v") + ";", "v * tanhf(sp)"),
    "abs": ("fabsf(v)",),
    "square": ("v * v",),
    "exp": ("expf(v)",),
    "clamp": ("fminf(fmaxf(v, min_val), max_val)",),
    "softsign": ("v / (1.0f + fabsf(v))",),
    "scale_shift": ("v * scale + shift",),
    "relu_add": ("fmaxf(va, 0.0f) + vb",),
    "sigmoid_gate": ("va / (1.0f + expf(-vb))",),
    "squared_diff": ("float d = va - vb;", "d * d"),
    "mul": ("va * vb",),
    "maximum": ("fmaxf(va, vb)",),
    # the ops only chains use
    "relu6": ("fminf(fmaxf(v, 0.0f), 6.0f)",),
    "neg": ("-v",),
    "cos": ("cosf(v)",),
    "sin": ("sinf(v)",),
}
REDUCTION_OPS = ("sum", "mean", "max")


def variant_solution(member) -> str | None:
    """The CUDA module for an op-family ``member``; None for an fp16 member or an op this module has no
    kernel for."""
    if member.family == "elementwise" and member.op in LINES and not member.fp16:
        return elementwise(member)
    if member.family == "row_reduction" and member.op in REDUCTION_OPS:
        return row_reduction(member)
    if member.family == "elementwise_chain" and all(op in LINES for op in member.ops):
        return chain(member)
    return None


def _wrap_signature(line: str, width: int = 116) -> str:
    """A kernel signature over ``width`` characters broken after a comma, aligned under its first parameter."""
    if len(line) <= width:
        return line
    cut = line.rfind(", ", 0, width) + 1
    return line[:cut] + "\n" + " " * (line.index("(") + 1) + line[cut + 1 :]


def elementwise(e) -> str:
    ptrs = "".join(f"const float* __restrict__ {x}, " for x in e.inputs)
    scalars = "".join(f", float {name}" for name, _v, _d in e.params)
    reads = (
        "        float v = x[i];\n"
        if e.inputs == ("x",)
        else "".join(f"        float v{x} = {x}[i];\n" for x in e.inputs)
    )
    lines = LINES[e.op]
    body = "".join(f"        {line}\n" for line in lines[:-1]) + f"        out[i] = {lines[-1]};\n"
    names = ("f32, i64" if e.params else "i64") + ", load_kernels"
    args = ", ".join(e.inputs)
    contig = (
        f"        {args} = {', '.join(f'{x}.contiguous()' for x in e.inputs)}\n"
        if len(e.inputs) > 1
        else "        x = x.contiguous()\n"
    )
    call = "".join(f", f32(self.{name})" for name, _v, _d in e.params)
    note = "; its scalars are typed float arguments" if e.params else ""
    signature = _wrap_signature(
        f'extern "C" __global__ void {e.op}_kernel({ptrs}float* __restrict__ out, long long n{scalars})'
    )
    return (
        f'"""{e.summary} in CUDA: one thread per element{note}."""\n\n'
        f"import torch\nfrom torch import nn\n\nfrom kz_cuda import {names}\n\n"
        'SOURCE = r"""\n'
        f"{signature} {{\n"
        "    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
        f"    if (i < n) {{\n{reads}{body}    }}\n}}\n"
        '"""\n\n'
        f'{e.op}_kernel = load_kernels(SOURCE)["{e.op}_kernel"]\n\n\n'
        "def cdiv(a, b):\n    return (a + b - 1) // b\n\n\n"
        f"class ModelNew(nn.Module):\n{e.init_source}\n"
        f"    def forward(self, {args}):\n{contig}        out = torch.empty_like({e.inputs[0]})\n"
        f"        n = {e.inputs[0]}.numel()\n"
        f"        {e.op}_kernel(grid=(cdiv(n, 256),), block=(256,), args=({args}, out, i64(n){call}))\n"
        "        return out\n"
    )


def row_reduction(r) -> str:
    kernel = f"{r.name}_kernel"
    if r.op == "max":
        helper, combine, start, fold, block = "warp_max", "v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o))", "-INFINITY", "acc = fmaxf(acc, row[c])", "block_max"  # fmt: skip
        total, merge, what = "-INFINITY", "total = fmaxf(total, scratch[w])", "max"
    else:
        helper, combine, start, fold, block = "warp_sum", "v += __shfl_xor_sync(0xffffffffu, v, o)", "0.0f", "acc += row[c]", "block_sum"  # fmt: skip
        total, merge, what = "0.0f", "total += scratch[w]", "sum"
    result = "acc / cols" if r.op == "mean" else "acc"
    shape = "(*x.shape[:-1], 1)" if r.keepdim else "x.shape[:-1]"
    return (
        f'"""{r.title} over the last dim in CUDA: one block per row, a warp-shuffle block reduction."""\n\n'
        "import torch\nfrom torch import nn\n\nfrom kz_cuda import i32, load_kernels\n\n"
        'SOURCE = r"""\n'
        f"__device__ __forceinline__ float {helper}(float v) {{\n"
        f"    for (int o = 16; o > 0; o >>= 1) {combine};\n    return v;\n}}\n\n"
        f"// Block-wide {what} (blockDim.x a multiple of 32); every thread gets the result.\n"
        f"__device__ float {block}(float v, float* scratch) {{\n    v = {helper}(v);\n"
        "    if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;\n    __syncthreads();\n"
        f"    float total = {total};\n    for (int w = 0; w < (int)(blockDim.x >> 5); ++w) {merge};\n"
        "    __syncthreads();  // scratch is reused by the next reduction\n    return total;\n}\n\n"
        f'extern "C" __global__ void {kernel}(const float* __restrict__ x, float* __restrict__ out, int cols) {{\n'
        "    __shared__ float scratch[32];\n    const float* row = x + (long long)blockIdx.x * cols;\n"
        f"    float acc = {start};\n    for (int c = threadIdx.x; c < cols; c += blockDim.x) {fold};\n"
        f"    acc = {block}(acc, scratch);\n    if (threadIdx.x == 0) out[blockIdx.x] = {result};\n}}\n"
        '"""\n\n'
        f'{kernel} = load_kernels(SOURCE)["{kernel}"]\n\n\n'
        f"class ModelNew(nn.Module):\n{r.init_source}\n"
        "    def forward(self, x):\n        cols = x.shape[-1]\n        x = x.contiguous()\n"
        "        rows = x.numel() // cols\n"
        f"        out = torch.empty({shape}, dtype=x.dtype, device=x.device)\n"
        f"        {kernel}(grid=(rows,), block=(256,), args=(x, out, i32(cols)))\n        return out\n"
    )


def chain(c) -> str:
    """A chain of unary ops fused into one kernel: each op's lines in a block of their own (their temporaries
    stay local), each updating the one register ``v``."""
    steps = ""
    for op in c.ops:
        lines = LINES[op]
        inner = "".join(f"            {line}\n" for line in lines[:-1]) + f"            v = {lines[-1]};\n"
        steps += f"        {{  // {op}\n{inner}        }}\n"
    kernel = f"{c.name}_kernel"
    signature = _wrap_signature(
        f'extern "C" __global__ void {kernel}(const float* __restrict__ x, float* __restrict__ out, long long n)'
    )
    return (
        f'"""{c.summary} in CUDA: one thread per element, every op applied in registers (one read, one write)."""\n\n'
        "import torch\nfrom torch import nn\n\nfrom kz_cuda import i64, load_kernels\n\n"
        'SOURCE = r"""\n'
        f"{signature} {{\n"
        "    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
        f"    if (i < n) {{\n        float v = x[i];\n{steps}        out[i] = v;\n    }}\n}}\n"
        '"""\n\n'
        f'{kernel} = load_kernels(SOURCE)["{kernel}"]\n\n\n'
        "def cdiv(a, b):\n    return (a + b - 1) // b\n\n\n"
        f"class ModelNew(nn.Module):\n{c.init_source}\n"
        "    def forward(self, x):\n        x = x.contiguous()\n        out = torch.empty_like(x)\n"
        "        n = x.numel()\n"
        f"        {kernel}(grid=(cdiv(n, 256),), block=(256,), args=(x, out, i64(n)))\n"
        "        return out\n"
    )

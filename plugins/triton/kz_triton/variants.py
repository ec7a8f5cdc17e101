"""Triton solutions to kzcore's generated op-family problems (``Triton.variant_solution``; the problems and
the member fields are kzcore/train/family.py's): one elementwise kernel per op, fp16 members computed in fp32
registers and stored as fp16, and one program per row for the row reductions. Distillation verifies them
like any teacher output, so an op this module writes wrongly is dropped, not trained on."""

from __future__ import annotations

_SIGMOID = "1.0 / (1.0 + tl.exp(-{0}))"
_TANH = "2.0 / (1.0 + tl.exp(-2.0 * {0})) - 1.0"
_SOFTPLUS = "tl.maximum({0}, 0.0) + tl.log(1.0 + tl.exp(-tl.abs({0})))"

# op -> the kernel body's lines over the loaded inputs (``x``, or ``a, b``) and the op's scalars; the last
# line is the result's expression
LINES: dict[str, tuple[str, ...]] = {
    "relu": ("tl.maximum(x, 0.0)",),
    "sigmoid": (_SIGMOID.format("x"),),
    "tanh": (_TANH.format("x"),),
    "gelu": ("0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))",),
    "gelu_tanh": ("u = 0.7978845608028654 * (x + 0.044715 * x * x * x)", "0.5 * x * (1.0 + " + _TANH.format("u") + ")"),
    "silu": ("x / (1.0 + tl.exp(-x))",),
    "softplus": ("sp = " + _SOFTPLUS.format("x"), "tl.where(x > 20.0, x, sp)"),
    "leaky_relu": ("tl.where(x >= 0.0, x, x * negative_slope)",),
    "elu": ("tl.where(x > 0.0, x, alpha * (tl.exp(x) - 1.0))",),
    "hardswish": ("x * tl.minimum(tl.maximum(x + 3.0, 0.0), 6.0) / 6.0",),
    "hardsigmoid": ("tl.minimum(tl.maximum(x + 3.0, 0.0), 6.0) / 6.0",),
    "mish": (
        "sp = tl.where(x > 20.0, x, " + _SOFTPLUS.format("x") + ")",
        "e = tl.exp(-2.0 * sp)",
        "x * (1.0 - e) / (1.0 + e)",
    ),
    "abs": ("tl.abs(x)",),
    "square": ("x * x",),
    "exp": ("tl.exp(x)",),
    "clamp": ("tl.minimum(tl.maximum(x, min_val), max_val)",),
    "softsign": ("x / (1.0 + tl.abs(x))",),
    "scale_shift": ("x * scale + shift",),
    "relu_add": ("tl.maximum(a, 0.0) + b",),
    "sigmoid_gate": ("a / (1.0 + tl.exp(-b))",),
    "squared_diff": ("d = a - b", "d * d"),
    "mul": ("a * b",),
    "maximum": ("tl.maximum(a, b)",),
    # the ops only chains use
    "relu6": ("tl.minimum(tl.maximum(x, 0.0), 6.0)",),
    "neg": ("-x",),
    "cos": ("tl.cos(x)",),
    "sin": ("tl.sin(x)",),
}
REDUCTION_OPS = ("sum", "mean", "max")


def variant_solution(member) -> str | None:
    """The Triton module for an op-family ``member``; None for an op this module has no kernel for."""
    if member.family == "elementwise" and member.op in LINES:
        return elementwise(member)
    if member.family == "row_reduction" and member.op in REDUCTION_OPS:
        return row_reduction(member)
    if member.family == "elementwise_chain" and all(op in LINES for op in member.ops):
        return chain(member)
    return None


def elementwise(e) -> str:
    ptrs = "".join(f"{x}_ptr, " for x in e.inputs)
    scalars = "".join(f"{name}, " for name, _v, _d in e.params)
    upcast = ".to(tl.float32)" if e.fp16 else ""
    loads = "".join(f"    {x} = tl.load({x}_ptr + offsets, mask=mask, other=0.0){upcast}\n" for x in e.inputs)
    lines = LINES[e.op]
    body = "".join(f"    {line}\n" for line in lines[:-1]) + f"    y = {lines[-1]}\n"
    store = "y.to(tl.float16)" if e.fp16 else "y"
    note = " in fp32 registers, stored as fp16" if e.fp16 else ""
    if e.params:
        note += "; " + " and ".join(name for name, _v, _d in e.params) + " are runtime scalars"
    args = ", ".join(e.inputs)
    contig = "".join(f"        {x} = {x}.contiguous()\n" for x in e.inputs)
    call_scalars = "".join(f"self.{name}, " for name, _v, _d in e.params)
    return (
        f'"""{e.summary} as one Triton elementwise kernel{note}."""\n\n'
        "import torch\nimport triton\nimport triton.language as tl\nfrom torch import nn\n\n\n"
        f"@triton.jit\ndef {e.op}_kernel({ptrs}out_ptr, n_elements, {scalars}BLOCK: tl.constexpr):\n"
        "    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n    mask = offsets < n_elements\n"
        f"{loads}{body}    tl.store(out_ptr + offsets, {store}, mask=mask)\n\n\n"
        f"class ModelNew(nn.Module):\n{e.init_source}\n"
        f"    def forward(self, {args}):\n{contig}        out = torch.empty_like({e.inputs[0]})\n"
        f"        n = {e.inputs[0]}.numel()\n        BLOCK = 1024\n"
        f"        {e.op}_kernel[(triton.cdiv(n, BLOCK),)]({args}, out, n, {call_scalars}BLOCK=BLOCK)\n"
        "        return out\n"
    )


def row_reduction(r) -> str:
    kernel = f"{r.name}_kernel"
    if r.op == "max":
        init = 'acc = tl.full((BLOCK,), float("-inf"), dtype=tl.float32)'
        step = 'acc = tl.maximum(acc, tl.load(base + offs * stride_xn, mask=offs < N, other=float("-inf")).to(tl.float32))'  # fmt: skip
        result = "tl.max(acc, axis=0)"
    else:
        init = "acc = tl.zeros((BLOCK,), dtype=tl.float32)"
        step = "acc += tl.load(base + offs * stride_xn, mask=offs < N, other=0.0).to(tl.float32)"
        result = "tl.sum(acc, axis=0)" + (" / N" if r.op == "mean" else "")
    shape = "(*rows, 1)" if r.keepdim else "rows"
    return (
        f'"""{r.title} over the last dimension: one program per row, looping over the row in BLOCK chunks."""\n\n'
        "import triton\nimport triton.language as tl\nfrom torch import nn\n\n\n"
        f"@triton.jit\ndef {kernel}(x_ptr, out_ptr, N, stride_xm, stride_xn, BLOCK: tl.constexpr):\n"
        "    row = tl.program_id(0).to(tl.int64)\n    base = x_ptr + row * stride_xm\n"
        f"    {init}\n    for n0 in range(0, N, BLOCK):\n        offs = n0 + tl.arange(0, BLOCK)\n"
        f"        {step}\n    tl.store(out_ptr + row, {result})\n\n\n"
        f"class ModelNew(nn.Module):\n{r.init_source}\n"
        "    def forward(self, x):\n        rows = x.shape[:-1]\n        N = x.shape[-1]\n"
        "        x2 = x.reshape(-1, N)\n        out = x.new_empty((x2.shape[0],))\n        BLOCK = 1024\n"
        f"        {kernel}[(x2.shape[0],)](x2, out, N, x2.stride(0), x2.stride(1), BLOCK=BLOCK)\n"
        f"        return out.view({shape})\n"
    )


def chain(c) -> str:
    """A chain of unary ops fused into one kernel: each op's lines in turn, each rebinding ``x``."""
    steps = ""
    for op in c.ops:
        lines = LINES[op]
        steps += f"    # {op}\n" + "".join(f"    {line}\n" for line in lines[:-1]) + f"    x = {lines[-1]}\n"
    kernel = f"{c.name}_kernel"
    return (
        f'"""{c.summary} as one Triton kernel: every op applied in registers (one read, one write)."""\n\n'
        "import torch\nimport triton\nimport triton.language as tl\nfrom torch import nn\n\n\n"
        f"@triton.jit\ndef {kernel}(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):\n"
        "    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n    mask = offsets < n_elements\n"
        f"    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)\n{steps}"
        "    tl.store(out_ptr + offsets, x, mask=mask)\n\n\n"
        f"class ModelNew(nn.Module):\n{c.init_source}\n"
        "    def forward(self, x):\n        x = x.contiguous()\n        out = torch.empty_like(x)\n"
        "        n = x.numel()\n        BLOCK = 1024\n"
        f"        {kernel}[(triton.cdiv(n, BLOCK),)](x, out, n, BLOCK=BLOCK)\n"
        "        return out\n"
    )

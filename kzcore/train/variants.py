"""More cold-start data: variant problems with candidate solutions that distillation verifies like any other
teacher output (kzcore/train/distill.py evaluates them; only correct ones become SFT rows).

Two sources:

- **Size variants** of a suite problem that ships a reference solution in the language: the module constants
  its ``KZ_SIZES`` profiles name (the ones that feed ``get_inputs``/``get_init_inputs``) are scaled down
  (1/2, 1/4, 3/4; never up; a constant divisible by 16 stays so), the profiles are scaled along (never above
  the new full size) and the docstring states the new sizes. The solution is the reference solution
  unchanged: reference solutions are shape-generic, and a variant whose solution fails verification is
  simply not kept.
- **An op family** from templates: elementwise activations, a few binary/fused elementwise ops and row
  reductions over the last dim, each as a KernelBench-format problem with a Triton solution and a CUDA
  (NVRTC dialect) solution written in the style of the built-in Sigmoid / MeanReduction solutions; fp16
  copies of the unary members get a Triton solution only (the NVRTC dialect has no ``__half`` yet).

Exclusion rule (``exclude_heldout``): a held-out name names ops: the ``_``-separated words of the name
(case-insensitive, leading number dropped) looked up in ``NAME_OPS`` — ``1_ReLU`` → relu, ``2_GELU`` →
gelu and gelu_tanh, ``7_SumReduction`` → sum, a level-2 fusion such as ``2_Gemm_Scale_Sigmoid`` → every
activation or reduction among its words (sigmoid), KernelBench names the same way (``19_ReLU`` → relu). A
variant is dropped when its origin problem is held out, or when the one op it computes is among the ops the
held-out names name (so held-out 3_Sigmoid drops 3_Sigmoid's size variants and the sigmoid family member,
and held-out 2_Gemm_Scale_Sigmoid drops the sigmoid family member too). Size variants of a fusion compute
no single op and are dropped only with their origin.
"""

from __future__ import annotations

import ast
import random
import re

import attrs

from kzcore.errors import ProblemFormatError
from kzcore.types import Candidate, Problem

FACTORS = (0.5, 0.25, 0.75)
SMALL_FLOOR = 8  # a scaled "small" size stays at least this (or its original value, if smaller)


@attrs.frozen
class Variant:
    """A generated problem and its candidate solutions (language → module source)."""

    problem: Problem
    solutions: dict[str, str]
    origin: str  # the suite problem it was derived from (size variants), or the op (family members)
    kind: str  # "size" | "family" | "fp16"
    op: str = ""  # the single op it computes ("" for a fusion)

    @property
    def name(self) -> str:
        return self.problem.name

    def candidate(self, language: str) -> Candidate | None:
        source = self.solutions.get(language)
        if source is None:
            return None
        return Candidate(
            problem=self.name,
            language=language,
            level=self.problem.level,
            source=source,
            origin=f"variant:{self.kind}:{self.origin}",
        )


# ----------------------------------------------------------------------------------------------------
# exclusion
# ----------------------------------------------------------------------------------------------------

# A name word → the family ops it names.
NAME_OPS: dict[str, tuple[str, ...]] = {
    "relu": ("relu",),
    "sigmoid": ("sigmoid",),
    "tanh": ("tanh",),
    "gelu": ("gelu", "gelu_tanh"),
    "silu": ("silu",),
    "swish": ("silu",),
    "softplus": ("softplus",),
    "leakyrelu": ("leaky_relu",),
    "leaky": ("leaky_relu",),
    "elu": ("elu",),
    "hardswish": ("hardswish",),
    "hardsigmoid": ("hardsigmoid",),
    "mish": ("mish",),
    "abs": ("abs",),
    "square": ("square",),
    "exp": ("exp",),
    "clamp": ("clamp",),
    "hardtanh": ("clamp",),
    "softsign": ("softsign",),
    "muladd": ("muladd",),
    "sum": ("sum",),
    "sumreduction": ("sum",),
    "mean": ("mean",),
    "meanreduction": ("mean",),
    "max": ("max",),
    "maxreduction": ("max",),
}


def ops_named(name: str) -> set[str]:
    """The family ops a problem name names, by its words (``"2_Gemm_Scale_Sigmoid"`` → {"sigmoid"})."""
    words = [w.lower() for w in re.sub(r"^\d+_", "", name).split("_") if w]
    return {op for w in words for op in NAME_OPS.get(w, ())}


def single_op(name: str, level: int) -> str:
    """The one op a level-1 problem computes, by its name ("" when none or several)."""
    ops = ops_named(name)
    if level != 1 or len(ops) != 1:
        return ""
    return next(iter(ops))


def exclude_heldout(variants: list[Variant], heldout: list[str]) -> list[Variant]:
    """``variants`` less those whose origin is held out or whose op a held-out name names (module doc)."""
    names = set(heldout)
    ops = set().union(*(ops_named(n) for n in names)) if names else set()
    return [v for v in variants if v.origin not in names and not (v.op and v.op in ops)]


def choose(variants: list[Variant], count: int | None, seed: int) -> list[Variant]:
    """At most ``count`` variants, the same ones for the same seed (0/None: none)."""
    if not count:
        return []
    order = sorted(variants, key=lambda v: v.name)
    random.Random(seed).shuffle(order)
    return order[:count]


# ----------------------------------------------------------------------------------------------------
# size variants
# ----------------------------------------------------------------------------------------------------


def _int_constants(tree: ast.Module) -> dict[str, ast.Constant]:
    out = {}
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant)
            and type(node.value.value) is int
        ):
            out[node.targets[0].id] = node.value
    return out


def _profiles(tree: ast.Module) -> tuple[ast.Assign | None, dict[str, dict[str, int]]]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "KZ_SIZES" for t in node.targets):
            try:
                return node, ast.literal_eval(node.value)
            except ValueError:
                return node, {}
    return None, {}


def _scaled(value: int, factor: float) -> int | None:
    new = int(value * factor)
    if new < 1 or new == value or (value % 16 == 0 and new % 16):
        return None
    return new


def _size_plans(names: list[str]) -> list[dict[str, float]]:
    """Which constants each variant scales by how much: all by 1/2, the first by 1/4, the last by 3/4, the
    first by 3/4 and the rest by 1/2."""
    first, last, rest = names[0], names[-1], names[1:]
    return [
        dict.fromkeys(names, 0.5),
        {first: 0.25},
        {last: 0.75},
        {first: 0.75, **dict.fromkeys(rest, 0.5)},
    ]


def _render_profiles(profiles: dict[str, dict[str, int]]) -> str:
    lines = ["KZ_SIZES = {"]
    for profile, sizes in profiles.items():
        inner = ", ".join(f'"{k}": {v}' for k, v in sizes.items())
        lines.append(f'    "{profile}": {{{inner}}},')
    return "\n".join(lines + ["}"])


def _replace_lines(source: str, start: int, end: int, text: str) -> str:
    lines = source.split("\n")
    return "\n".join(lines[: start - 1] + text.split("\n") + lines[end:])


def resize_source(source: str, new: dict[str, int]) -> str:
    """``source`` with the integer constants in ``new`` set, its ``KZ_SIZES`` profiles kept at or below the
    new sizes (and scaled like them, not below ``SMALL_FLOOR``), and the sizes stated in the docstring."""
    tree = ast.parse(source)
    constants = _int_constants(tree)
    names = _size_names(tree)
    lines = source.split("\n")
    for name, value in new.items():  # same-line edits: the line numbers below stay valid
        const = constants[name]
        line = lines[const.lineno - 1]
        lines[const.lineno - 1] = line[: const.col_offset] + str(value) + line[const.end_col_offset :]
    source = "\n".join(lines)
    node, profiles = _profiles(tree)
    if node is not None and profiles:
        fixed = {}
        for profile, sizes in profiles.items():
            fixed[profile] = {}
            for k, v in sizes.items():
                if k in new:
                    factor = new[k] / constants[k].value
                    v = min(new[k], max(min(v, SMALL_FLOOR), round(v * factor)))
                fixed[profile][k] = v
        if "alt" in fixed and fixed["alt"] == fixed.get("small"):
            del fixed["alt"]  # no second shape left to try
        source = _replace_lines(source, node.lineno, node.end_lineno, _render_profiles(fixed))
    resized = _int_constants(ast.parse(source))
    return _state_sizes(source, {k: resized[k] for k in names})


def _size_names(tree: ast.Module) -> list[str]:
    _node, profiles = _profiles(tree)
    constants = _int_constants(tree)
    names: list[str] = []
    for sizes in profiles.values():
        names += [k for k in sizes if k in constants and k not in names]
    return names


def _state_sizes(source: str, constants: dict[str, ast.Constant]) -> str:
    sizes = ", ".join(f"{k}={c.value}" for k, c in constants.items())
    tree = ast.parse(source)
    doc = tree.body[0] if tree.body else None
    if not (isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant) and isinstance(doc.value.value, str)):
        return f'"""Sizes: {sizes}."""\n\n{source}'
    lines = source.split("\n")
    end = lines[doc.end_lineno - 1]
    cut = end.rfind('"""')
    if cut < 0:
        return source
    lines[doc.end_lineno - 1] = end[:cut].rstrip() + f" Sizes: {sizes}." + end[cut:]
    return "\n".join(lines)


def size_variants(problem: Problem, solutions: dict[str, str]) -> list[Variant]:
    """Up to four smaller copies of ``problem`` (names ``NAME__v1`` ...), each with ``solutions``."""
    tree = ast.parse(problem.source)
    names = _size_names(tree)
    if not names or not solutions:
        return []
    constants = _int_constants(tree)
    out, seen = [], set()
    op = single_op(problem.name, problem.level)
    for plan in _size_plans(names):
        new = {k: v for k, f in plan.items() if (v := _scaled(constants[k].value, f)) is not None}
        key = tuple(sorted(new.items()))
        if not new or key in seen:
            continue
        seen.add(key)
        name = f"{problem.name}__v{len(out) + 1}"
        source = resize_source(problem.source, new)
        out.append(
            Variant(
                problem=Problem(name=name, source=source, level=problem.level, path=None, suite="variants"),
                solutions=dict(solutions),
                origin=problem.name,
                kind="size",
                op=op,
            )
        )
    return out


def reference_sources(problems: list[Problem], language: str, suite: str, pm=None) -> dict[str, str]:
    """Problem name → the suite's reference solution source for ``language`` (first sample); {} when the
    suite ships none for it."""
    from kzcore.problems import load_solutions

    mine = [p for p in problems if p.suite == suite]
    try:
        candidates = load_solutions(suite, mine, language, pm=pm)
    except ProblemFormatError:
        return {}
    out: dict[str, str] = {}
    for c in candidates:
        out.setdefault(c.problem, c.source)
    return out


# ----------------------------------------------------------------------------------------------------
# the op family
# ----------------------------------------------------------------------------------------------------


@attrs.frozen
class Elementwise:
    """One elementwise op: the PyTorch expression, and the Triton and CUDA lines whose last line is the
    result's expression (over ``x`` / ``v`` for one input, ``a, b`` / ``va, vb`` for two)."""

    op: str
    summary: str
    torch_expr: str
    triton: tuple[str, ...]
    cuda: tuple[str, ...]
    inputs: tuple[str, ...] = ("x",)
    params: tuple[tuple[str, float, float], ...] = ()  # (name, value passed, constructor default)
    input_scale: str = ""
    functional: bool = False


_SIGMOID_T = "1.0 / (1.0 + tl.exp(-{0}))"
_TANH_T = "2.0 / (1.0 + tl.exp(-2.0 * {0})) - 1.0"
_SOFTPLUS_T = "tl.maximum({0}, 0.0) + tl.log(1.0 + tl.exp(-tl.abs({0})))"
_SOFTPLUS_C = "fmaxf({0}, 0.0f) + log1pf(expf(-fabsf({0})))"

ELEMENTWISE: tuple[Elementwise, ...] = (
    Elementwise("relu", "ReLU", "torch.relu(x)", ("tl.maximum(x, 0.0)",), ("fmaxf(v, 0.0f)",)),
    Elementwise("sigmoid", "Sigmoid", "torch.sigmoid(x)", (_SIGMOID_T.format("x"),), ("1.0f / (1.0f + expf(-v))",)),
    Elementwise("tanh", "Tanh", "torch.tanh(x)", (_TANH_T.format("x"),), ("tanhf(v)",)),
    Elementwise(
        "gelu",
        "Exact (erf) GELU",
        "F.gelu(x)",
        ("0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))",),
        ("0.5f * v * (1.0f + erff(v * 0.70710678118654752f))",),
        functional=True,
    ),
    Elementwise(
        "gelu_tanh",
        "GELU with the tanh approximation",
        'F.gelu(x, approximate="tanh")',
        ("u = 0.7978845608028654 * (x + 0.044715 * x * x * x)", "0.5 * x * (1.0 + " + _TANH_T.format("u") + ")"),
        ("float u = 0.79788456080286536f * (v + 0.044715f * v * v * v);", "0.5f * v * (1.0f + tanhf(u))"),
        functional=True,
    ),
    Elementwise(
        "silu",
        "SiLU (x * sigmoid(x))",
        "F.silu(x)",
        ("x / (1.0 + tl.exp(-x))",),
        ("v / (1.0f + expf(-v))",),
        functional=True,
    ),  # fmt: skip
    Elementwise(
        "softplus",
        "Softplus",
        "F.softplus(x)",
        ("sp = " + _SOFTPLUS_T.format("x"), "tl.where(x > 20.0, x, sp)"),
        ("v > 20.0f ? v : " + _SOFTPLUS_C.format("v"),),
        input_scale="2 * ",
        functional=True,
    ),
    Elementwise(
        "leaky_relu",
        "LeakyReLU with a constructor-supplied negative slope",
        "F.leaky_relu(x, negative_slope=self.negative_slope)",
        ("tl.where(x >= 0.0, x, x * negative_slope)",),
        ("v > 0.0f ? v : v * negative_slope",),
        params=(("negative_slope", 0.1, 0.01),),
        functional=True,
    ),
    Elementwise(
        "elu",
        "ELU with a constructor-supplied alpha",
        "F.elu(x, alpha=self.alpha)",
        ("tl.where(x > 0.0, x, alpha * (tl.exp(x) - 1.0))",),
        ("v > 0.0f ? v : alpha * expm1f(v)",),
        params=(("alpha", 1.5, 1.0),),
        functional=True,
    ),
    Elementwise(
        "hardswish",
        "HardSwish (x * relu6(x + 3) / 6)",
        "F.hardswish(x)",
        ("x * tl.minimum(tl.maximum(x + 3.0, 0.0), 6.0) / 6.0",),
        ("v * fminf(fmaxf(v + 3.0f, 0.0f), 6.0f) / 6.0f",),
        input_scale="4 * ",
        functional=True,
    ),
    Elementwise(
        "hardsigmoid",
        "HardSigmoid (relu6(x + 3) / 6)",
        "F.hardsigmoid(x)",
        ("tl.minimum(tl.maximum(x + 3.0, 0.0), 6.0) / 6.0",),
        ("fminf(fmaxf(v + 3.0f, 0.0f), 6.0f) / 6.0f",),
        input_scale="4 * ",
        functional=True,
    ),
    Elementwise(
        "mish",
        "Mish (x * tanh(softplus(x)))",
        "F.mish(x)",
        (
            "sp = tl.where(x > 20.0, x, " + _SOFTPLUS_T.format("x") + ")",
            "e = tl.exp(-2.0 * sp)",
            "x * (1.0 - e) / (1.0 + e)",
        ),  # fmt: skip
        ("float sp = v > 20.0f ? v : " + _SOFTPLUS_C.format("v") + ";", "v * tanhf(sp)"),
        input_scale="2 * ",
        functional=True,
    ),
    Elementwise("abs", "Absolute value", "torch.abs(x)", ("tl.abs(x)",), ("fabsf(v)",)),
    Elementwise("square", "Elementwise square", "x * x", ("x * x",), ("v * v",)),
    Elementwise("exp", "Exponential", "torch.exp(x)", ("tl.exp(x)",), ("expf(v)",), input_scale="0.5 * "),
    Elementwise(
        "clamp",
        "Clamp to a constructor-supplied range",
        "torch.clamp(x, min=self.min_val, max=self.max_val)",
        ("tl.minimum(tl.maximum(x, min_val), max_val)",),
        ("fminf(fmaxf(v, min_val), max_val)",),
        params=(("min_val", -0.5, -1.0), ("max_val", 0.75, 1.0)),
    ),
    Elementwise(
        "softsign",
        "Softsign (x / (1 + |x|))",
        "F.softsign(x)",
        ("x / (1.0 + tl.abs(x))",),
        ("v / (1.0f + fabsf(v))",),
        functional=True,
    ),  # fmt: skip
    Elementwise(
        "scale_shift",
        "x * scale + shift with constructor-supplied scalars",
        "x * self.scale + self.shift",
        ("x * scale + shift",),
        ("v * scale + shift",),
        params=(("scale", 1.75, 1.0), ("shift", -0.5, 0.0)),
    ),
    Elementwise(
        "relu_add",
        "relu(a) + b",
        "torch.relu(a) + b",
        ("tl.maximum(a, 0.0) + b",),
        ("fmaxf(va, 0.0f) + vb",),
        inputs=("a", "b"),
    ),
    Elementwise(
        "sigmoid_gate",
        "a * sigmoid(b)",
        "a * torch.sigmoid(b)",
        ("a / (1.0 + tl.exp(-b))",),
        ("va / (1.0f + expf(-vb))",),
        inputs=("a", "b"),
    ),
    Elementwise(
        "squared_diff",
        "(a - b) ** 2",
        "(a - b) * (a - b)",
        ("d = a - b", "d * d"),
        ("float d = va - vb;", "d * d"),
        inputs=("a", "b"),
    ),  # fmt: skip
    Elementwise("mul", "a * b", "a * b", ("a * b",), ("va * vb",), inputs=("a", "b")),
    Elementwise(
        "maximum",
        "Elementwise maximum of two tensors",
        "torch.maximum(a, b)",
        ("tl.maximum(a, b)",),
        ("fmaxf(va, vb)",),
        inputs=("a", "b"),
    ),  # fmt: skip
)

FP16_OPS = ("relu", "sigmoid", "tanh", "gelu", "silu", "leaky_relu", "hardswish", "abs", "square")

_ALT_NOTE = '# "alt": a second shape for one more trial, so a kernel that hard-codes the tested shape fails.'


def _profiles_text(index: int) -> str:
    small = 200 + 37 * (index % 7)
    return f'{_ALT_NOTE}\nKZ_SIZES = {{\n    "small": {{"batch_size": 16, "dim": {small}}},\n    "alt": {{"batch_size": 32, "dim": 336}},\n}}\n'  # fmt: skip


def _ctor(params: tuple[tuple[str, float, float], ...]) -> str:
    args = "".join(f", {name}: float = {default}" for name, _v, default in params)
    body = "".join(f"\n        self.{name} = {name}" for name, _v, _d in params)
    return f"    def __init__(self{args}):\n        super().__init__(){body}\n"


def elementwise_problem(e: Elementwise, index: int, fp16: bool = False) -> str:
    batch, dim = (16384, 8192) if len(e.inputs) == 1 else (8192, 8192)
    dtype = ", dtype=torch.float16" if fp16 else ""
    draws = [f"{e.input_scale}torch.randn(batch_size, dim{dtype})" for _ in e.inputs]
    inputs = f"[{draws[0]}]" if len(draws) == 1 else "[\n" + "".join(f"        {d},\n" for d in draws) + "    ]"
    consts = "".join(f"{name} = {value}\n" for name, value, _d in e.params)
    imports = "import torch\nimport torch.nn.functional as F\nfrom torch import nn\n" if e.functional else "import torch\nfrom torch import nn\n"  # fmt: skip
    what = "an fp16 2-D tensor" if fp16 else ("two large 2-D tensors" if len(e.inputs) > 1 else "a large 2-D tensor")
    return (
        f'"""{e.summary} over {what}."""\n\n{imports}\nbatch_size = {batch}\ndim = {dim}\n{consts}\n\n'
        f"class Model(nn.Module):\n{_ctor(e.params)}\n"
        f"    def forward(self, {', '.join(e.inputs)}):\n        return {e.torch_expr}\n\n\n"
        f"def get_inputs():\n    return {inputs}\n\n\n"
        f"def get_init_inputs():\n    return [{', '.join(name for name, _v, _d in e.params)}]\n\n\n"
        + _profiles_text(index)
    )


def elementwise_triton(e: Elementwise, fp16: bool = False) -> str:
    ptrs = "".join(f"{x}_ptr, " for x in e.inputs)
    scalars = "".join(f"{name}, " for name, _v, _d in e.params)
    upcast = ".to(tl.float32)" if fp16 else ""
    loads = "".join(f"    {x} = tl.load({x}_ptr + offsets, mask=mask, other=0.0){upcast}\n" for x in e.inputs)
    body = "".join(f"    {line}\n" for line in e.triton[:-1]) + f"    y = {e.triton[-1]}\n"
    store = "y.to(tl.float16)" if fp16 else "y"
    note = " in fp32 registers, stored as fp16" if fp16 else ""
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
        f"class ModelNew(nn.Module):\n{_ctor(e.params)}\n"
        f"    def forward(self, {args}):\n{contig}        out = torch.empty_like({e.inputs[0]})\n"
        f"        n = {e.inputs[0]}.numel()\n        BLOCK = 1024\n"
        f"        {e.op}_kernel[(triton.cdiv(n, BLOCK),)]({args}, out, n, {call_scalars}BLOCK=BLOCK)\n"
        "        return out\n"
    )


def _wrap_signature(line: str, width: int = 116) -> str:
    """A kernel signature over ``width`` characters broken after a comma, aligned under its first parameter."""
    if len(line) <= width:
        return line
    cut = line.rfind(", ", 0, width) + 1
    return line[:cut] + "\n" + " " * (line.index("(") + 1) + line[cut + 1 :]


def elementwise_cuda(e: Elementwise) -> str:
    ptrs = "".join(f"const float* __restrict__ {x}, " for x in e.inputs)
    scalars = "".join(f", float {name}" for name, _v, _d in e.params)
    reads = (
        "        float v = x[i];\n"
        if e.inputs == ("x",)
        else "".join(f"        float v{x} = {x}[i];\n" for x in e.inputs)
    )
    body = "".join(f"        {line}\n" for line in e.cuda[:-1]) + f"        out[i] = {e.cuda[-1]};\n"
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
        f"class ModelNew(nn.Module):\n{_ctor(e.params)}\n"
        f"    def forward(self, {args}):\n{contig}        out = torch.empty_like({e.inputs[0]})\n"
        f"        n = {e.inputs[0]}.numel()\n"
        f"        {e.op}_kernel(grid=(cdiv(n, 256),), block=(256,), args=({args}, out, i64(n){call}))\n"
        "        return out\n"
    )


@attrs.frozen
class RowReduction:
    op: str  # "sum" | "mean" | "max"
    keepdim: bool


REDUCTIONS = tuple(RowReduction(op, keep) for op in ("sum", "mean", "max") for keep in (False, True))

_REDUCE = {
    "sum": (
        "Sum",
        "torch.sum",
        "torch.randn(batch_size, dim) * dim**-0.5",
        "    # Scaled so the sums are O(1) whatever dim is.\n",
    ),  # fmt: skip
    "mean": (
        "Mean",
        "torch.mean",
        "torch.randn(batch_size, dim) + 4 * torch.randn(batch_size, 1)",
        "    # A per-row offset makes the row means O(1) and distinct.\n",
    ),  # fmt: skip
    "max": ("Max", "torch.amax", "torch.randn(batch_size, dim)", ""),
}


def reduction_name(r: RowReduction) -> str:
    return f"row_{r.op}" + ("_keepdim" if r.keepdim else "")


def reduction_problem(r: RowReduction, index: int) -> str:
    title, fn, draw, comment = _REDUCE[r.op]
    keep = ", keeping the reduced dimension" if r.keepdim else ""
    keep_arg = ", keepdim=True" if r.keepdim else ""
    return (
        f'"""{title} over the last dimension of a large 2-D tensor{keep}."""\n\n'
        "import torch\nfrom torch import nn\n\nbatch_size = 16384\ndim = 8192\n\n\n"
        f"class Model(nn.Module):\n{_ctor(())}\n"
        f"    def forward(self, x):\n        return {fn}(x, dim=-1{keep_arg})\n\n\n"
        f"def get_inputs():\n{comment}    return [{draw}]\n\n\n"
        "def get_init_inputs():\n    return []\n\n\n" + _profiles_text(index)
    )


def reduction_triton(r: RowReduction) -> str:
    kernel = f"{reduction_name(r)}_kernel"
    title = _REDUCE[r.op][0]
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
        f'"""{title} over the last dimension: one program per row, looping over the row in BLOCK chunks."""\n\n'
        "import triton\nimport triton.language as tl\nfrom torch import nn\n\n\n"
        f"@triton.jit\ndef {kernel}(x_ptr, out_ptr, N, stride_xm, stride_xn, BLOCK: tl.constexpr):\n"
        "    row = tl.program_id(0).to(tl.int64)\n    base = x_ptr + row * stride_xm\n"
        f"    {init}\n    for n0 in range(0, N, BLOCK):\n        offs = n0 + tl.arange(0, BLOCK)\n"
        f"        {step}\n    tl.store(out_ptr + row, {result})\n\n\n"
        f"class ModelNew(nn.Module):\n{_ctor(())}\n"
        "    def forward(self, x):\n        rows = x.shape[:-1]\n        N = x.shape[-1]\n"
        "        x2 = x.reshape(-1, N)\n        out = x.new_empty((x2.shape[0],))\n        BLOCK = 1024\n"
        f"        {kernel}[(x2.shape[0],)](x2, out, N, x2.stride(0), x2.stride(1), BLOCK=BLOCK)\n"
        f"        return out.view({shape})\n"
    )


def reduction_cuda(r: RowReduction) -> str:
    kernel = f"{reduction_name(r)}_kernel"
    title = _REDUCE[r.op][0]
    if r.op == "max":
        helper, combine, start, fold, block = "warp_max", "v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o))", "-INFINITY", "acc = fmaxf(acc, row[c])", "block_max"  # fmt: skip
        total, merge, what = "-INFINITY", "total = fmaxf(total, scratch[w])", "max"
    else:
        helper, combine, start, fold, block = "warp_sum", "v += __shfl_xor_sync(0xffffffffu, v, o)", "0.0f", "acc += row[c]", "block_sum"  # fmt: skip
        total, merge, what = "0.0f", "total += scratch[w]", "sum"
    result = "acc / cols" if r.op == "mean" else "acc"
    shape = "(*x.shape[:-1], 1)" if r.keepdim else "x.shape[:-1]"
    return (
        f'"""{title} over the last dim in CUDA: one block per row, a warp-shuffle block reduction."""\n\n'
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
        f"class ModelNew(nn.Module):\n{_ctor(())}\n"
        "    def forward(self, x):\n        cols = x.shape[-1]\n        x = x.contiguous()\n"
        "        rows = x.numel() // cols\n"
        f"        out = torch.empty({shape}, dtype=x.dtype, device=x.device)\n"
        f"        {kernel}(grid=(rows,), block=(256,), args=(x, out, i32(cols)))\n        return out\n"
    )


def _family_problem(name: str, source: str) -> Problem:
    return Problem(name=name, source=source, level=1, path=None, suite="variants")


def family_variants() -> list[Variant]:
    """Every family member (``fam_<op>``), its fp16 copies (``fam_<op>__fp16``, Triton only) and the row
    reductions (``fam_row_<op>[_keepdim]``)."""
    out = []
    for i, e in enumerate(ELEMENTWISE):
        solutions = {"triton": elementwise_triton(e), "cuda": elementwise_cuda(e)}
        out.append(Variant(_family_problem(f"fam_{e.op}", elementwise_problem(e, i)), solutions, e.op, "family", e.op))
        if e.op in FP16_OPS:
            problem = _family_problem(f"fam_{e.op}__fp16", elementwise_problem(e, i, fp16=True))
            out.append(Variant(problem, {"triton": elementwise_triton(e, fp16=True)}, e.op, "fp16", e.op))
    for j, r in enumerate(REDUCTIONS):
        solutions = {"triton": reduction_triton(r), "cuda": reduction_cuda(r)}
        problem = _family_problem(f"fam_{reduction_name(r)}", reduction_problem(r, len(ELEMENTWISE) + j))
        out.append(Variant(problem, solutions, r.op, "family", r.op))
    return out


def generate(problems: list[Problem], languages: list[str], suite: str = "builtin", pm=None) -> list[Variant]:
    """Size variants of ``problems`` that ``suite`` ships reference solutions for (in any of ``languages``),
    then the op family; solutions only for ``languages``."""
    refs = {lang: reference_sources(problems, lang, suite, pm=pm) for lang in languages}
    out = []
    for p in problems:
        solutions = {lang: refs[lang][p.name] for lang in languages if p.name in refs[lang]}
        out += size_variants(p, solutions)
    for v in family_variants():
        solutions = {lang: s for lang, s in v.solutions.items() if lang in languages}
        if solutions:
            out.append(attrs.evolve(v, solutions=solutions))
    return out

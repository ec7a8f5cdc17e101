"""The op family: generated KernelBench-format problems for cold start (kzcore/train/variants.py) —
elementwise activations, a few binary and fused elementwise ops, fp16 copies of some unary ones, and row
reductions over the last dim; and, when a config asks for them, chains of two elementwise ops (`Chain`).
This module writes the problems, in PyTorch only. The solutions are each language's own
(`Language.variant_solution`, given a member of this module: an `Elementwise`, a `RowReduction` or a
`Chain`); a language that has none for a member returns None, and distillation keeps only solutions the
evaluator verifies."""

from __future__ import annotations

import random
from typing import ClassVar

import attrs

ELEMENTWISE_FAMILY = "elementwise"
ROW_REDUCTION_FAMILY = "row_reduction"


def init_source(params: tuple[tuple[str, float, float], ...]) -> str:
    """The ``__init__`` method (four-space indented, newline-terminated) of a module whose constructor takes
    ``params`` (name, value passed, default) and keeps each as an attribute."""
    args = "".join(f", {name}: float = {default}" for name, _v, default in params)
    body = "".join(f"\n        self.{name} = {name}" for name, _v, _d in params)
    return f"    def __init__(self{args}):\n        super().__init__(){body}\n"


@attrs.frozen
class Elementwise:
    """One elementwise op: ``torch_expr`` over the inputs named in ``inputs`` (``x`` for one, ``a, b`` for
    two). ``params`` are constructor scalars (name, value the problem passes, constructor default), which a
    solution takes as runtime scalars (``self.<name>``). ``fp16``: the inputs and output are float16 (the
    problem's fp16 copy). ``init_source`` is the ``__init__`` method the problem's ``Model`` has and a
    solution's ``ModelNew`` needs. ``input_scale`` and ``functional`` shape the problem's source only."""

    family: ClassVar[str] = ELEMENTWISE_FAMILY

    op: str
    summary: str
    torch_expr: str
    inputs: tuple[str, ...] = ("x",)
    params: tuple[tuple[str, float, float], ...] = ()  # (name, value passed, constructor default)
    input_scale: str = ""
    functional: bool = False
    fp16: bool = False

    @property
    def init_source(self) -> str:
        return init_source(self.params)


ELEMENTWISE: tuple[Elementwise, ...] = (
    Elementwise("relu", "ReLU", "torch.relu(x)"),
    Elementwise("sigmoid", "Sigmoid", "torch.sigmoid(x)"),
    Elementwise("tanh", "Tanh", "torch.tanh(x)"),
    Elementwise("gelu", "Exact (erf) GELU", "F.gelu(x)", functional=True),
    Elementwise("gelu_tanh", "GELU with the tanh approximation", 'F.gelu(x, approximate="tanh")', functional=True),
    Elementwise("silu", "SiLU (x * sigmoid(x))", "F.silu(x)", functional=True),
    Elementwise("softplus", "Softplus", "F.softplus(x)", input_scale="2 * ", functional=True),
    Elementwise(
        "leaky_relu",
        "LeakyReLU with a constructor-supplied negative slope",
        "F.leaky_relu(x, negative_slope=self.negative_slope)",
        params=(("negative_slope", 0.1, 0.01),),
        functional=True,
    ),
    Elementwise(
        "elu",
        "ELU with a constructor-supplied alpha",
        "F.elu(x, alpha=self.alpha)",
        params=(("alpha", 1.5, 1.0),),
        functional=True,
    ),
    Elementwise("hardswish", "HardSwish (x * relu6(x + 3) / 6)", "F.hardswish(x)", input_scale="4 * ", functional=True),
    Elementwise(
        "hardsigmoid", "HardSigmoid (relu6(x + 3) / 6)", "F.hardsigmoid(x)", input_scale="4 * ", functional=True
    ),
    Elementwise("mish", "Mish (x * tanh(softplus(x)))", "F.mish(x)", input_scale="2 * ", functional=True),
    Elementwise("abs", "Absolute value", "torch.abs(x)"),
    Elementwise("square", "Elementwise square", "x * x"),
    Elementwise("exp", "Exponential", "torch.exp(x)", input_scale="0.5 * "),
    Elementwise(
        "clamp",
        "Clamp to a constructor-supplied range",
        "torch.clamp(x, min=self.min_val, max=self.max_val)",
        params=(("min_val", -0.5, -1.0), ("max_val", 0.75, 1.0)),
    ),
    Elementwise("softsign", "Softsign (x / (1 + |x|))", "F.softsign(x)", functional=True),
    Elementwise(
        "scale_shift",
        "x * scale + shift with constructor-supplied scalars",
        "x * self.scale + self.shift",
        params=(("scale", 1.75, 1.0), ("shift", -0.5, 0.0)),
    ),
    Elementwise("relu_add", "relu(a) + b", "torch.relu(a) + b", inputs=("a", "b")),
    Elementwise("sigmoid_gate", "a * sigmoid(b)", "a * torch.sigmoid(b)", inputs=("a", "b")),
    Elementwise("squared_diff", "(a - b) ** 2", "(a - b) * (a - b)", inputs=("a", "b")),
    Elementwise("mul", "a * b", "a * b", inputs=("a", "b")),
    Elementwise("maximum", "Elementwise maximum of two tensors", "torch.maximum(a, b)", inputs=("a", "b")),
)

# the unary ops that also get an fp16 copy (``fam_<op>__fp16``)
FP16_OPS = ("relu", "sigmoid", "tanh", "gelu", "silu", "leaky_relu", "hardswish", "abs", "square")

_ALT_NOTE = '# "alt": a second shape for one more trial, so a kernel that hard-codes the tested shape fails.'


def _profiles_text(index: int) -> str:
    small = 200 + 37 * (index % 7)
    return f'{_ALT_NOTE}\nKZ_SIZES = {{\n    "small": {{"batch_size": 16, "dim": {small}}},\n    "alt": {{"batch_size": 32, "dim": 336}},\n}}\n'  # fmt: skip


def elementwise_problem(e: Elementwise, index: int) -> str:
    """The problem module of ``e``; ``index`` varies its small size profile across the family."""
    batch, dim = (16384, 8192) if len(e.inputs) == 1 else (8192, 8192)
    dtype = ", dtype=torch.float16" if e.fp16 else ""
    draws = [f"{e.input_scale}torch.randn(batch_size, dim{dtype})" for _ in e.inputs]
    inputs = f"[{draws[0]}]" if len(draws) == 1 else "[\n" + "".join(f"        {d},\n" for d in draws) + "    ]"
    consts = "".join(f"{name} = {value}\n" for name, value, _d in e.params)
    imports = "import torch\nimport torch.nn.functional as F\nfrom torch import nn\n" if e.functional else "import torch\nfrom torch import nn\n"  # fmt: skip
    what = "an fp16 2-D tensor" if e.fp16 else ("two large 2-D tensors" if len(e.inputs) > 1 else "a large 2-D tensor")
    return (
        f'"""{e.summary} over {what}."""\n\n{imports}\nbatch_size = {batch}\ndim = {dim}\n{consts}\n\n'
        f"class Model(nn.Module):\n{e.init_source}\n"
        f"    def forward(self, {', '.join(e.inputs)}):\n        return {e.torch_expr}\n\n\n"
        f"def get_inputs():\n    return {inputs}\n\n\n"
        f"def get_init_inputs():\n    return [{', '.join(name for name, _v, _d in e.params)}]\n\n\n"
        + _profiles_text(index)
    )


# op -> (title, the torch function, the input draw, a comment above the draw)
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


@attrs.frozen
class RowReduction:
    """A reduction (``op``: "sum", "mean" or "max") of a float32 2-D tensor over its last dim, keeping that dim
    (size 1) when ``keepdim``. ``name`` names the member (``row_sum_keepdim``), ``title`` the op (``Sum``);
    ``init_source`` is the argument-less ``__init__`` of ``Model`` and ``ModelNew``."""

    family: ClassVar[str] = ROW_REDUCTION_FAMILY

    op: str
    keepdim: bool

    @property
    def name(self) -> str:
        return f"row_{self.op}" + ("_keepdim" if self.keepdim else "")

    @property
    def title(self) -> str:
        return _REDUCE[self.op][0]

    @property
    def init_source(self) -> str:
        return init_source(())


REDUCTIONS = tuple(RowReduction(op, keep) for op in ("sum", "mean", "max") for keep in (False, True))


def reduction_problem(r: RowReduction, index: int) -> str:
    """The problem module of ``r``; ``index`` varies its small size profile across the family."""
    title, fn, draw, comment = _REDUCE[r.op]
    keep = ", keeping the reduced dimension" if r.keepdim else ""
    keep_arg = ", keepdim=True" if r.keepdim else ""
    return (
        f'"""{title} over the last dimension of a large 2-D tensor{keep}."""\n\n'
        "import torch\nfrom torch import nn\n\nbatch_size = 16384\ndim = 8192\n\n\n"
        f"class Model(nn.Module):\n{r.init_source}\n"
        f"    def forward(self, x):\n        return {fn}(x, dim=-1{keep_arg})\n\n\n"
        f"def get_inputs():\n{comment}    return [{draw}]\n\n\n"
        "def get_init_inputs():\n    return []\n\n\n" + _profiles_text(index)
    )


@attrs.frozen
class FamilyProblem:
    """One problem of the family: its name (``fam_<op>``, ``fam_<op>__fp16``, ``fam_row_<op>[_keepdim]``), its
    module source, the member a language writes a solution for, and its kind ("family" or "fp16")."""

    name: str
    source: str
    member: Elementwise | RowReduction
    kind: str


def family_problems() -> list[FamilyProblem]:
    """Every member of the family, each elementwise op followed by its fp16 copy (if it has one), then the
    row reductions."""
    out = []
    for i, e in enumerate(ELEMENTWISE):
        out.append(FamilyProblem(f"fam_{e.op}", elementwise_problem(e, i), e, "family"))
        if e.op in FP16_OPS:
            half = attrs.evolve(e, fp16=True)
            out.append(FamilyProblem(f"fam_{e.op}__fp16", elementwise_problem(half, i), half, "fp16"))
    for j, r in enumerate(REDUCTIONS):
        out.append(FamilyProblem(f"fam_{r.name}", reduction_problem(r, len(ELEMENTWISE) + j), r, "family"))
    return out


# ----------------------------------------------------------------------------------------------------
# chains: two elementwise ops applied one after the other, as the Proposer composes them
# ----------------------------------------------------------------------------------------------------

CHAIN_FAMILY = "elementwise_chain"

# unary ops that only chains use (the single-op family above is unchanged by them)
CHAIN_EXTRA: tuple[Elementwise, ...] = (
    Elementwise("relu6", "ReLU6", "F.relu6(x)", functional=True),
    Elementwise("neg", "Negation", "torch.neg(x)"),
    Elementwise("cos", "Cosine", "torch.cos(x)"),
    Elementwise("sin", "Sine", "torch.sin(x)"),
)
# every unary op without constructor scalars, less exp (a chain of it and square leaves float32's range)
CHAIN_OPS: dict[str, Elementwise] = {
    e.op: e for e in (*ELEMENTWISE, *CHAIN_EXTRA) if e.inputs == ("x",) and not e.params and e.op != "exp"
}


@attrs.frozen
class Chain:
    """Elementwise ops (names of `CHAIN_OPS`) applied in order to one float32 tensor: ``Abs -> ReLU6``. The
    single-op family teaches one op per kernel; a chain teaches fusing what a module computes in several
    statements into one kernel, which is how the Proposer's modules read."""

    family: ClassVar[str] = CHAIN_FAMILY

    ops: tuple[str, ...]

    @property
    def name(self) -> str:
        return "chain_" + "_".join(self.ops)

    @property
    def summary(self) -> str:
        return " -> ".join(CHAIN_OPS[op].summary for op in self.ops)

    @property
    def init_source(self) -> str:
        return init_source(())


def chain_problem(c: Chain, index: int) -> str:
    """The problem module of ``c``: a 3-D input, one statement per op; ``index`` varies its small profile."""
    members = [CHAIN_OPS[op] for op in c.ops]
    functional = any(e.functional for e in members)
    imports = "import torch\nimport torch.nn.functional as F\nfrom torch import nn\n" if functional else "import torch\nfrom torch import nn\n"  # fmt: skip
    steps = "".join(f"        x = {e.torch_expr}\n" for e in members)
    small = 40 + 8 * (index % 5)
    return (
        f'"""{c.summary}, one after the other over a 3-D tensor."""\n\n{imports}\n'
        "batch_size = 64\nseq_len = 256\ndim = 1024\n\n\n"
        f"class Model(nn.Module):\n{c.init_source}\n"
        f"    def forward(self, x):\n{steps}        return x\n\n\n"
        f"def get_inputs():\n    return [{members[0].input_scale}torch.randn(batch_size, seq_len, dim)]\n\n\n"
        "def get_init_inputs():\n    return []\n\n\n"
        f"{_ALT_NOTE}\nKZ_SIZES = {{\n"
        f'    "small": {{"batch_size": 2, "seq_len": 12, "dim": {small}}},\n'
        '    "alt": {"batch_size": 3, "seq_len": 10, "dim": 56},\n}\n'
    )


@attrs.frozen
class ChainProblem:
    """One chain problem: its name (``fam_chain_<op>_<op>``), its module source and the `Chain` it computes."""

    name: str
    source: str
    member: Chain
    kind: str = "chain"


def chain_problems(count: int, seed: int) -> list[ChainProblem]:
    """``count`` chains of two different ops (``fam_chain_<op>_<op>``), the same ones for the same seed, drawn
    from every ordered pair of `CHAIN_OPS`."""
    pairs = sorted((a, b) for a in CHAIN_OPS for b in CHAIN_OPS if a != b)
    random.Random(seed).shuffle(pairs)
    chains = [Chain(pair) for pair in pairs[:count]]
    return [ChainProblem(f"fam_{c.name}", chain_problem(c, i), c) for i, c in enumerate(chains)]

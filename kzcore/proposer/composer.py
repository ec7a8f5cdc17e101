"""A programmatic composer of verified Proposer modules: for every catalog API, KernelBench-format modules built
from op templates over shape families (the API alone, and chained with one or two other catalog APIs whose
shapes and input ranges fit), each kept only after the Proposer's own gates passed it (the AST gate for its API
set, a dedup key distinct from every module kept before, the runtime gates on a CPU at its small profile).
`kz compose` writes them as a problem JSONL: the Proposer's cold-start modules (``[proposer]
cold_start_modules``) and a task suite, so that the first Proposer phases see every API the sampler may draw.
"""

from __future__ import annotations

import difflib
import json
import random
import string
import tempfile
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs

from kzcore.jsonl import write_text_atomic
from kzcore.proposer.catalog import Catalog
from kzcore.proposer.gates import AST, DUPLICATE, CheckProblems, check_ast, dedup_key, runtime_gates
from kzcore.types import EvalConfig, Problem, ProblemCheckJob, ProblemReport

# family: (shape constants, shape expression, the dim-1 constant, the last-dim constant, size options as
# ((full sizes), (small sizes))). Reductions run along dim 1, at most 1024 wide at full size: the mean or norm of
# a much wider row of random numbers is ~constant, which the degeneracy gate would reject on the GPU.
FAMILIES = {
    "flat": (("N",), "N", None, "N", (((4096,), (64,)), ((2048,), (48,)), ((3072,), (32,)))),
    "vec": (("B", "D"), "B, D", "D", "D", (((16384, 1024), (16, 64)), ((8192, 512), (8, 32)), ((32768, 256), (24, 16)))),
    "seq": (("B", "L", "D"), "B, L, D", "L", "D", (((32, 512, 512), (2, 16, 32)), ((16, 1024, 256), (4, 8, 16)), ((64, 256, 384), (2, 12, 24)))),
    "sig": (("B", "C", "L"), "B, C, L", "C", "L", (((32, 64, 4096), (4, 8, 64)), ((64, 128, 1024), (2, 16, 32)), ((16, 32, 8192), (2, 4, 48)))),
    "img": (("B", "C", "H", "W"), "B, C, H, W", "C", "W", (((16, 64, 128, 128), (2, 8, 16, 16)), ((32, 32, 64, 64), (2, 4, 8, 8)), ((8, 128, 96, 96), (1, 16, 12, 12)))),
    "vol": (("B", "C", "T", "H", "W"), "B, C, T, H, W", "C", "W", (((4, 32, 32, 64, 64), (1, 4, 4, 8, 8)), ((2, 16, 16, 128, 128), (2, 4, 6, 6, 6)), ((8, 16, 32, 32, 32), (1, 8, 4, 6, 8)))),
    "heads": (("B", "NH", "L", "HD"), "B, NH, L, HD", "NH", "HD", (((8, 16, 1024, 64), (1, 2, 16, 8)), ((16, 8, 512, 128), (2, 2, 8, 16)), ((4, 32, 2048, 64), (1, 4, 12, 8)))),
    "cols": (("B", "C", "H", "W"), "B, C * 4, (H // 2) * (W // 2)", None, None, ()),  # Fold's input: 2x2 patches of an image
}  # fmt: skip
MAIN_ANY = ("vec", "seq", "sig", "img", "vol")  # where an op that takes any shape is placed on its own
ALL = (*MAIN_ANY, "flat", "heads", "cols")
RANKED = (*MAIN_ANY, "heads")
# what get_inputs draws for an op's input range; which output ranges satisfy each need
INPUTS = {
    "real": "torch.randn({S})", "small": "torch.randn({S})", "pos": "torch.rand({S}) + 0.5",
    "unit": "torch.rand({S}) * 0.9 + 0.05", "nonneg": "torch.rand({S})", "near1": "torch.rand({S}) * 0.2 + 0.9",
    "logp": "torch.randn({S}).log_softmax(-1)",
}  # fmt: skip
SATISFIES = {
    "real": {"real", "small", "unit", "pos", "nonneg", "logp"}, "small": {"small", "unit"}, "pos": {"pos", "unit"},
    "nonneg": {"pos", "unit", "nonneg"}, "unit": {"unit"}, "near1": set(), "logp": {"logp"},
}  # fmt: skip
SAME, OTHER, FINAL = "same", "other", "final"  # output shape: the input's, another, or nothing may follow


@attrs.frozen
class Op:
    """One catalog API as a forward step. ``fwd`` is an expression over ``{x}`` (the input), ``{m}`` (the
    module built by ``init``) and ``{y0}``, ``{y1}`` (the extra inputs ``extras`` draw); ``init`` and ``extras``
    name sizes as ``{B}``, ``{C}``, …, ``{ch}`` (dim 1), ``{last}`` (last dim) and ``{S}`` (the input's shape).
    ``need``/``give``: input and output ranges (INPUTS). ``sizes``: constant -> (full, small) overrides."""

    api: str
    fams: tuple[str, ...]
    fwd: str
    init: str = ""
    extras: tuple[str, ...] = ()
    out: str = SAME
    need: str = "real"
    give: str = "real"
    sizes: dict = attrs.field(factory=dict, hash=False)

    @property
    def filler(self) -> bool:
        """Shape-preserving and unary: may come before or after any op."""
        return self.fams == ALL and not self.extras and not self.init and self.out == SAME


def _u(api, fwd, give="real", need="real"):  # a unary elementwise op, any shape
    return Op(api, ALL, fwd, need=need, give=give)


_W = "torch.randn({last}, {last}) / {last} ** 0.5"  # a weight that keeps a product's scale
_R = ("torch.randn({S})",)
OPS = [
    Op("Conv1d", ("sig",), "{m}({x})", "nn.Conv1d({C}, {C}, 3, padding=1)"),
    Op("Conv2d", ("img",), "{m}({x})", "nn.Conv2d({C}, {C}, 3, padding=1)"),
    Op("Conv3d", ("vol",), "{m}({x})", "nn.Conv3d({C}, {C}, 3, padding=1)"),
    Op("ConvTranspose1d", ("sig",), "{m}({x})", "nn.ConvTranspose1d({C}, {C}, 3, padding=1)"),
    Op("ConvTranspose2d", ("img",), "{m}({x})", "nn.ConvTranspose2d({C}, {C}, 3, padding=1)"),
    Op("ConvTranspose3d", ("vol",), "{m}({x})", "nn.ConvTranspose3d({C}, {C}, 3, padding=1)"),
    Op("Unfold", ("img",), "F.unfold({x}, 3, padding=1)", out=OTHER),
    Op("Fold", ("cols",), "F.fold({x}, {m}, 2, stride=2)", "({H}, {W})", out=OTHER),
    Op("BatchNorm1d", ("vec", "sig"), "{m}({x})", "nn.BatchNorm1d({ch})", give="small"),
    Op("BatchNorm2d", ("img",), "{m}({x})", "nn.BatchNorm2d({ch})", give="small"),
    Op("BatchNorm3d", ("vol",), "{m}({x})", "nn.BatchNorm3d({ch})", give="small"),
    Op("LayerNorm", MAIN_ANY, "{m}({x})", "nn.LayerNorm({last})", give="small"),
    Op("GroupNorm", ("sig", "img", "vol"), "{m}({x})", "nn.GroupNorm(4, {ch})", give="small"),
    Op("InstanceNorm2d", ("img",), "F.instance_norm({x})", give="small"),
    Op("RMSNorm", MAIN_ANY, "{m}({x})", "nn.RMSNorm({last})", give="small"),
    Op("LocalResponseNorm", ("sig", "img"), "F.local_response_norm({x}, 5)"),
    _u("Normalize", "F.normalize({x}, dim=-1)", "small"), _u("ReLU", "torch.relu({x})", "nonneg"),
    _u("LeakyReLU", "F.leaky_relu({x}, 0.1)"),
    Op("PReLU", ("vec", "seq", "sig", "img", "vol"), "{m}({x})", "nn.PReLU({ch})"),
    _u("ReLU6", "F.relu6({x})", "nonneg"), _u("ELU", "F.elu({x})"),
    _u("SELU", "torch.selu({x})"), _u("CELU", "F.celu({x}, 0.5)"),
    _u("GELU", "F.gelu({x})"), _u("SiLU", "F.silu({x})"),
    _u("Mish", "F.mish({x})"), _u("Sigmoid", "torch.sigmoid({x})", "unit"),
    _u("Tanh", "torch.tanh({x})", "small"), _u("Softplus", "F.softplus({x})", "pos"),
    _u("Softsign", "F.softsign({x})", "small"), _u("Hardswish", "F.hardswish({x})"),
    _u("Hardsigmoid", "F.hardsigmoid({x})", "nonneg"), _u("Hardtanh", "F.hardtanh({x}, -2.0, 2.0)", "small"),
    Op("GLU", MAIN_ANY, "F.glu({x}, dim=-1)", out=OTHER),
    _u("Softmax", "torch.softmax({x}, dim=-1)", "unit"), _u("LogSoftmax", "torch.log_softmax({x}, dim=-1)", "logp"),
    Op("Linear", ("vec", "seq"), "{m}({x})", "nn.Linear({last}, {last})"),
    Op("Bilinear", ("vec",), "{m}({x}, {y0})", "nn.Bilinear({D}, {D}, {D})", _R, sizes={"B": (4096, 8), "D": (256, 16)}),
    Op("Matmul", ("vec", "seq"), "torch.matmul({x}, {y0})", extras=(_W,)),
    Op("Matmul", ("vec", "seq"), "{x} @ {y0}", extras=(_W,)),
    Op("MM", ("vec",), "torch.mm({x}, {y0})", extras=(_W,)),
    Op("BMM", ("seq",), "torch.bmm({x}, {y0})", extras=("torch.randn({B}, {D}, {D}) / {D} ** 0.5",)),
    Op("MV", ("vec",), "torch.mv({x}, {y0})", extras=("torch.randn({D})",), out=OTHER),
    Op("Addmm", ("vec",), "torch.addmm({y0}, {x}, {y1})", extras=("torch.randn({D})", _W)),
    Op("Baddbmm", ("seq",), "torch.baddbmm({y0}, {x}, {y1})", extras=(*_R, "torch.randn({B}, {D}, {D}) / {D} ** 0.5")),
    Op("Einsum", ("vec", "seq"), "torch.einsum('...d,de->...e', {x}, {y0})", extras=(_W,)),
    Op("Outer", ("flat",), "torch.outer({x}, {y0})", extras=("torch.randn({N})",), out=OTHER),
    *(Op(a, RANKED, f"torch.{f}({{x}}, dim=1)", out=OTHER) for a, f in (("Sum", "sum"), ("Mean", "mean"), ("Max", "amax"), ("Min", "amin"))),
    *(Op(a, RANKED, f"torch.{f}({{x}}, dim=1)", out=FINAL) for a, f in (("Argmax", "argmax"), ("Argmin", "argmin"))),
    Op("Prod", RANKED, "torch.prod({x}, dim=1)", out=OTHER, need="near1", give="pos"),
    Op("Cumsum", RANKED, "torch.cumsum({x}, dim=1)"),
    Op("Cumprod", RANKED, "torch.cumprod({x}, dim=1)", need="near1", give="pos"),
    Op("Logsumexp", RANKED, "torch.logsumexp({x}, dim=1)", out=OTHER),
    *(Op(a, RANKED, f"torch.{f}({{x}}, dim=1)", out=OTHER, give="pos") for a, f in (("Var", "var"), ("Std", "std"), ("Norm", "linalg.vector_norm"))),
    *(Op(f"MaxPool{d}d", (f,), f"F.max_pool{d}d({{x}}, 2)", out=OTHER) for d, f in ((1, "sig"), (2, "img"), (3, "vol"))),
    *(Op(f"AvgPool{d}d", (f,), f"F.avg_pool{d}d({{x}}, 2)", out=OTHER) for d, f in ((1, "sig"), (2, "img"), (3, "vol"))),
    Op("AdaptiveAvgPool1d", ("sig",), "F.adaptive_avg_pool1d({x}, 8)", out=OTHER),
    Op("AdaptiveAvgPool2d", ("img",), "F.adaptive_avg_pool2d({x}, 4)", out=OTHER),
    Op("AdaptiveMaxPool2d", ("img",), "F.adaptive_max_pool2d({x}, 4)", out=OTHER),
    Op("LPPool2d", ("img",), "F.lp_pool2d({x}, 2, 2)", out=OTHER),
    Op("Add", ALL, "{x} + {y0}", extras=_R),
    Op("Add", ALL, "torch.add({x}, {y0}, alpha=0.5)", extras=_R),
    Op("Sub", ALL, "{x} - {y0}", extras=_R), Op("Mul", ALL, "{x} * {y0}", extras=_R),
    Op("Div", ALL, "{x} / {y0}", extras=("torch.rand({S}) + 0.5",)),
    _u("Pow", "torch.pow({x}, 3)", need="small"), _u("Exp", "torch.exp({x})", "pos", "small"),
    _u("Log", "torch.log({x})", need="pos"), _u("Sqrt", "torch.sqrt({x})", "pos", "pos"),
    _u("Rsqrt", "torch.rsqrt({x})", "pos", "pos"), _u("Abs", "torch.abs({x})", "nonneg"),
    _u("Clamp", "torch.clamp({x}, -1.0, 1.0)", "small"),
    Op("Maximum", ALL, "torch.maximum({x}, {y0})", extras=_R), Op("Minimum", ALL, "torch.minimum({x}, {y0})", extras=_R),
    Op("Where", ALL, "torch.where({y0} > 0, {x}, {y1})", extras=_R * 2),
    _u("Sin", "torch.sin({x})", "small"), _u("Cos", "torch.cos({x})", "small"),
    _u("Reciprocal", "torch.reciprocal({x})", "pos", "pos"), _u("Erf", "torch.erf({x})", "small"),
    Op("Reshape", MAIN_ANY, "{x}.reshape({x}.shape[0], -1)", out=OTHER),
    Op("Permute", ("vec",), "{x}.permute(1, 0)", out=OTHER), Op("Permute", ("seq", "sig"), "{x}.permute(0, 2, 1)", out=OTHER),
    Op("Permute", ("img",), "{x}.permute(0, 2, 3, 1)", out=OTHER),
    Op("Transpose", MAIN_ANY, "torch.transpose({x}, 0, 1)", out=OTHER),
    Op("Flatten", ("seq", "sig", "img", "vol"), "torch.flatten({x}, 1)", out=OTHER),
    Op("Cat", MAIN_ANY, "torch.cat([{x}, {y0}], dim=1)", extras=_R, out=OTHER),
    Op("Stack", MAIN_ANY, "torch.stack([{x}, {y0}], dim=1)", extras=_R, out=OTHER),
    Op("Split", MAIN_ANY, "torch.chunk({x}, 2, dim=1)", out=FINAL),
    Op("Unsqueeze", MAIN_ANY, "{x}.unsqueeze(1)", out=OTHER),
    Op("Expand", MAIN_ANY, "{x}.repeat_interleave(2, dim=1)", out=OTHER),
    Op("Gather", RANKED, "torch.gather({x}, 1, {y0})", extras=("torch.randint(0, {ch}, ({S}))",)),
    Op("Pad", MAIN_ANY, "F.pad({x}, (1, 1))", out=OTHER),
    Op("PixelShuffle", ("img",), "F.pixel_shuffle({x}, 2)", out=OTHER),
    Op("Interpolate", ("sig", "img", "vol"), "F.interpolate({x}, scale_factor=2)", out=OTHER),
    Op("MSELoss", MAIN_ANY, "F.mse_loss({x}, {y0}, reduction='none')", extras=_R, give="nonneg"),
    Op("L1Loss", MAIN_ANY, "F.l1_loss({x}, {y0}, reduction='none')", extras=_R, give="nonneg"),
    Op("SmoothL1Loss", MAIN_ANY, "F.smooth_l1_loss({x}, {y0}, reduction='none')", extras=_R, give="nonneg"),
    Op("CrossEntropyLoss", ("vec",), "F.cross_entropy({x}, {y0}, reduction='none')", extras=("torch.randint(0, {D}, ({B},))",), out=OTHER),
    Op("NLLLoss", ("vec",), "F.nll_loss({x}, {y0}, reduction='none')", extras=("torch.randint(0, {D}, ({B},))",), out=OTHER, need="logp"),
    Op("BCELoss", MAIN_ANY, "F.binary_cross_entropy({x}, {y0}, reduction='none')", extras=("torch.rand({S})",), need="unit"),
    Op("BCEWithLogitsLoss", MAIN_ANY, "F.binary_cross_entropy_with_logits({x}, {y0}, reduction='none')", extras=("torch.rand({S})",)),
    Op("KLDivLoss", MAIN_ANY, "F.kl_div({x}, {y0}, reduction='none')", extras=("torch.rand({S})",), need="logp"),
    Op("CosineSimilarity", MAIN_ANY, "F.cosine_similarity({x}, {y0}, dim=1)", extras=_R, out=OTHER, give="small"),
    Op("TripletMarginLoss", ("vec",), "F.triplet_margin_loss({x}, {y0}, {y1}, reduction='none')", extras=_R * 2, out=OTHER),
    Op("HingeEmbeddingLoss", MAIN_ANY, "F.hinge_embedding_loss({x}, {y0}, reduction='none')", extras=("torch.randint(0, 2, ({S})) * 2 - 1",)),
    Op("ScaledDotProductAttention", ("heads",), "F.scaled_dot_product_attention({x}, {y0}, {y1})", extras=_R * 2),
    Op("ScaledDotProductAttention", ("heads",), "F.scaled_dot_product_attention({x}, {y0}, {y1}, is_causal=True)", extras=_R * 2),
    Op("MultiheadAttention", ("seq",), "{m}({x}, {x}, {x}, need_weights=False)[0]", "nn.MultiheadAttention({D}, 4, batch_first=True)"),
    Op("TransformerEncoderLayer", ("seq",), "{m}({x})", "nn.TransformerEncoderLayer({D}, 4, dim_feedforward=2 * {D}, dropout=0.0, batch_first=True)", give="small"),
    Op("MaskedFill", ALL, "{x}.masked_fill({y0} > 0, 0.0)", extras=_R),
    Op("CausalMask", RANKED, "torch.tril({x})"), Op("CausalMask", RANKED, "torch.triu({x}, diagonal=1)"),
]  # fmt: skip
NO_CHAIN = {"loss", "attention"}  # groups that only ever stand as the main op (a module has one loss)
CHECK_CONFIG = EvalConfig(device="cpu", size="small", trials=1)


def _fields(template: str) -> list[str]:
    return [f for _, f, _, _ in string.Formatter().parse(template) if f]


def render(chain: Sequence[Op], fam: str, option: int) -> str:
    """The module source for ``chain`` (applied in order) on family ``fam`` at size option ``option``."""
    consts, shape, ch, last, options = FAMILIES[fam]
    full, small = options[option] if options else FAMILIES["img"][4][option]
    sizes = {c: (f, s) for c, f, s in zip(consts, full, small)}
    for op in chain:
        sizes.update(op.sizes)
    alias = {"S": shape, "ch": ch, "last": last, **{c: c for c in sizes}}
    params: list[str] = []  # constants the constructor takes, in first use order
    inits, steps, inputs = [], [], [INPUTS[chain[0].need].format(S=shape)]
    for op in chain:
        names = {}
        for k, extra in enumerate(op.extras):
            names[f"y{k}"] = f"y{len(inputs) - 1}"
            inputs.append(extra.format(**alias))
        attr = f"self.{op.api.lower()}"
        if op.init:
            params += [c for c in dict.fromkeys(alias[f] for f in _fields(op.init)) if c not in params]
            inits.append(f"        {attr} = {op.init.format(**{k: str(v).lower() for k, v in alias.items()})}")
        steps.append(op.fwd.format(x="x", m=attr, **names))
    body = [f"        x = {s}" for s in steps[:-1]] + [f"        return {steps[-1]}"]
    args = "".join(f", {p.lower()}" for p in params)
    extras = "".join(f", y{k}" for k in range(len(inputs) - 1))
    small_profile = ", ".join(f'"{c}": {s}' for c, (_, s) in sizes.items())
    return "\n".join(
        ["import torch", "import torch.nn as nn", "import torch.nn.functional as F", ""]
        + [f"{c} = {f}" for c, (f, _) in sizes.items()]
        + [f'KZ_SIZES = {{"small": {{{small_profile}}}}}', "", "", "class Model(nn.Module):"]
        + [f'    """{" -> ".join(op.api for op in chain)}."""', "", f"    def __init__(self{args}):"]
        + ["        super().__init__()", *inits, "", f"    def forward(self, x{extras}):", *body, "", ""]
        + ["def get_inputs():", f"    return [{', '.join(inputs)}]", "", ""]
        + ["def get_init_inputs():", f"    return [{', '.join(params)}]", ""]
    )


def _neighbours(chain: list[Op], fam: str, catalog: Catalog, ops: Sequence[Op]) -> list[tuple[str, Op]]:
    """("pre", op) and ("post", op) for each op that may extend ``chain`` on family ``fam``: not yet in it, not
    a loss or attention op, fitting the shape and range of what it reads."""
    used = {op.api for op in chain}
    free = [o for o in ops if o.api not in used and o.api in catalog.names and catalog.get(o.api).group not in NO_CHAIN]
    same = all(op.out == SAME for op in chain)  # the output still has the family's shape
    posts = [o for o in free if (o.filler or (same and fam in o.fams)) and chain[-1].give in SATISFIES[o.need]]
    pres = [o for o in free if o.out == SAME and fam in o.fams and o.give in SATISFIES[chain[0].need]]
    return [("post", op) for op in posts if chain[-1].out != FINAL] + [("pre", op) for op in pres]


@attrs.frozen
class Composed:
    """A verified module: ``apis`` are the catalog APIs its code uses (the AST gate's finding), ``chain`` the
    APIs it was composed from, in forward order."""

    name: str
    apis: tuple[str, ...]
    chain: tuple[str, ...]
    level: int
    code: str
    dedup_key: str

    def to_json(self) -> dict:
        """A problem JSONL row (``load_problems`` reads ``name``, ``level``, ``code``)."""
        return {"name": self.name, "level": self.level, "code": self.code, "apis": list(self.apis),
                "chain": list(self.chain), "dedup_key": self.dedup_key}  # fmt: skip

    def to_problem(self) -> Problem:
        return Problem(name=self.name, source=self.code, level=self.level, suite="composed")


@attrs.frozen
class Composition:
    """``failures``: gate -> candidates dropped at it (every candidate is a retry of a module slot);
    ``missing``: module slots left empty after every attempt; ``decontaminated``: modules dropped as near
    duplicates of held-out problems (None: no decontamination available)."""

    modules: tuple[Composed, ...]
    candidates: int
    failures: dict[str, int]
    missing: int
    decontaminated: int | None = None

    def write(self, path: Path) -> None:
        """The modules as a problem JSONL (`load_problems` reads it), written atomically."""
        write_text_atomic(path, "".join(json.dumps(m.to_json()) + "\n" for m in self.modules))

    def coverage(self, catalog: Catalog) -> dict[str, int]:
        """Catalog API -> verified modules that use it, in catalog order (0 for an API none uses)."""
        counts = Counter(api for m in self.modules for api in m.apis)
        return {name: counts[name] for name in catalog.names}

    def coverage_table(self, catalog: Catalog) -> dict:
        per_api = self.coverage(catalog)
        return {
            "catalog_apis": len(per_api), "covered": sum(1 for n in per_api.values() if n), "modules": len(self.modules),
            "candidates": self.candidates, "failures": self.failures, "missing": self.missing,
            "decontaminated": self.decontaminated, "per_api": per_api,
            "uncovered": [name for name, n in per_api.items() if not n],
        }  # fmt: skip


def check_in_process(problems: list[Problem], config: EvalConfig | None = None) -> list[ProblemReport]:
    """The evaluator worker's problem check, run in this process on the CPU (at the small profile unless
    ``config`` says otherwise). The composer's modules are its own templated code, so they need no sandbox."""
    from kzcore.evaluate.problem_check import PROPOSER_BUDGET, check_problem_job

    config = config or CHECK_CONFIG
    with tempfile.TemporaryDirectory(prefix="kz-compose-") as tmp:
        jobs = [ProblemCheckJob(p, config, max_bytes=PROPOSER_BUDGET) for p in problems]
        return [check_problem_job(job, Path(tmp), "cpu")[0] for job in jobs]


def compose(
    catalog: Catalog,
    per_api: int = 3,
    seed: int = 0,
    apis: Sequence[str] | None = None,
    check_problems: CheckProblems = check_in_process,
    config: EvalConfig | None = None,
    heldout: Sequence[Problem] = (),
    attempts: int = 8,
    ops: Sequence[Op] = OPS,
) -> Composition:
    """Up to ``per_api`` verified modules for each API of ``apis`` (default: the whole catalog): module ``i``
    of an API chains ``min(i, 2)`` other APIs to it (one more after each candidate dropped as a near duplicate
    of a ``heldout`` problem); a candidate that fails a gate is dropped, counted, and the slot tried again with
    other partners, family and sizes, ``attempts`` times in all. Deterministic for a ``seed`` (each API draws
    from its own seeded RNG, so a subset composes the same modules)."""
    by_api: dict[str, list[Op]] = {}
    for op in ops:
        by_api.setdefault(op.api, []).append(op)
    names = list(apis) if apis is not None else catalog.names
    near = heldout_filter(heldout) if heldout else None
    modules: list[Composed] = []
    seen: set[str] = set()
    failures: Counter = Counter()
    candidates = missing = 0
    for api in names:
        catalog.get(api)  # an unknown name fails here, with the catalog's message
        rng = random.Random(f"{seed}:{api}")
        templates = by_api.get(api, [])
        missing += per_api if not templates else 0
        for i in range(per_api if templates else 0):
            flagged = 0
            for attempt in range(attempts):
                main = templates[(i + attempt) % len(templates)]
                fam = rng.choice(MAIN_ANY if main.fams == ALL else main.fams)
                chain = [main]
                for _ in range(min(i + flagged, 2)):
                    options = _neighbours(chain, fam, catalog, ops)
                    if options:
                        where, op = rng.choice(options)
                        chain = [*chain, op] if where == "post" else [op, *chain]
                candidates += 1
                code = render(chain, fam, rng.randrange(3))
                made = _verify(code, [op.api for op in chain], catalog, seen, check_problems, config, near)
                if isinstance(made, str):
                    failures[made] += 1
                    flagged += made == DECONTAM
                    continue
                used, key = made
                chained = tuple(op.api for op in chain)
                modules.append(Composed(f"composed_{api}_{i}", used, chained, catalog.level_hint(used), code, key))
                break
            else:
                missing += 1
    dropped = failures.get(DECONTAM, 0) if near else None
    return Composition(tuple(modules), candidates, dict(failures), missing, dropped)


def _verify(code, requested, catalog, seen, check_problems, config, near) -> tuple[tuple[str, ...], str] | str:
    """(APIs used, dedup key) of a module that passes every gate (its key joins ``seen``), else the gate it
    failed first; DECONTAM when ``near`` finds it a near duplicate of a held-out problem."""
    check = check_ast(code, requested, catalog)
    if not check.ok:
        return AST
    key = dedup_key(code, check.apis_used)
    if key in seen:
        return DUPLICATE
    problem = Problem(name="composed_candidate", source=code, level=1, suite="composed")
    if near is not None and near(problem):
        return DECONTAM
    (report,) = check_problems([problem], config)
    failed = next((gate for gate, result in runtime_gates(report).items() if not result.ok), None)
    if failed:
        return failed
    seen.add(key)
    return check.apis_used, key


DECONTAM = "decontam"  # the failure of a candidate that near-duplicates a held-out problem
DECONTAM_SPECS = ("kernelbench:1", "kernelbench:2")  # the held-out problems `kz compose` keeps clear of


def heldout_filter(heldout: Sequence[Problem]) -> Callable[[Problem], str]:
    """kzcore.decontam's near-duplicate rule against ``heldout`` (their fingerprints made once): the label of
    the first held-out problem a module near-duplicates, or "". ``quick_ratio`` bounds the similarity from
    above, so most pairs skip the exact ratio."""
    from kzcore import decontam

    prints = [(decontam.label(h), decontam.fingerprint(h)) for h in heldout]

    def near(problem: Problem) -> str:
        fp = decontam.fingerprint(problem)
        for name, held in prints:
            same = bool(held.ops) and held.ops == fp.ops
            bound = difflib.SequenceMatcher(None, fp.tokens, held.tokens, autojunk=False).quick_ratio()
            if decontam.near_duplicate(bound, same) and decontam.near_duplicate(
                decontam.similarity(fp.tokens, held.tokens), same
            ):
                return name
        return ""

    return near

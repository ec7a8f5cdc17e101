"""More cold-start data: variant problems with candidate solutions that distillation verifies like any other
teacher output (kzcore/train/distill.py evaluates them; only correct ones become SFT rows).

Three sources:

- **Size variants** of a suite problem that ships a reference solution in the language: smaller copies of
  the problem (kzcore/train/resize.py says which constants shrink and how). The solution is the reference
  solution unchanged: reference solutions are shape-generic, and a variant whose solution fails verification
  is simply not kept.
- **An op family** (kzcore/train/family.py): elementwise activations, a few binary/fused elementwise ops,
  fp16 copies of some unary ones and row reductions over the last dim, each a KernelBench-format problem.
  Each registered language writes its own solution to a member (`Language.variant_solution`) or has none:
  kz_triton writes Triton for every member, kz_cuda NVRTC-dialect CUDA for the float32 ones.
- **Chains** (`chain_variants`, ``[distill] chains``): two elementwise ops one after the other on a 3-D
  input, the shape the Proposer's modules take, solved by one fused kernel. Drawn apart from the variants
  above, so asking for chains leaves which variants a seed chooses unchanged.

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

import random
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs

from kzcore.errors import ProblemFormatError
from kzcore.train.family import ELEMENTWISE, chain_problems, family_problems
from kzcore.train.resize import resize_source, smaller_sizes
from kzcore.types import Candidate, Problem

if TYPE_CHECKING:
    from kzcore.language import Language

__all__ = [  # ELEMENTWISE (the family's elementwise ops) is kept importable from here, where tests look for it
    "ELEMENTWISE",
    "NAME_OPS",
    "Variant",
    "chain_variants",
    "choose",
    "exclude_heldout",
    "family_variants",
    "generate",
    "ops_named",
    "reference_sources",
    "single_op",
    "size_variants",
]


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


def size_variants(problem: Problem, solutions: dict[str, str]) -> list[Variant]:
    """Up to four smaller copies of ``problem`` (names ``NAME__v1`` ...), each with ``solutions``."""
    if not solutions:
        return []
    op = single_op(problem.name, problem.level)
    out = []
    for i, new in enumerate(smaller_sizes(problem.source), start=1):
        source = resize_source(problem.source, new)
        out.append(
            Variant(
                problem=Problem(
                    name=f"{problem.name}__v{i}", source=source, level=problem.level, path=None, suite="variants"
                ),
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
# the op family, and both together
# ----------------------------------------------------------------------------------------------------


def family_variants(languages: Sequence[Language]) -> list[Variant]:
    """The members of the op family (kzcore/train/family.py) that at least one of ``languages`` writes a
    solution for (`Language.variant_solution`), with those solutions."""
    return [v for fam in family_problems() if (v := _solved(fam, languages, fam.member.op, fam.member.op))]


def chain_variants(languages: list[str], count: int, seed: int, pm=None) -> list[Variant]:
    """``count`` chains of two elementwise ops (kzcore/train/family.py's `chain_problems`, drawn by ``seed``),
    each with the solutions of the ``languages`` that ``pm`` registers and that write one (kind "chain"; a chain
    computes no single op, so only its own name can be held out)."""
    if not count:  # nothing asked for: no plugin lookup
        return []
    writers = _writers(languages, pm)
    return [v for fam in chain_problems(count, seed) if (v := _solved(fam, writers, fam.member.name, ""))]


def _solved(fam, languages: Sequence[Language], origin: str, op: str) -> Variant | None:
    """The generated problem ``fam`` with the solutions ``languages`` write for its member; None when none
    writes one."""
    solutions = {lang.name: s for lang in languages if (s := lang.variant_solution(fam.member)) is not None}
    if not solutions:
        return None
    problem = Problem(name=fam.name, source=fam.source, level=1, path=None, suite="variants")
    return Variant(problem, solutions, origin, fam.kind, op)


def _writers(languages: list[str], pm) -> list[Language]:
    """The registered `Language`s among the names ``languages`` (those ``pm`` does not register write none)."""
    from kzcore.plugins import languages as registered

    known = registered(pm).items
    return [known[name] for name in languages if name in known]


def generate(problems: list[Problem], languages: list[str], suite: str = "builtin", pm=None) -> list[Variant]:
    """Size variants of ``problems`` that ``suite`` ships reference solutions for (in any of ``languages``),
    then the op family; solutions only for ``languages``, and family solutions only from the ones ``pm``
    registers."""
    refs = {lang: reference_sources(problems, lang, suite, pm=pm) for lang in languages}
    out = []
    for p in problems:
        solutions = {lang: refs[lang][p.name] for lang in languages if p.name in refs[lang]}
        out += size_variants(p, solutions)
    return out + family_variants(_writers(languages, pm))

"""Decontamination: which held-out problems (KernelBench levels 1 and 2, in practice) have a near-duplicate
among the training problems (the built-in suite, cold-start and distillation problems, size and family
variants, Proposer modules), by one fixed rule. The held-out set splits into "clean" (no near-duplicate) and
"contaminated"; scores on the clean subset are the ones no training problem could have taught by copy.

The rule compares every training problem's reference source with every held-out problem's:

1. **Normalised tokens** (`normalized_tokens`). The source is parsed; docstrings (any bare string statement),
   imports, annotations and the ``KZ_SIZES`` table (evaluator metadata) are removed; top-level assignments
   (the size constants) are moved before the definitions; ``super(Model, self)`` becomes ``super()``; in
   ``get_inputs``/``get_init_inputs`` a local assigned once and read once is inlined (``x = torch.rand(n);
   return [x]`` is ``return [torch.rand(n)]``). The suites differ in exactly these ways of writing the same
   problem. The tree is unparsed (no comments, one layout) and cut into tokens with `tokenize`; layout tokens
   (NEWLINE, INDENT, ...) are dropped; every number becomes ``NUM`` and every string ``STR``; a dotted name
   rooted at torch (``torch.sigmoid``, ``F.relu``, ``nn.Conv2d``, whatever the import alias) becomes one
   token, spelled ``torch.*``, ``F.*`` or ``nn.*``; an attribute that is a ``torch.Tensor`` or ``nn.Module``
   member (``.view``, ``.sum``), a keyword and a called builtin (``super(``, ``range(``) keep their names;
   every other identifier becomes ``ID``. Renaming, resizing, comments and docstrings change nothing.
2. **Similarity** = ``difflib.SequenceMatcher(None, train, heldout, autojunk=False).ratio()`` of the two token
   lists: 2·M / (|a| + |b|), M the tokens in matching blocks. Chosen over Jaccard of token n-grams because it
   respects order and multiplicity and needs no choice of n: one changed token in a module of n tokens costs
   about 1/n whatever the token, where an n-gram set forgets a repeated line and charges an edit by how many
   n-grams it touches. ``autojunk`` is off: ``ID``, ``(`` and ``)`` are frequent by construction.
3. **Op set** (`torch_ops`), from the AST of the module's classes and helper functions (``get_inputs`` and
   ``get_init_inputs`` make inputs, they are not the computation): every call of a torch-rooted name
   (``torch.*``, ``F.*``, ``nn.*`` module classes), every call of a ``torch.Tensor`` method on anything but
   ``self`` (``x.sum(...)``) and every arithmetic operator, outside ``__init__``; inside it, only the
   ``nn`` classes it builds (``nn.Conv2d``, ``nn.Parameter``; not initial values such as ``torch.randn``
   or ``nn.init.uniform_``). Each op is named by `op_name`, so ``torch.relu``, ``F.relu``, ``nn.ReLU`` and
   ``x.relu()`` are one op, ``nn.CrossEntropyLoss`` is ``F.cross_entropy`` and ``a @ b`` is
   ``torch.matmul(a, b)``.

A pair is a **near-duplicate** when ``similarity >= SIMILARITY`` (the same module up to about three tokens
in 60, the length of a one-line activation module: ``torch.sigmoid(x)`` in place of ``torch.relu(x)``), or when the op sets are equal and not empty and
``similarity >= SAME_OPS_SIMILARITY`` (the same computation, written with other arguments or shapes: a
conv's padding, a transposed operand). docs/decontamination.md shows where the built-in suite's pairs with
KernelBench levels 1 and 2 fall, which the two constants were chosen from, and what the rule misses.

Steps 1 to 3 (a problem's fingerprint, and the similarity of two) are kzcore/fingerprints.py; here are the rule
that reads them, the comparison of two problem sets, the training sources beyond problem specs and the report.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path

import attrs

from kzcore.fingerprints import (
    DecontamError,
    Fingerprint,
    fingerprint,
    label,
    normalized_tokens,
    op_name,
    similarity,
    torch_ops,
)
from kzcore.types import Problem

# the fingerprints (kzcore/fingerprints.py) are importable from here, beside the rule that reads them
__all__ = [
    "POOL_PREFIX",
    "SAME_OPS_SIMILARITY",
    "SIMILARITY",
    "VARIANTS",
    "WORST_PAIRS",
    "DecontamError",
    "Fingerprint",
    "Pair",
    "Report",
    "decontaminate",
    "fingerprint",
    "format_report",
    "label",
    "load_training",
    "near_duplicate",
    "normalized_tokens",
    "op_name",
    "rule_json",
    "similarity",
    "torch_ops",
]

# A pair at or above this similarity is a near-duplicate whatever its ops.
SIMILARITY = 0.95
# A pair whose op sets are equal (and not empty) is a near-duplicate at or above this similarity.
SAME_OPS_SIMILARITY = 0.75
# How many of the most similar pairs `kz decontam` prints.
WORST_PAIRS = 15


# ----------------------------------------------------------------------------------------------------
# the rule, and comparing two sets
# ----------------------------------------------------------------------------------------------------


def near_duplicate(sim: float, same_ops: bool) -> bool:
    """The rule (module doc): similar enough, or the same op set and similar enough for that."""
    return sim >= SIMILARITY or (same_ops and sim >= SAME_OPS_SIMILARITY)


@attrs.frozen
class Pair:
    """A training problem compared with a held-out one."""

    heldout: Problem
    train: Problem
    similarity: float
    same_ops: bool

    @property
    def near_duplicate(self) -> bool:
        return near_duplicate(self.similarity, self.same_ops)

    @property
    def rule(self) -> str:
        """Which clause flags it: "similarity", "same-ops", or "" (not a near-duplicate)."""
        if self.similarity >= SIMILARITY:
            return "similarity"
        return "same-ops" if self.near_duplicate else ""

    def to_json(self) -> dict:
        return {
            "heldout": label(self.heldout),
            "train": label(self.train),
            "similarity": round(self.similarity, 4),
            "same_ops": self.same_ops,
            "near_duplicate": self.near_duplicate,
            "rule": self.rule,
        }


@attrs.frozen
class Report:
    """Every held-out problem, its near-duplicates among the training problems and its nearest one."""

    heldout: tuple[Problem, ...]
    train_count: int
    pairs: tuple[Pair, ...]  # every near-duplicate pair, most similar first
    nearest: tuple[Pair | None, ...]  # per held-out problem (same order): its most similar training problem

    @property
    def contaminated(self) -> list[Problem]:
        flagged = {label(p.heldout) for p in self.pairs}
        return [p for p in self.heldout if label(p) in flagged]

    @property
    def clean(self) -> list[Problem]:
        flagged = {label(p.heldout) for p in self.pairs}
        return [p for p in self.heldout if label(p) not in flagged]

    @property
    def near_train(self) -> list[Problem]:
        """The training problems that near-duplicate at least one held-out problem, each once."""
        seen: dict[str, Problem] = {}
        for pair in self.pairs:
            seen.setdefault(label(pair.train), pair.train)
        return list(seen.values())

    def counts(self) -> dict[str, int]:
        return {
            "heldout": len(self.heldout),
            "contaminated": len(self.contaminated),
            "clean": len(self.clean),
            "train": self.train_count,
            "near_duplicate_pairs": len(self.pairs),
            "near_duplicate_train": len(self.near_train),
        }

    def to_json(self) -> dict:
        by_heldout: dict[str, list[dict]] = {}
        for pair in self.pairs:
            by_heldout.setdefault(label(pair.heldout), []).append(pair.to_json())
        nearest = {label(h): n for h, n in zip(self.heldout, self.nearest)}
        return {
            "counts": self.counts(),
            "rule": rule_json(),
            # every near-duplicate pair of each contaminated problem, most similar first
            "contaminated": {label(p): by_heldout[label(p)] for p in self.contaminated},
            # each clean problem's most similar training problem: how far it is from being flagged
            "clean": {label(p): (n.to_json() if (n := nearest[label(p)]) else None) for p in self.clean},
        }


def rule_json() -> dict:
    """The rule's constants, for reports: a report says which rule made it."""
    return {
        "similarity": SIMILARITY,
        "same_ops_similarity": SAME_OPS_SIMILARITY,
        "measure": "difflib.SequenceMatcher ratio of normalised tokens (autojunk off)",
        "near_duplicate": "similarity >= similarity, or equal non-empty op sets and similarity >= same_ops_similarity",
    }


def decontaminate(train: Iterable[Problem], heldout: Iterable[Problem]) -> Report:
    """Compare every training problem with every held-out problem by the rule (module doc).

    Training problems with the same normalised tokens and op set (a size variant and its origin, one problem
    loaded from two sources) are compared once. ``quick_ratio`` bounds the exact ratio from above, so pairs
    that can be neither flagged nor the nearest are skipped."""
    train, heldout = list(train), list(heldout)
    groups: dict[Fingerprint, list[Problem]] = {}
    for p in train:
        groups.setdefault(fingerprint(p), []).append(p)
    unique = list(groups.items())
    pairs: list[Pair] = []
    nearest: list[Pair | None] = []
    matcher = difflib.SequenceMatcher(None, autojunk=False)
    for h in heldout:
        fp = fingerprint(h)
        matcher.set_seq2(fp.tokens)
        bounds = []
        for index, (tfp, _) in enumerate(unique):
            matcher.set_seq1(tfp.tokens)
            bounds.append((matcher.quick_ratio(), index))
        bounds.sort(key=lambda b: (-b[0], b[1]))
        best: Pair | None = None
        for bound, index in bounds:
            if bound < SAME_OPS_SIMILARITY and best is not None and bound <= best.similarity:
                break
            tfp, problems = unique[index]
            matcher.set_seq1(tfp.tokens)
            sim = matcher.ratio()
            same_ops = bool(fp.ops) and tfp.ops == fp.ops
            found = [Pair(h, p, sim, same_ops) for p in problems]
            if best is None or sim > best.similarity:
                best = found[0]
            pairs += [pair for pair in found if pair.near_duplicate]
        nearest.append(best)
    pairs.sort(key=lambda p: (-p.similarity, label(p.heldout), label(p.train)))
    return Report(tuple(heldout), len(train), tuple(pairs), tuple(nearest))


# ----------------------------------------------------------------------------------------------------
# training sources beyond problem specs
# ----------------------------------------------------------------------------------------------------

POOL_PREFIX = "pool:"  # pool:PATH: a task pool's accepted modules (kz propose, RUN/pool.jsonl)
VARIANTS = "variants"  # variants[:SUITE]: the generated size and family variants (kzcore/train/variants.py)


def load_training(spec: str, pm=None, kernelbench: str | None = None, load=None) -> list[Problem]:
    """Training problems for a spec: ``pool:PATH`` (a task pool's accepted modules), ``variants[:SUITE]``
    (every size variant of SUITE's problems with a reference solution in a registered language, default
    ``builtin``, and every op-family member a registered language has a solution for), else what ``load(spec, kernelbench)`` returns (default
    `kzcore.problems.load_problems`: a suite, a path, a ``.jsonl`` such as the cold start's
    ``phases/00-distill/problems.jsonl``, ``kernelbench[:levels]``)."""
    from kzcore.problems import load_problems

    if load is None:

        def load(spec: str, kernelbench: str | None) -> list[Problem]:
            return load_problems(spec, pm=pm, kernelbench=kernelbench)

    if spec.startswith(POOL_PREFIX) and not Path(spec).exists():
        from kzcore.proposer.pool import read_pool

        path = Path(spec[len(POOL_PREFIX) :])
        if not path.is_file():
            raise DecontamError(f"{spec!r}: no such task pool file")
        try:
            return [r.to_problem() for r in read_pool(path) if r.accepted]
        except (OSError, UnicodeDecodeError) as exc:
            raise DecontamError(f"{path}: cannot read it ({exc})") from None
    name, _, suite = spec.partition(":")
    if name == VARIANTS and not Path(spec).exists():
        from kzcore.plugins import languages
        from kzcore.train import variants

        suite = suite or "builtin"
        problems = load(suite, kernelbench)
        every = list(languages(pm).items)
        return [v.problem for v in variants.generate(problems, every, suite=suite, pm=pm)]
    return load(spec, kernelbench)


# ----------------------------------------------------------------------------------------------------
# text for a terminal
# ----------------------------------------------------------------------------------------------------


def format_report(report: Report, worst: int = WORST_PAIRS) -> list[str]:
    """Counts, the rule, and the ``worst`` most similar near-duplicate pairs."""
    c = report.counts()
    lines = [
        f"held-out problems: {c['heldout']}, contaminated: {c['contaminated']}, clean: {c['clean']}",
        f"training problems: {c['train']} ({c['near_duplicate_train']} near-duplicate a held-out problem; "
        f"{c['near_duplicate_pairs']} pairs)",
        f"rule: similarity >= {SIMILARITY}, or the same op set and similarity >= {SAME_OPS_SIMILARITY}",
    ]
    if report.pairs and worst > 0:
        shown = report.pairs[:worst]
        lines.append(f"most similar near-duplicate pairs ({len(shown)} of {len(report.pairs)}):")
        width = max(len(label(p.heldout)) for p in shown)
        for p in shown:
            lines.append(
                f"  {p.similarity:.3f}  {label(p.heldout):<{width}}  ~  {label(p.train)}"
                + ("  (same ops)" if p.same_ops else "")
            )
    return lines

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
"""

from __future__ import annotations

import ast
import builtins
import difflib
import functools
import io
import keyword
import tokenize
from collections.abc import Iterable, Sequence
from pathlib import Path

import attrs

from kzcore.errors import KzError
from kzcore.types import Problem

# A pair at or above this similarity is a near-duplicate whatever its ops.
SIMILARITY = 0.95
# A pair whose op sets are equal (and not empty) is a near-duplicate at or above this similarity.
SAME_OPS_SIMILARITY = 0.75
# How many of the most similar pairs `kz decontam` prints.
WORST_PAIRS = 15

ID, NUM, STR = "ID", "NUM", "STR"
_INPUT_FUNCTIONS = ("get_inputs", "get_init_inputs")
_LAYOUT = {tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.COMMENT}
_LAYOUT |= {tokenize.ENCODING, tokenize.ENDMARKER}
_FSTRING_START = getattr(tokenize, "FSTRING_START", None)  # Python >= 3.12 cuts f-strings into parts
_FSTRING_END = getattr(tokenize, "FSTRING_END", None)
# an operator is the op it calls: ``a @ b`` is ``matmul`` like ``torch.matmul(a, b)``
_BINOPS = {
    ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.FloorDiv: "floordivide",
    ast.Mod: "remainder", ast.Pow: "pow", ast.MatMult: "matmul",
}  # fmt: skip


class DecontamError(KzError):
    pass


# ----------------------------------------------------------------------------------------------------
# fingerprints: normalised tokens and op set
# ----------------------------------------------------------------------------------------------------


@functools.cache
def _library_attrs() -> frozenset[str]:
    """Attribute names that are torch API (tensor methods, nn.Module members): kept by name in the tokens."""
    import torch

    return frozenset(dir(torch.Tensor)) | frozenset(dir(torch.nn.Module))


@functools.cache
def _tensor_methods() -> frozenset[str]:
    import torch

    return frozenset(n for n in dir(torch.Tensor) if not n.startswith("_"))


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Local name → dotted path, for the names the module's imports bind under ``torch``."""
    from kzcore.proposer.gates import import_aliases

    return {name: path for name, path in import_aliases(tree).items() if path.split(".")[0] == "torch"}


def _canonical(path: str) -> str:
    """One spelling per torch name: ``torch.nn.functional.relu`` → ``F.relu``, ``torch.nn.Linear`` → ``nn.Linear``."""
    for long, short in (("torch.nn.functional.", "F."), ("torch.nn.", "nn.")):
        if path.startswith(long):
            return short + path[len(long) :]
    return path


class _Strip(ast.NodeTransformer):
    """Removes docstrings (any statement that is a bare string), imports and annotations."""

    def visit_Expr(self, node):
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return None
        return self.generic_visit(node)

    def visit_Import(self, node):
        return None

    visit_ImportFrom = visit_Import

    def visit_FunctionDef(self, node):
        node.returns = None
        if node.name in _INPUT_FUNCTIONS:
            _inline_temporaries(node)
        self.generic_visit(node)
        if not node.body:
            node.body = [ast.Pass()]
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        self.generic_visit(node)
        if not node.body:
            node.body = [ast.Pass()]
        return node

    def visit_Call(self, node):
        # super(Model, self).__init__() is super().__init__() in a method: one spelling
        if isinstance(node.func, ast.Name) and node.func.id == "super":
            node.args, node.keywords = [], []
        return self.generic_visit(node)

    def visit_arg(self, node):
        node.annotation = None
        return node

    def visit_AnnAssign(self, node):
        if node.value is None:
            return None
        return self.generic_visit(ast.Assign(targets=[node.target], value=node.value, lineno=node.lineno))


def _is_sizes_table(node: ast.stmt) -> bool:
    return isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "KZ_SIZES" for t in node.targets)


class _Replace(ast.NodeTransformer):
    """Puts ``value`` where the Name node ``target`` is."""

    def __init__(self, target: ast.Name, value: ast.expr):
        self.target, self.value = target, value

    def visit_Name(self, node):
        return self.value if node is self.target else node


def _inline_temporaries(func: ast.FunctionDef) -> None:
    """In an input generator, ``x = torch.rand(n); return [x]`` becomes ``return [torch.rand(n)]``: a local
    assigned once and read once is written where it is read (the suites differ in this style only)."""
    changed = True
    while changed:
        changed = False
        for index, stmt in enumerate(func.body):
            if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
                continue
            name = stmt.targets[0].id
            rest = func.body[index + 1 :]
            uses = [n for s in rest for n in ast.walk(s) if isinstance(n, ast.Name) and n.id == name]
            if len(uses) != 1 or not isinstance(uses[0].ctx, ast.Load):
                continue
            put = _Replace(uses[0], stmt.value)
            func.body = func.body[:index] + [put.visit(s) for s in rest]
            changed = True
            break


def _parse(source: str, where: str) -> ast.Module:
    try:
        return ast.parse(source)
    except SyntaxError as exc:
        raise DecontamError(f"{where}: not valid Python (line {exc.lineno}: {exc.msg})") from None


def normalized_tokens(source: str, where: str = "source") -> tuple[str, ...]:
    """The token list the similarity compares (module doc, step 1)."""
    tree = _parse(source, where)
    aliases = _aliases(tree)
    aliases.setdefault("torch", "torch")
    body = [node for node in tree.body if not _is_sizes_table(node)]
    assigns = [n for n in body if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign))]
    tree.body = assigns + [n for n in body if not isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign))]
    tree = ast.fix_missing_locations(_Strip().visit(tree))
    text = ast.unparse(tree)
    raw = [t for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type not in _LAYOUT]
    keep = _library_attrs()
    out: list[str] = []
    i = 0
    while i < len(raw):
        tok = raw[i]
        after_dot = i > 0 and raw[i - 1].type == tokenize.OP and raw[i - 1].string == "."
        if tok.type == _FSTRING_START:
            depth = 0
            while i < len(raw):
                depth += (raw[i].type == _FSTRING_START) - (raw[i].type == _FSTRING_END)
                i += 1
                if depth == 0:
                    break
            out.append(STR)
            continue
        if tok.type == tokenize.NAME:
            name = tok.string
            if after_dot:
                out.append(name if name in keep else ID)
            elif keyword.iskeyword(name):
                out.append(name)
            elif name in aliases:
                path = aliases[name]
                while i + 2 < len(raw) and raw[i + 1].string == "." and raw[i + 2].type == tokenize.NAME:
                    path += "." + raw[i + 2].string
                    i += 2
                out.append(_canonical(path))
            elif hasattr(builtins, name) and i + 1 < len(raw) and raw[i + 1].string == "(":
                out.append(name)  # a builtin called (super, range, len); a variable named `input` is an ID
            else:
                out.append(ID)
        elif tok.type == tokenize.NUMBER:
            out.append(NUM)
        elif tok.type == tokenize.STRING:
            out.append(STR)
        else:
            out.append(tok.string)
        i += 1
    return tuple(out)


def op_name(spelling: str) -> str:
    """One name per op, whatever the spelling: the last dotted part, lower case, without underscores and
    without a ``Loss`` suffix. ``torch.relu``, ``F.relu``, ``nn.ReLU`` and ``x.relu()`` are ``relu``;
    ``nn.CrossEntropyLoss`` and ``F.cross_entropy`` are ``crossentropy``; ``F.layer_norm`` and ``nn.LayerNorm``
    are ``layernorm``."""
    name = spelling.rpartition(".")[2].lower().replace("_", "")
    return name.removesuffix("loss") or name


def torch_ops(source: str, where: str = "source") -> frozenset[str]:
    """The set of torch ops the module computes with (module doc, step 3), each named by `op_name`."""
    from kzcore.proposer.gates import qualified_name

    tree = _parse(source, where)
    aliases = _aliases(tree)
    aliases.setdefault("torch", "torch")
    methods = _tensor_methods()
    found: set[str] = set()
    for top in tree.body:
        if not isinstance(top, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) or top.name in _INPUT_FUNCTIONS:
            continue
        in_init = {
            id(n)
            for f in ast.walk(top)
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name == "__init__"
            for n in ast.walk(f)
        }
        for node in ast.walk(top):
            if isinstance(node, ast.Call):
                func = node.func
                path = qualified_name(func, aliases)
                if id(node) in in_init:
                    # the constructor's ops are the nn modules it builds (nn.Conv2d, nn.Parameter); its
                    # initial values (torch.randn, nn.init.uniform_) are not the computation
                    last = (path or "").rpartition(".")[2]
                    if path and path.startswith("torch.nn.") and last[:1].isupper():
                        found.add(op_name(path))
                elif path:
                    found.add(op_name(path))
                elif (
                    isinstance(func, ast.Attribute)
                    and func.attr in methods
                    and not (isinstance(func.value, ast.Name) and func.value.id == "self")
                ):
                    found.add(op_name(func.attr))
            elif isinstance(node, (ast.BinOp, ast.AugAssign)) and id(node) not in in_init:
                name = _BINOPS.get(type(node.op))
                if name:
                    found.add(name)
    return frozenset(found)


@attrs.frozen
class Fingerprint:
    tokens: tuple[str, ...]
    ops: frozenset[str]


def fingerprint(problem: Problem) -> Fingerprint:
    where = label(problem)
    return Fingerprint(normalized_tokens(problem.source, where), torch_ops(problem.source, where))


def similarity(a: Sequence[str], b: Sequence[str]) -> float:
    """SequenceMatcher ratio of two token lists (module doc, step 2)."""
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def near_duplicate(sim: float, same_ops: bool) -> bool:
    """The rule (module doc): similar enough, or the same op set and similar enough for that."""
    return sim >= SIMILARITY or (same_ops and sim >= SAME_OPS_SIMILARITY)


# ----------------------------------------------------------------------------------------------------
# comparing two sets
# ----------------------------------------------------------------------------------------------------


def label(problem: Problem) -> str:
    """A problem's name in reports: ``suite:levelN/name`` (``levelN/name`` without a suite)."""
    return f"{problem.suite}:{problem.key}" if problem.suite else problem.key


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
VARIANT_LANGUAGES = ("triton", "cuda")


def load_training(spec: str, pm=None, kernelbench: str | None = None, load=None) -> list[Problem]:
    """Training problems for a spec: ``pool:PATH`` (a task pool's accepted modules), ``variants[:SUITE]``
    (every size variant of SUITE's problems with a Triton or CUDA reference solution, default ``builtin``,
    and every op-family member), else what ``load(spec, kernelbench)`` returns (default
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
        from kzcore.train import variants

        suite = suite or "builtin"
        problems = load(suite, kernelbench)
        return [v.problem for v in variants.generate(problems, list(VARIANT_LANGUAGES), suite=suite, pm=pm)]
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

"""The Proposer's gates on a generated problem module, and the types that carry their verdicts.

Here: the AST gate (parses; defines Model with forward, get_inputs, get_init_inputs and a small size profile;
uses every requested API, alias-aware; imports nothing but torch and math; no file, process or global-state
access). The dedup key the ``duplicate`` gate compares is dedup.py's (importable from here too); names.py
resolves a module's names through its imports. The runtime gates (runs, deterministic, finite) and the
degeneracy filter run in a sandboxed evaluator worker (kzcore.evaluate.problem_check), which returns a
``kzcore.types.ProblemReport`` per module; ``runtime_gates`` turns one into recorded gate verdicts.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence

import attrs

from kzcore.proposer.catalog import Catalog
from kzcore.proposer.dedup import dedup_key as dedup_key  # the duplicate gate's key: importable from here too
from kzcore.proposer.names import import_aliases, module_constants, qualified_name
from kzcore.types import EvalConfig, Problem, ProblemReport

# Gate and filter names, in the order propose() applies them. A record holds the verdicts up to the first
# failure. "duplicate" runs right after "ast" because it needs only the AST and saves a worker run.
AST = "ast"
DUPLICATE = "duplicate"
RUNS = "runs"
DETERMINISTIC = "deterministic"
FINITE = "finite"
DEGENERATE = "degenerate"
GATE_ORDER = (AST, DUPLICATE, RUNS, DETERMINISTIC, FINITE, DEGENERATE)

REQUIRED_FUNCTIONS = ("get_inputs", "get_init_inputs")
ALLOWED_IMPORTS = ("torch", "math", "__future__")
# Builtins a problem module may not name at all (not even to shadow them): files, dynamic code, reflection.
FORBIDDEN_CALLS = frozenset(
    {"open", "exec", "eval", "compile", "__import__", "breakpoint", "globals", "locals", "vars"}
    | {"getattr", "setattr", "delattr", "memoryview"}
)
# torch paths that reach files, processes, compiled extensions or process-wide state (prefix match).
FORBIDDEN_TORCH = (
    "torch.load",
    "torch.save",
    "torch.hub",
    "torch.utils",
    "torch.ops",
    "torch.classes",
    "torch.library",
    "torch.multiprocessing",
    "torch.distributed",
    "torch.package",
    "torch.backends",
    "torch.jit",
    "torch.compile",
    "torch.cuda",
    "torch.manual_seed",
    "torch.seed",
    "torch.random",
    "torch.set_",
    "torch.use_deterministic_algorithms",
    "torch._",
)
_BINOPS = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
    ast.MatMult: "@",
}


@attrs.frozen
class GateResult:
    """One gate's verdict; ``reason`` says why it failed ("" when ok)."""

    ok: bool
    reason: str = ""

    def to_json(self) -> dict:
        return {"ok": self.ok, "reason": self.reason}

    @classmethod
    def from_json(cls, row: dict) -> GateResult:
        return cls(ok=bool(row["ok"]), reason=str(row.get("reason", "")))


# check_problems(problems, config) -> one kzcore.types.ProblemReport per problem, in order (config None: the
# checker's default). The evaluator's implementation is kzcore.evaluate.problem_check.check_problems, which
# runs each module in a sandboxed worker; tests pass a fake. A report's fields, in the order they are checked:
# ok_runs (imported, built, forward returned within the time and memory budgets), deterministic (two seeded
# runs agree), finite (no NaN/Inf), degenerate (output ~0, ~constant or independent of the inputs), reason
# (the first failure, one line).
CheckProblems = Callable[[list[Problem], EvalConfig | None], list[ProblemReport]]


def runtime_gates(report: ProblemReport) -> dict[str, GateResult]:
    """The runs → deterministic → finite gates and the degeneracy filter, up to the first failure."""
    steps = (
        (RUNS, report.ok_runs, "did not run"),
        (DETERMINISTIC, report.deterministic, "two runs disagree"),
        (FINITE, report.finite, "output has NaN or Inf"),
        (DEGENERATE, not report.degenerate, "output is ~0, ~constant or independent of the inputs"),
    )
    gates: dict[str, GateResult] = {}
    for name, ok, default_reason in steps:
        gates[name] = GateResult(True) if ok else GateResult(False, report.reason or default_reason)
        if not ok:
            break
    return gates


# ----------------------------------------------------------------------------------------------------
# the AST gate
# ----------------------------------------------------------------------------------------------------


@attrs.frozen
class AstGateConfig:
    """``require_small_profile``: the module must define ``KZ_SIZES = {"small": {...}}`` over its own
    constants, so it can be checked and evaluated on a CPU. ``allowed_imports``: top-level packages it may
    import."""

    require_small_profile: bool = True
    allowed_imports: tuple[str, ...] = ALLOWED_IMPORTS


@attrs.frozen
class AstCheck:
    """The AST gate's verdict plus what it learned: the catalog APIs the module uses."""

    result: GateResult
    apis_used: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.result.ok


def spellings_used(tree: ast.Module, aliases: dict[str, str]) -> set[str]:
    """Canonical spellings (catalog form) used by the module's classes and helper functions; get_inputs,
    get_init_inputs and module constants do not count, and operators count only outside ``__init__``."""
    found: set[str] = set()
    for top in tree.body:
        if not isinstance(top, (ast.ClassDef, ast.FunctionDef)) or top.name in REQUIRED_FUNCTIONS:
            continue
        init_nodes = {
            id(n) for f in ast.walk(top) if isinstance(f, ast.FunctionDef) and f.name == "__init__" for n in ast.walk(f)
        }
        for node in ast.walk(top):
            if isinstance(node, (ast.Attribute, ast.Name)):
                q = qualified_name(node, aliases)
                if q:
                    found.add("Tensor." + q[len("torch.Tensor.") :] if q.startswith("torch.Tensor.") else q)
                elif isinstance(node, ast.Attribute):
                    found.add(f"Tensor.{node.attr}")
            elif isinstance(node, (ast.BinOp, ast.AugAssign)) and id(node) not in init_nodes:
                symbol = _BINOPS.get(type(node.op))
                if symbol:
                    found.add(f"op:{symbol}")
    return found


def apis_used(tree: ast.Module, catalog: Catalog) -> tuple[str, ...]:
    """Catalog API names the module uses, in catalog order (alias-aware: F.conv2d counts as Conv2d)."""
    used = {catalog.api_of(s) for s in spellings_used(tree, import_aliases(tree))} - {None}
    return tuple(name for name in catalog.names if name in used)


def _fail(reason: str, used: tuple[str, ...] = ()) -> AstCheck:
    return AstCheck(GateResult(False, reason), used)


def _structure_problem(tree: ast.Module, require_small_profile: bool) -> str | None:
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    if "Model" not in classes:
        return "no class Model at module level"
    if not any(isinstance(n, ast.FunctionDef) and n.name == "forward" for n in classes["Model"].body):
        return "class Model has no forward method"
    for name in REQUIRED_FUNCTIONS:
        if name not in functions:
            return f"no function {name}() at module level"
    if require_small_profile:
        return _small_profile_problem(tree)
    return None


def _small_profile_problem(tree: ast.Module) -> str | None:
    sizes = [
        n.value
        for n in tree.body
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "KZ_SIZES" for t in n.targets)
    ]
    if not sizes:
        return 'no KZ_SIZES = {"small": {...}} profile (needed to check and evaluate it on a CPU)'
    try:
        profiles = ast.literal_eval(sizes[-1])
    except ValueError:
        return "KZ_SIZES is not a literal dict of dicts"
    if not isinstance(profiles, dict) or not isinstance(profiles.get("small"), dict) or not profiles["small"]:
        return 'KZ_SIZES has no non-empty "small" profile'
    constants = set(module_constants(tree))
    unknown = [k for k in profiles["small"] if k not in constants]
    if unknown:
        return f'KZ_SIZES["small"] names {", ".join(map(str, unknown))}, not module constants'
    return None


def _safety_problem(tree: ast.Module, aliases: dict[str, str], allowed: Sequence[str]) -> str | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] not in allowed:
                    return f"imports {a.name} (only {', '.join(allowed)} allowed)"
                if _forbidden_torch(a.name):
                    return f"imports {a.name} (files, processes and global state are off limits)"
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                return "relative import"
            if (node.module or "").split(".")[0] not in allowed:
                return f"imports from {node.module} (only {', '.join(allowed)} allowed)"
            for a in node.names:
                if a.name == "*":
                    return f"from {node.module} import * (name what you use)"
                if _forbidden_torch(f"{node.module}.{a.name}"):
                    return f"imports {node.module}.{a.name} (files, processes and global state are off limits)"
        elif isinstance(node, ast.Name):
            if node.id in FORBIDDEN_CALLS:
                return f"uses {node.id}() (no files, dynamic code or reflection)"
            if node.id.startswith("__") and node.id != "__name__":
                return f"uses {node.id}"
        elif isinstance(node, ast.Attribute):
            if node.attr.startswith("__") and node.attr.endswith("__") and node.attr != "__init__":
                return f"touches dunder attribute {node.attr}"
            q = qualified_name(node, aliases)
            if q and _forbidden_torch(q):
                return f"uses {q} (files, processes, compilation and global state are off limits)"
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            return "uses global/nonlocal (module state must not change between runs)"
    return None


def _forbidden_torch(path: str) -> bool:
    """``torch.set_`` and ``torch._`` are prefixes; the others match themselves and their members."""
    return any(
        path.startswith(p) if p.endswith("_") else path == p or path.startswith(p + ".") for p in FORBIDDEN_TORCH
    )


def check_ast(
    code: str, requested: Sequence[str], catalog: Catalog, config: AstGateConfig = AstGateConfig()
) -> AstCheck:
    """Gate (a): a verdict with a recorded reason, plus the catalog APIs the module uses."""
    if not code.strip():
        return _fail("no code block defining class Model in the completion")
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        return _fail(f"does not parse (line {exc.lineno}: {exc.msg})")
    except (ValueError, RecursionError, MemoryError) as exc:  # null bytes, absurd nesting
        return _fail(f"does not parse ({type(exc).__name__})")
    aliases = import_aliases(tree)
    problem = _safety_problem(tree, aliases, config.allowed_imports)
    used = apis_used(tree, catalog)
    if problem:
        return _fail(problem, used)
    problem = _structure_problem(tree, config.require_small_profile)
    if problem:
        return _fail(problem, used)
    missing = [name for name in requested if name not in used]
    if missing:
        spelled = "; ".join(f"{n}: {', '.join(_short(s) for s in catalog.get(n).spellings[:3])}" for n in missing)
        return _fail(f"does not use requested API {', '.join(missing)} (accepted spellings: {spelled})", used)
    return AstCheck(GateResult(True), used)


# How far a module that failed a gate got, in order: the graded gate-failure reward ([proposer]
# graded_gate_reward, docs/proposer.md) pays a later stage more. Index = failure_stage().
FAILURE_STAGES = (
    "no parse",  # or no code block
    "no Model/forward/get_inputs",  # parses, but lacks class Model with forward, get_inputs or get_init_inputs
    "requested API missing",  # has that structure, but does not use every requested API
    "did not run",  # uses the requested APIs; unsafe, no small profile, a duplicate, or failed to run
    "ran, but nondeterministic, non-finite or degenerate",
)
GRADED_REWARDS = (-1.0, -0.8, -0.6, -0.4, -0.2)  # the default reward of each stage: in [-1, 0), increasing


def failure_stage(code: str, requested: Sequence[str], catalog: Catalog, failed_gate: str | None) -> int:
    """The index in FAILURE_STAGES of a module that failed ``failed_gate``: read from the gate for the runtime
    gates and dedup, re-derived from the code when the AST gate failed (its one verdict covers parsing,
    structure, safety, the size profile and the requested APIs)."""
    if failed_gate in (DETERMINISTIC, FINITE, DEGENERATE):
        return 4
    if failed_gate in (RUNS, DUPLICATE):
        return 3
    try:
        tree = ast.parse(code) if code.strip() else None
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        tree = None
    if tree is None:
        return 0
    if _structure_problem(tree, require_small_profile=False):
        return 1
    used = apis_used(tree, catalog)
    return 2 if any(name not in used for name in requested) else 3


def _short(spelling: str) -> str:
    return spelling.replace("torch.nn.functional.", "F.").replace("torch.nn.", "nn.")

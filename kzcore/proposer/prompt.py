"""The Proposer's prompt: chat messages asking for a KernelBench-format module that uses exactly a given API
set, with realistic GPU sizes and a small CPU profile, showing one or two modules of the built-in suite as
examples (preferring ones that share an API with the request), or first, with ``[proposer] examples = "per-api"``,
a cold-start module for each requested API that shows it."""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence

from kzcore.policy import Chat
from kzcore.problems import load_problems
from kzcore.proposer.catalog import Catalog, TorchApi
from kzcore.proposer.gates import apis_used, check_ast
from kzcore.types import Problem

EXAMPLE_SUITES = ("builtin:1", "builtin:2")

SYSTEM = (
    "You write PyTorch reference problems for a GPU kernel benchmark. Each problem is one self-contained Python "
    "module in KernelBench format: class Model(nn.Module), module-level size constants, get_inputs() and "
    "get_init_inputs(). Another model will later try to write a faster custom GPU kernel for your Model, so the "
    "problem must be well-defined, deterministic and worth timing."
)

RULES = """Requirements:
1. `class Model(nn.Module)` with `__init__` (its arguments come from get_init_inputs()) and `forward`, which
   computes its result with the APIs above. Shape glue (view, reshape, permute) is fine; avoid other compute.
2. Every size is a module-level constant. `get_inputs()` returns a list of CPU tensors built with torch.rand,
   torch.randn or torch.randint from those constants (no device=); `get_init_inputs()` returns the constructor
   arguments as a list.
3. Realistic sizes for GPU timing: at the module constants the forward pass should take 1-15 ms in eager
   PyTorch on a modern data-center GPU (tens to hundreds of MB of data, or billions of FLOPs).
4. A small profile for CPU checks: `KZ_SIZES = {"small": {...}}` maps some module constants to small values
   at which the module runs in well under a second on a CPU.
5. The output depends on every input, is not ~0 or ~constant, and stays finite (no NaN or Inf): scale inputs
   so that exp, log, pow, division and products stay in range.
6. Deterministic: no dropout, no randomness or seeding inside the module's forward.
7. Import only torch (and math). No files, no os, sys, subprocess, socket, random or time, no open(), eval(),
   exec() or getattr().

Reply with one ```python block holding the whole module and nothing else."""


def load_examples(catalog: Catalog, suites: Sequence[str] = EXAMPLE_SUITES, pm=None) -> list[tuple[Problem, set[str]]]:
    """The example problems with the catalog APIs each uses."""
    return api_pool([problem for spec in suites for problem in load_problems(spec, pm=pm)], catalog)


def api_pool(problems: Sequence[Problem], catalog: Catalog) -> list[tuple[Problem, set[str]]]:
    """The modules of ``problems`` that parse, with the catalog APIs each uses: the pool of ``[proposer] examples
    = "per-api"``."""
    import ast

    pool = []
    for problem in problems:
        try:
            pool.append((problem, set(apis_used(ast.parse(problem.source), catalog))))
        except SyntaxError:
            continue
    return pool


def choose_examples(
    examples: Sequence[tuple[Problem, set[str]]],
    apis: Sequence[str],
    rng: random.Random,
    count: int = 2,
    per_api: Sequence[tuple[Problem, set[str]]] = (),
) -> list[Problem]:
    """``count`` distinct examples: of the level matching the request (1 for one API, 2 for a combination)
    where there are such, preferring ones that share an API with it; seeded by ``rng``.

    With ``per_api`` (``[proposer] examples = "per-api"``), first one module of ``per_api`` for each requested API
    that uses it (`api_examples`), then as many of ``examples`` as ``count`` still allows."""
    if count <= 0:
        return []
    shown = api_examples(per_api, apis, rng) if per_api else []
    names = {p.name for p in shown}
    examples = [e for e in examples if e[0].name not in names]
    if len(shown) >= count or not examples:
        return shown
    level = 1 if len(apis) == 1 else 2
    pool = [e for e in examples if e[0].level == level] or list(examples)
    wanted = set(apis)
    sharing = [e for e in pool if e[1] & wanted]
    rest = [e for e in pool if not e[1] & wanted]
    rng.shuffle(sharing)
    rng.shuffle(rest)
    return shown + [problem for problem, _ in (sharing + rest)[: count - len(shown)]]


def api_examples(pool: Sequence[tuple[Problem, set[str]]], apis: Sequence[str], rng: random.Random) -> list[Problem]:
    """For each API of the request, one module of ``pool`` that uses it: one that uses no other requested API and
    the fewest APIs besides where there is a choice (the API shown on its own), drawn by ``rng`` among those; never
    a module that uses exactly the requested set (the answer to copy), and no module twice. An API that no module
    of ``pool`` shows gets none."""
    wanted = set(apis)
    chosen: list[Problem] = []
    for api in apis:
        taken = {p.name for p in chosen}
        fits = [(p, used) for p, used in pool if api in used and used != wanted and p.name not in taken]
        if not fits:
            continue
        best = min((len(used & wanted), len(used)) for _, used in fits)
        tier = [p for p, used in fits if (len(used & wanted), len(used)) == best]
        chosen.append(tier[rng.randrange(len(tier))])
    return chosen


def build_proposer_prompt(apis: Sequence[TorchApi], examples: Sequence[Problem] = ()) -> Chat:
    """Chat messages asking for a new module that uses exactly ``apis``."""
    listing = "\n".join(f"- {api.describe()}" for api in apis)
    parts = [
        f"Write a new problem module that uses exactly these {len(apis)} PyTorch API(s), each at least once:",
        listing,
        RULES,
    ]
    if examples:
        shown = "\n\n".join(f"```python\n{p.source.strip()}\n```" for p in examples)
        parts.append(f"Examples of the format (write a different problem):\n\n{shown}")
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]


def prompt_hash(chat: Chat) -> str:
    """A short stable fingerprint of a chat, recorded in the task's provenance."""
    return hashlib.sha256(json.dumps(chat, sort_keys=True).encode()).hexdigest()[:16]


def cold_start_rows(
    problems: Sequence[Problem],
    catalog: Catalog,
    examples: Sequence[tuple[Problem, set[str]]],
    seed: int = 0,
    count: int = 2,
    per_api: bool = False,
) -> tuple[list[dict], dict[str, int]]:
    """SFT rows for the Proposer's cold start: for each problem module, the Proposer prompt for the catalog
    APIs it uses (with ``count`` examples, never the problem itself or the suite problem it is a variant of)
    and the module, fenced, as the answer -- the prompt and reply format a Proposer must produce before its
    frontier reward can pay anything. Only modules that pass the Proposer's own AST gate for their API set
    become rows; the second value counts the rows and why the others were left out. ``per_api``: the prompts
    show, first, a module of ``problems`` for each requested API (`choose_examples`' ``per_api``), as the
    Proposer's prompts then do."""
    rng = random.Random(seed)
    rows: list[dict] = []
    skipped = {"no_catalog_api": 0, "fails_ast_gate": 0}
    shows = api_pool(problems, catalog) if per_api else []
    for problem in problems:
        check = check_ast(problem.source, (), catalog)  # the gate, and the APIs the module uses
        if not check.ok:
            skipped["fails_ast_gate"] += 1
            continue
        apis = check.apis_used
        if not apis:
            skipped["no_catalog_api"] += 1
            continue
        own = {problem.name, problem.name.split("__v", 1)[0]}
        shown = choose_examples(
            [e for e in examples if e[0].name not in own], apis, rng, count, [e for e in shows if e[0].name not in own]
        )
        rows.append(
            {
                "prompt": build_proposer_prompt([catalog.get(a) for a in apis], shown),
                "completion": [{"role": "assistant", "content": f"```python\n{problem.source.strip()}\n```"}],
                "problem": problem.name,
                "level": problem.level,
                "apis": list(apis),
            }
        )
    return rows, {"rows": len(rows), **skipped}

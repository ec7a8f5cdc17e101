"""One Proposer pass: sample API sets from the pool's history → prompts → policy completions → extract the
module → AST gate → dedup → runtime gates in sandboxed workers (injected ``check_problems``) → task records
appended to the pool. ``kz propose`` calls ``propose``; the trainer's Proposer phase does too."""

from __future__ import annotations

import random
import re
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path

import attrs

from kzcore.builtins.extraction import code_blocks
from kzcore.errors import KzError
from kzcore.policy import Policy, PolicyError, SamplingParams
from kzcore.proposer.catalog import Catalog
from kzcore.proposer.gates import (
    AST,
    DUPLICATE,
    AstGateConfig,
    CheckProblems,
    GateResult,
    check_ast,
    dedup_key,
    runtime_gates,
)
from kzcore.proposer.pool import TaskRecord, append_records, read_pool
from kzcore.proposer.prompt import api_pool, build_proposer_prompt, choose_examples, load_examples, prompt_hash
from kzcore.proposer.sampler import SamplerConfig, sample_api_sets
from kzcore.types import EvalConfig, Problem

_MODEL_CLASS = re.compile(r"^class\s+Model\s*[(:]", re.MULTILINE)
_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL)


class ProposerError(KzError):
    """Bad arguments to propose(), or a problem checker that broke its contract."""


def extract_module(completion: str) -> str:
    """The last fenced block that defines ``class Model``; else the whole text if it does and has no fences;
    else "" (which the AST gate rejects with a reason)."""
    text = _THINK.sub("", completion)
    blocks = [body for _tag, body in code_blocks(text) if _MODEL_CLASS.search(body)]
    if blocks:
        return blocks[-1].strip("\n") + "\n"
    if _MODEL_CLASS.search(text) and "```" not in text:
        return text.strip("\n") + "\n"
    return ""


@attrs.frozen
class ProposeSummary:
    """``failures``: gate → modules that failed it (first failure only)."""

    attempted: int
    accepted: int
    failures: dict[str, int]
    pool_path: str
    records: tuple[TaskRecord, ...]


def _record_id() -> str:
    # Random, not content-derived: the same module proposed twice is two attempts (one a duplicate).
    return uuid.uuid4().hex[:16]


def propose(
    policy: Policy,
    n: int,
    *,
    catalog: Catalog,
    pool_path: str | Path,
    check_problems: CheckProblems,
    config: EvalConfig | None = None,
    seed: int = 0,
    round: int = 0,
    sampler: SamplerConfig = SamplerConfig(),
    params: SamplingParams = SamplingParams(temperature=1.0, max_new_tokens=2048),
    batch_size: int = 16,
    examples: int = 2,
    ast_config: AstGateConfig = AstGateConfig(),
    progress: Callable[[TaskRecord], None] | None = None,
    pm=None,
    api_examples: Sequence[Problem] = (),
) -> ProposeSummary:
    """Ask ``policy`` for ``n`` problem modules and append one TaskRecord per module to ``pool_path``
    (failures included, with their reasons), batch by batch so an interrupted run keeps what it made.

    ``check_problems(problems, config)`` runs gates (b)-(c) and the degeneracy filter in sandboxed workers
    and returns one kzcore.types.ProblemReport per problem, in order (``config=None``: the checker's
    default); it is called once per batch, only for modules that passed the AST gate and are not
    duplicates. A module is a duplicate when its dedup key (normalized AST + API set +
    shapes) matches an accepted task in the pool or an earlier module of this run that is still in play.
    ``api_examples``: modules the prompt shows first, one for each requested API that uses it (``[proposer]
    examples = "per-api"``: kzcore.proposer.prompt.api_examples).
    """
    if n < 1:
        raise ProposerError(f"propose: n must be >= 1, got {n}")
    if batch_size < 1:
        raise ProposerError(f"propose: batch_size must be >= 1, got {batch_size}")
    pool_path = Path(pool_path)
    history = read_pool(pool_path) if pool_path.exists() else []
    run = ProposerRun(
        policy=policy,
        catalog=catalog,
        check_problems=check_problems,
        config=config,
        seed=seed,
        round=round,
        sampler=sampler,
        params=attrs.evolve(params, n=1),
        examples=examples,
        ast_config=ast_config,
        rng=random.Random(seed),
        example_pool=load_examples(catalog, pm=pm) if examples > 0 else [],
        history=history,
        seen={r.dedup_key: r.id for r in history if r.accepted and r.dedup_key},
        api_examples=api_pool(api_examples, catalog),
    )
    made: list[TaskRecord] = []
    for start in range(0, n, batch_size):
        batch = run.batch(start, min(batch_size, n - start))
        append_records(pool_path, batch)
        run.history.extend(batch)
        run.seen.update({r.dedup_key: r.id for r in batch if r.accepted})
        made.extend(batch)
        if progress:
            for record in batch:
                progress(record)
    failures = Counter(r.failed_gate for r in made if r.failed_gate)
    return ProposeSummary(
        attempted=len(made),
        accepted=sum(r.accepted for r in made),
        failures=dict(failures),
        pool_path=str(pool_path),
        records=tuple(made),
    )


@attrs.define
class ProposerRun:
    """The state one propose() call carries from batch to batch."""

    policy: Policy | str  # a Policy, or (in GRPO, where the trainer generates) the model's name
    catalog: Catalog
    check_problems: CheckProblems
    config: EvalConfig | None
    seed: int
    round: int
    sampler: SamplerConfig
    params: SamplingParams
    examples: int
    ast_config: AstGateConfig
    rng: random.Random
    example_pool: list
    history: list[TaskRecord]
    seen: dict[str, str]  # dedup key → id of the accepted task that has it
    # ``[proposer] examples = "per-api"``: the modules (with the APIs each uses) that show each requested API first
    api_examples: list = attrs.field(factory=list)

    def prompts(self, size: int) -> tuple[list[tuple[str, ...]], list[list[dict[str, str]]]]:
        """``size`` API sets drawn from the history, and the Proposer prompt for each."""
        api_sets = sample_api_sets(self.catalog, size, self.history, self.sampler, self.rng)
        chats = [
            build_proposer_prompt(
                [self.catalog.get(a) for a in apis],
                choose_examples(self.example_pool, apis, self.rng, self.examples, self.api_examples),
            )
            for apis in api_sets
        ]
        return api_sets, chats

    def judge(self, api_sets, chats, outputs, start: int = 0) -> list[TaskRecord]:
        """Task records for completions (one list of Completion per prompt): every gate, in order."""
        when = datetime.now(timezone.utc).isoformat(timespec="seconds")
        in_play: dict[str, str] = {}
        records = [
            self._static_gates(apis, chat, completions, when, start + i, in_play)
            for i, (apis, chat, completions) in enumerate(zip(api_sets, chats, outputs))
        ]
        return _run_runtime_gates(records, self.check_problems, self.config)

    def batch(self, start: int, size: int) -> list[TaskRecord]:
        api_sets, chats = self.prompts(size)
        outputs = self.policy.generate(chats, self.params)
        if len(outputs) != size:
            raise PolicyError(
                f"policy {self.policy.name!r} returned {len(outputs)} completion lists for {size} prompts"
            )
        return self.judge(api_sets, chats, outputs, start)

    def _static_gates(self, apis, chat, completions, when: str, sample: int, in_play: dict[str, str]) -> TaskRecord:
        """Extract the module, run the AST gate and dedup; ``in_play`` holds this batch's fresh keys."""
        code = extract_module(completions[0].text if completions else "")
        ast_check = check_ast(code, apis, self.catalog, self.ast_config)
        gates = {AST: ast_check.result}
        key = ""
        record_id = _record_id()
        if ast_check.ok:
            key = dedup_key(code, apis)
            twin = self.seen.get(key) or in_play.get(key)
            gates[DUPLICATE] = GateResult(False, f"duplicate of task {twin}") if twin else GateResult(True)
            if not twin:
                in_play[key] = record_id
        return TaskRecord(
            id=record_id,
            apis=apis,
            level=self.catalog.level_hint(apis),
            code=code,
            gates=gates,
            provenance={
                "policy": getattr(self.policy, "name", str(self.policy)),
                "round": self.round,
                "time": when,
                "prompt_hash": prompt_hash(chat),
                "seed": self.seed,
                "sample": sample,
                "finish_reason": completions[0].finish_reason if completions else "error",
            },
            apis_used=ast_check.apis_used,
            dedup_key=key,
        )


def _run_runtime_gates(
    records: list[TaskRecord], check_problems: CheckProblems, config: EvalConfig | None
) -> list[TaskRecord]:
    pending = [i for i, r in enumerate(records) if r.failed_gate is None]
    if not pending:
        return records
    problems = [records[i].to_problem() for i in pending]
    reports = check_problems(problems, config)
    if len(reports) != len(pending):
        raise ProposerError(f"check_problems returned {len(reports)} reports for {len(pending)} problems")
    for problem, report in zip(problems, reports):
        if report.problem != problem.name:
            raise ProposerError(f"check_problems returned a report on {report.problem!r} for {problem.name!r}")
    out = list(records)
    for i, report in zip(pending, reports):
        out[i] = attrs.evolve(out[i], gates={**out[i].gates, **runtime_gates(report)})
    return out

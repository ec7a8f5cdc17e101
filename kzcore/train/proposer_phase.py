"""The Proposer phase: GRPO on API-set prompts. Each completion goes through the Proposer's gates; for
each valid module the current Coder is sampled k times and evaluated, and the Proposer is paid the
frontier reward of the Coder's pass rate (a failed gate pays the gate penalty). Every module lands in the
task pool with its verdicts and pass rate.

Frontier rewards depend on one completion only, so each process scores its own completions; dedup against
modules proposed in the same step by other processes is not done (the pool dedups on the next read)."""

from __future__ import annotations

import collections
import functools
import json
import random
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from kzcore.evaluate.problem_check import check_problems
from kzcore.evaluate.runner import map_prepared
from kzcore.jsonl import read_jsonl, write_text_atomic
from kzcore.policy import Completion, SamplingParams
from kzcore.prompts import build_prompt
from kzcore.proposer.catalog import load_catalog
from kzcore.proposer.gates import AstGateConfig, apis_used, failure_stage
from kzcore.proposer.pool import Diversity, PassRate, TaskRecord, append_records, diversity, read_pool
from kzcore.proposer.prompt import api_pool, load_examples
from kzcore.proposer.propose import ProposerRun
from kzcore.proposer.sampler import SamplerConfig, coder_task_records
from kzcore.rewards import frontier_reward, gate_failure_reward
from kzcore.train.coder import completion_text, keep_steps_before, run_grpo
from kzcore.types import Candidate, EvalJob, Phase

if TYPE_CHECKING:
    from kzcore.train.context import RunContext
    from kzcore.train.tasks import RunProblems


class ProposerReward:
    """A TRL reward function: module completions → gates → the Coder's pass rate → frontier reward."""

    def __init__(
        self,
        run: ProposerRun,
        chats,
        coder,
        language: str,
        executor,
        eval_config,
        settings,
        k: int,
        max_new_tokens: int,
        pool_path: Path,
        log_path: Path,
        prompt_for=None,
    ):
        self.__name__ = "frontier"
        # the Coder's prompt, built as in every other phase (RunContext.coder_prompt)
        self.prompt_for = prompt_for or functools.partial(build_prompt, language=language)
        self.run, self.chats, self.coder, self.language = run, chats, coder, language
        self.executor, self.eval_config, self.settings, self.k = executor, eval_config, settings, k
        self.max_new_tokens, self.pool_path, self.log_path = max_new_tokens, pool_path, log_path

    def __call__(self, prompts, completions, apis, chat_index, trainer_state=None, log_metric=None, **kwargs):
        t0 = time.perf_counter()
        outputs = [[Completion(text=completion_text(c))] for c in completions]
        records = self.run.judge([tuple(a) for a in apis], [self.chats[i] for i in chat_index], outputs)
        records = self.with_pass_rates(records)
        rewards = [self.reward(r) for r in records]
        append_records(self.pool_path, records)
        self.run.history.extend(records)
        self.run.seen.update({r.dedup_key: r.id for r in records if r.accepted})
        self._log(records, rewards, time.perf_counter() - t0, trainer_state, log_metric)
        return rewards

    def start_at(self, step: int) -> None:
        """GRPO starts at ``step`` (0, or a resumed checkpoint's): the log keeps the rows of the steps before it.
        The modules later steps of a killed run filed stay in the task pool (they were judged and measured)."""
        keep_steps_before(self.log_path, step)

    def reward(self, record: TaskRecord) -> float:
        """The frontier reward of an accepted module's pass rate; for a failed one the gate penalty, or with
        ``[proposer] graded_gate_reward`` the grade of the stage it reached (gates.FAILURE_STAGES)."""
        s = self.settings
        if not record.accepted:
            if s.gate_grades:
                return s.gate_grades[failure_stage(record.code, record.apis, self.run.catalog, record.failed_gate)]
            return gate_failure_reward(s.gate_penalty)
        return frontier_reward(record.latest_pass_rate, shape=s.shape, at_edges=s.at_edges, gate_penalty=s.gate_penalty)

    def with_pass_rates(self, records: list[TaskRecord]) -> list[TaskRecord]:
        """Sample the current Coder k times on every accepted module and evaluate: its pass rate p."""
        accepted = [r for r in records if r.accepted]
        if not accepted:
            return records
        problems = [r.to_problem() for r in accepted]
        chats = [self.prompt_for(p) for p in problems]
        params = SamplingParams(n=self.k, temperature=1.0, max_new_tokens=self.max_new_tokens)
        jobs = []
        for problem, samples in zip(problems, self.coder.generate(chats, params)):
            for c in samples:
                cand = Candidate(problem.name, self.language, problem.level, c.sample_index, completion=c.text)
                jobs.append(EvalJob(problem=problem, candidate=cand, config=self.eval_config))
        passed = collections.Counter(r.problem for r in map_prepared(self.executor, jobs) if r.correct)
        rates = {p.name: PassRate(round=self.run.round, k=self.k, passed=passed[p.name]) for p in problems}
        return [attrs.evolve(r, pass_rates=(*r.pass_rates, rates[r.name])) if r.name in rates else r for r in records]

    def _log(self, records, rewards, seconds, trainer_state, log_metric) -> None:
        rates = [r.latest_pass_rate for r in records if r.accepted]
        row = {
            "step": getattr(trainer_state, "global_step", None),
            "reward_mean": statistics.fmean(rewards),
            "accepted": sum(r.accepted for r in records),
            "accepted_ids": [r.id for r in records if r.accepted],  # the phase's diversity metrics read them
            "failures": dict(collections.Counter(r.failed_gate for r in records if r.failed_gate)),
            "pass_rates": rates,
            "seconds": round(seconds, 3),
        }
        with self.log_path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        if log_metric is not None:
            log_metric("kz/accepted", float(row["accepted"]))


def propose_frozen(context: RunContext, checkpoint: str, dataset, reward: ProposerReward, settings) -> dict:
    """A frozen Proposer phase: the Proposer at ``checkpoint`` samples ``num_generations`` modules per prompt,
    which are judged, measured against the current Coder, paid and filed exactly as in a training step, but no
    weights change and no checkpoint is saved."""
    policy = context.policy_for(checkpoint)
    params = SamplingParams(
        n=settings.num_generations, temperature=settings.temperature, top_p=settings.top_p,
        max_new_tokens=settings.max_completion_length, seed=settings.seed,
    )  # fmt: skip
    per_step = max(1, settings.batch_size // settings.num_generations)
    rewards: list[float] = []
    t0 = time.perf_counter()
    try:
        for start in range(0, len(dataset), per_step):
            rows = dataset[start : start + per_step]
            outputs = policy.generate(rows["prompt"], params)
            completions = [c.text for sampled in outputs for c in sampled]
            repeat = [i for i in range(len(outputs)) for _ in range(settings.num_generations)]
            rewards += reward(
                prompts=[rows["prompt"][i] for i in repeat], completions=completions,
                apis=[rows["apis"][i] for i in repeat], chat_index=[rows["chat_index"][i] for i in repeat],
            )  # fmt: skip
    finally:
        policy.close()
    return {
        "steps": 0,
        "frozen": True,
        "batches": -(-len(dataset) // per_step),
        "reward_mean": statistics.fmean(rewards) if rewards else float("nan"),
        "train_seconds": round(time.perf_counter() - t0, 3),
    }


def run_proposer_phase(
    context: RunContext, problems: RunProblems, phase: Phase, phase_dir: Path, *, coder_checkpoint: str,
    proposer_checkpoint: str,
) -> dict:  # fmt: skip
    """One Proposer phase of the run ``context``: the Proposer at ``proposer_checkpoint`` is trained (or, frozen,
    only samples) against the Coder at ``coder_checkpoint``; ``problems`` gives the task pool and the Coder's
    tasks and measured results that weight the API draw."""
    from datasets import Dataset

    cfg = context.config
    settings = attrs.evolve(cfg.proposer_grpo, max_steps=phase.steps)
    seed = cfg.run.seed + 1000 * phase.round
    catalog = load_catalog()
    history = read_pool(problems.pool_path) if problems.pool_path.exists() else []
    # the Coder's results on its other tasks (built-in, cold-start, variant, composed) weight the draw too
    results = problems.task_results()
    coder_tasks = coder_task_records(problems.tasks, results, catalog) if results else []
    examples = load_examples(catalog, pm=context.pm)
    unseen = cfg.proposer.unseen_weight
    per_api = cfg.proposer.examples == "per-api"
    cold_start = problems.proposer_cold_start_problems() if unseen != 1.0 or per_api else []
    known: frozenset[str] = frozenset()
    if unseen != 1.0:  # what the Proposer has seen: its prompt's examples (APIs known), the cold start's and the
        # Coder's problems (the "coldstart" tasks are among the cold start's: each module parsed once)
        seen = {(p.level, p.name): p for p in [*cold_start, *problems.tasks]}
        known = known.union(*(apis for _, apis in examples)) | known_apis(catalog, seen.values())
    sampler = SamplerConfig(
        min_size=cfg.proposer.set_size[0], max_size=cfg.proposer.set_size[1], known_apis=known, unseen_weight=unseen
    )
    run = ProposerRun(
        policy="proposer", catalog=catalog, seed=seed, round=phase.round,
        check_problems=functools.partial(check_problems, pool=context.executor), config=cfg.eval, sampler=sampler,
        params=SamplingParams(), examples=2, rng=random.Random(seed), ast_config=AstGateConfig(),
        example_pool=examples, history=history + coder_tasks,
        seen={r.dedup_key: r.id for r in history if r.accepted and r.dedup_key},
        api_examples=api_pool(cold_start, catalog) if per_api else [],
    )  # fmt: skip
    n_prompts = phase.steps * max(1, settings.batch_size // settings.num_generations)
    api_sets, chats = phase_prompts(run, n_prompts, phase_dir / "prompts.jsonl")
    dataset = Dataset.from_list(
        [{"prompt": c, "apis": list(a), "chat_index": i} for i, (a, c) in enumerate(zip(api_sets, chats))]
    )
    coder = context.policy_for(coder_checkpoint)
    log_path = phase_dir / "rewards.jsonl"
    try:
        reward = ProposerReward(
            run, chats, coder, context.language, context.executor, cfg.eval, cfg.proposer, cfg.proposer.k,
            cfg.coder.max_completion_length, problems.pool_path, log_path, prompt_for=context.coder_prompt,
        )  # fmt: skip
        if phase.frozen:
            metrics = propose_frozen(context, proposer_checkpoint, dataset, reward, settings)
        else:
            metrics = run_grpo(
                proposer_checkpoint, dataset, [reward], settings, phase_dir / "model", pm=context.pm,
                log=context.log, quiet=cfg.run.quiet, label="proposer",
            )  # fmt: skip
    finally:
        coder.close()
    rows = read_jsonl(log_path)
    metrics["accepted"] = sum(r["accepted"] for r in rows)
    metrics["proposed"] = sum(sum(r["failures"].values()) + r["accepted"] for r in rows)
    if all("accepted_ids" in r for r in rows):  # a log whose rows do not name their modules: diversity unknown
        metrics.update(phase_diversity(rows, problems.pool_path).to_metrics())
    if unseen != 1.0:
        metrics["known_apis"] = len(known)
    metrics["coder_tasks_weighting"] = len(coder_tasks)  # Coder tasks (not pool modules) in the API draw's history
    return metrics


def phase_diversity(rows: list[dict], pool_path: Path) -> Diversity:
    """The diversity (kzcore.proposer.pool.diversity) of the modules this phase accepted: the pool records
    named by the reward log's ``rows`` (their ``accepted_ids``), not the pool's earlier rounds nor the modules
    a killed run filed in steps its resume repeats (`ProposerReward.start_at` drops those rows)."""
    ids = {i for r in rows for i in r.get("accepted_ids", ())}
    records = read_pool(pool_path) if ids and pool_path.exists() else []
    return diversity(r for r in records if r.id in ids)


def phase_prompts(run: ProposerRun, count: int, path: Path) -> tuple[list[tuple[str, ...]], list[list[dict]]]:
    """The phase's ``count`` API sets and Proposer prompts: drawn once and kept in ``path``, so that a resumed
    phase trains on the prompts its checkpoint was trained with (a new draw would see the modules the killed
    run added to the pool)."""
    if path.exists():
        rows = read_jsonl(path)
        if len(rows) == count:
            return [tuple(r["apis"]) for r in rows], [r["prompt"] for r in rows]
    api_sets, chats = run.prompts(count)
    write_text_atomic(path, "".join(json.dumps({"apis": list(a), "prompt": c}) + "\n" for a, c in zip(api_sets, chats)))
    return api_sets, chats


def known_apis(catalog, problems) -> frozenset[str]:
    """The catalog APIs the given problem modules use (a module that does not parse contributes none)."""
    import ast

    known: set[str] = set()
    for problem in problems:
        try:
            known.update(apis_used(ast.parse(problem.source), catalog))
        except SyntaxError:
            continue
    return frozenset(known)

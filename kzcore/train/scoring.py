"""Scoring a checkpoint's policy on a set of problems, for the trainer: `evaluate_policy` (sample, evaluate through
the run's executor) with the trainer's progress lines, summarised into metrics. Used by the held-out evaluation,
its training probe and the Coder's task calibration."""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from kzcore.evaluate.policy_eval import evaluate_policy
from kzcore.evaluate.runner import unchecked_line
from kzcore.metrics import summarize
from kzcore.policy import SamplingParams
from kzcore.progress import Progress
from kzcore.train.context import RunContext
from kzcore.types import EvalResult, Problem


def sample_and_evaluate(
    context: RunContext, policy, problems: list[Problem], language: str, params: SamplingParams, out: Path, files: str,
    where: str, cost: dict | None = None,
) -> list[EvalResult]:  # fmt: skip
    """``params.n`` completions of each problem from ``policy`` in ``language``, evaluated through the run's
    executor (``context``: also its Coder prompt template, plugins and log), by `evaluate_policy`. Completions
    and verdicts go to ``out/{files}completions-{language}.jsonl`` and ``out/{files}results-{language}.jsonl``
    (both resume); what an earlier run left there is reused, and the progress lines say so rather than count it
    as done now. ``cost``, when given, receives what this call spent (kzcore.evaluate.policy_eval.sampling_cost)."""
    label = f"{where}: sampling {params.n} per problem"

    @contextmanager
    def sampling(reused: int, todo: int) -> Iterator[Callable[[int], None]]:
        if reused:
            context.log(f"{label}: {reused}/{len(problems)} reused from an earlier run")
        with Progress(label, None, context.log) as bar:
            if todo:
                bar.start(todo)
            yield bar.advance

    evaluating = Progress(f"{where}: evaluating", None, context.log)
    correct = 0

    def on_start(already: int, todo: int) -> None:
        if already:
            context.log(f"{where}: evaluating: {already} results reused from an earlier run")
        if todo or not already:
            evaluating.start(todo)

    def on_result(result: EvalResult) -> None:
        nonlocal correct
        correct += result.correct
        evaluating.advance(1, f"{correct} correct")

    def on_stale(stale: list[EvalResult]) -> None:
        context.log(f"{where}: {len(stale)} saved result(s) judged other code than sampled now; evaluating again")

    def on_unchecked(unchecked: dict[tuple[int, str], str]) -> None:
        context.log(f"{where}: {unchecked_line(unchecked)}")

    evaluation = evaluate_policy(
        policy, problems, language, params, context.config.eval, out / f"{files}completions-{language}.jsonl",
        out / f"{files}results-{language}.jsonl", template=context.config.prompts.coder_template,
        batch_size=prompts_per_call(policy, params.n), executor=lambda: context.executor, sampling=sampling,
        evaluating=evaluating, on_start=on_start, on_result=on_result, on_stale=on_stale, on_unchecked=on_unchecked,
        pm=context.pm,
    )  # fmt: skip
    if cost is not None:
        cost.update(evaluation.cost)
    return evaluation.results


def prompts_per_call(policy, n: int, default: int = 8) -> int:
    """Prompts per ``generate`` call so that their ``n`` samples each fill the policy's batch (``batch_size``
    rows, where the policy has one): a batch decodes until its longest row ends, so half-full batches cost
    nearly as much as full ones (8 prompts of 4 samples fill 32 of a 64-row batch). Policies without a row
    batch keep ``default`` prompts a call."""
    rows = getattr(policy, "batch_size", None)
    if not isinstance(rows, int) or rows < 1:
        return default
    return max(1, rows // max(1, n))


def score_problems(
    context: RunContext, policy, problems: list[Problem], language: str, out: Path, where: str, prefix: str, clean=None
) -> dict:
    """Metrics ``{prefix}_{language}[_l{level}]_pass@k`` / ``_fast_1@k`` (for each ``[heldout] k`` <= n) and
    ``{prefix}_{language}_statuses`` of ``policy`` on ``problems``, sampled with the ``[heldout]`` settings;
    the files are named as ``sample_and_evaluate`` says, prefixed ``{prefix}-`` unless ``prefix`` is
    "heldout". With ``clean`` (the problems among them that decontamination found no near-duplicate of,
    kzcore.decontam), the same results also give ``{prefix}_{language}_clean_pass@k`` / ``_clean_fast_1@k``
    over those alone and their count ``{prefix}_{language}_clean_problems``: no more sampling."""
    cfg = context.config.heldout
    params = SamplingParams(
        n=cfg.n, temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens, seed=context.config.run.seed
    )
    files = "" if prefix == "heldout" else f"{prefix}-"
    cost: dict = {}
    results = sample_and_evaluate(
        context, policy, problems, language, params, out, files, f"{where} [{language}]", cost=cost
    )
    metrics: dict = {f"{prefix}_{language}_statuses": dict(collections.Counter(r.status.value for r in results))}
    metrics.update({f"{prefix}_{language}_{key}": value for key, value in cost.items()})
    names = [(p.level, p.name) for p in problems]
    for k in cfg.ks():
        for level, row in summarize(results, k=k, problems=names).items():
            key = language if level == "all" else f"{language}_l{level}"
            metrics[f"{prefix}_{key}_pass@{k}"] = row["pass@k"]
            metrics[f"{prefix}_{key}_fast_1@{k}"] = row["fast_1"]  # None when nothing was timed
    if clean is not None:
        keep = {(p.level, p.name) for p in clean}
        metrics[f"{prefix}_{language}_clean_problems"] = len(keep)
        kept = [r for r in results if (r.level, r.problem) in keep]
        for k in cfg.ks():
            row = summarize(kept, k=k, problems=sorted(keep))["all"]
            metrics[f"{prefix}_{language}_clean_pass@{k}"] = row["pass@k"] if keep else None
            metrics[f"{prefix}_{language}_clean_fast_1@{k}"] = row["fast_1"] if keep else None
    return metrics


def calibrate_tasks(
    context: RunContext, checkpoint: str, tasks: list[Problem], out: Path
) -> tuple[dict[str, tuple[int, int]], dict]:
    """``[task_mix] calibrate`` samples of every one of ``tasks`` (the ``[problems] tasks`` problems) from the
    Coder at ``checkpoint`` (with the Coder's sampling settings), evaluated: (each task's (correct, samples),
    keyed "level/name"; metrics
    ``calibration_tasks``, ``calibration_frontier`` (tasks with a pass rate strictly between 0 and 1),
    ``calibration_correct``, ``calibration_seconds``). Completions and verdicts stay in ``out``."""
    t0 = time.perf_counter()
    k, coder, language = context.config.task_mix.calibrate, context.config.coder, context.language
    params = SamplingParams(
        n=k, temperature=coder.temperature, top_p=coder.top_p, max_new_tokens=coder.max_completion_length,
        seed=context.config.run.seed,
    )  # fmt: skip
    policy = context.policy_for(checkpoint)
    try:
        where = f"calibrating {len(tasks)} tasks [{language}]"
        results = sample_and_evaluate(context, policy, tasks, language, params, out, "", where)
    finally:
        policy.close()
    passed = {f"{p.level}/{p.name}": 0 for p in tasks}
    for r in results:
        passed[f"{r.level}/{r.problem}"] += r.correct
    metrics = {
        "calibration_tasks": len(passed),
        "calibration_frontier": sum(0 < n < k for n in passed.values()),
        "calibration_correct": sum(passed.values()),
        "calibration_seconds": round(time.perf_counter() - t0, 3),
    }
    return {task: (n, k) for task, n in passed.items()}, metrics

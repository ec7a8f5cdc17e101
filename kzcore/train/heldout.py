"""Scoring a checkpoint's policy on a set of problems for the trainer's held-out evaluation (and its training
probe): sample ``[heldout] n`` completions per problem, evaluate them through the run's executor, summarise
pass@k and fast_1 per level with the verdict mix."""

from __future__ import annotations

from pathlib import Path

from kzcore.evaluate.runner import evaluate
from kzcore.metrics import summarize
from kzcore.policy import SamplingParams
from kzcore.progress import Progress
from kzcore.sampling import sample_candidates
from kzcore.types import Problem


def score_problems(trainer, policy, problems: list[Problem], language: str, out: Path, where: str, prefix: str) -> dict:
    """Metrics ``{prefix}_{language}[_l{level}]_pass@k`` / ``_fast_1@k`` (for each ``[heldout] k`` <= n) and
    ``{prefix}_{language}_statuses`` of ``policy`` on ``problems``, for ``trainer`` (a
    kzcore.train.trainer.Trainer: its config, executor, plugins and log). The completions and verdicts go to
    ``out/completions-{language}.jsonl`` and ``out/results-{language}.jsonl``, the file names prefixed
    ``{prefix}-`` unless ``prefix`` is "heldout"."""
    cfg = trainer.config.heldout
    params = SamplingParams(
        n=cfg.n, temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens, seed=trainer.config.run.seed
    )
    files = "" if prefix == "heldout" else f"{prefix}-"
    where = f"{where} [{language}]"
    with Progress(f"{where}: sampling {cfg.n} per problem", len(problems), trainer.log) as bar:
        candidates = sample_candidates(
            policy, problems, language, params, out / f"{files}completions-{language}.jsonl",
            template=trainer.config.prompts.coder_template, on_batch=bar.advance, pm=trainer.pm,
        )  # fmt: skip
    with Progress(f"{where}: evaluating", None, trainer.log) as bar:
        correct = 0

        def on_result(result):
            nonlocal correct
            correct += result.correct
            bar.advance(1, f"{correct} correct")

        results = evaluate(
            problems, candidates, trainer.config.eval, out / f"{files}results-{language}.jsonl",
            executor=trainer.pool, on_start=lambda already, todo: bar.start(todo), on_result=on_result, pm=trainer.pm,
        )  # fmt: skip
    metrics: dict = {f"{prefix}_{language}_statuses": status_counts(results)}
    names = [(p.level, p.name) for p in problems]
    for k in (k for k in cfg.k if k <= cfg.n):
        for level, row in summarize(results, k=k, problems=names).items():
            key = language if level == "all" else f"{language}_l{level}"
            metrics[f"{prefix}_{key}_pass@{k}"] = row["pass@k"]
            metrics[f"{prefix}_{key}_fast_1@{k}"] = row["fast_1"]  # None when nothing was timed
    return metrics


def status_counts(results) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status.value] = counts.get(r.status.value, 0) + 1
    return counts

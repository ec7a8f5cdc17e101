"""A policy judged on problems: its completions sampled into a file (kzcore.sampling) and the candidates they
hold evaluated into a results file (kzcore.evaluate.runner). The one chain behind `kz eval --policy`,
distillation's teacher and the trainer's held-out scoring, which score the verdicts their own ways
(kzcore.metrics) and bring their own progress display and messages through the callbacks."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import attrs

from kzcore.evaluate.runner import evaluate
from kzcore.executors import Executor
from kzcore.policy import Policy, SamplingParams
from kzcore.sampling import read_completions, sample_candidates
from kzcore.types import Candidate, EvalConfig, EvalResult, Problem

# (problems whose completions are reused, problems to sample) -> the context sampling runs in; its value, when
# not None, hears how many prompts each batch answered
SamplingProgress = Callable[[int, int], AbstractContextManager[Callable[[int], None] | None]]


@attrs.frozen
class PolicyEvaluation:
    """What `evaluate_policy` returns: the candidates the completions hold, and every verdict (on them and on the
    extra candidates)."""

    candidates: list[Candidate]
    results: list[EvalResult]


def evaluate_policy(
    policy: Policy,
    problems: list[Problem],
    language: str,
    params: SamplingParams,
    config: EvalConfig,
    completions: Path,
    results: Path,
    *,
    template: str = "kernelbench",
    batch_size: int = 8,
    executor: str | Executor | Callable[[], Executor] = "local",
    workers: int | None = None,
    extra: Sequence[tuple[Problem, Candidate]] = (),
    close_policy: bool = False,
    sampling: SamplingProgress | None = None,
    on_sampled: Callable[[list[Candidate]], None] | None = None,
    evaluating: AbstractContextManager | None = None,
    on_start: Callable[[int, int], None] | None = None,
    on_result: Callable[[EvalResult], None] | None = None,
    on_stale: Callable[[list[EvalResult]], None] | None = None,
    pm=None,
) -> PolicyEvaluation:
    """``params.n`` completions of each of ``problems`` from ``policy`` in ``language`` (prompt ``template``,
    ``batch_size`` prompts a call) appended to ``completions``, and the candidates they hold, with the
    ``extra`` ones (candidates that need no sampling, each with its problem), evaluated under ``config`` into
    ``results``. Both files resume: a problem with completions in ``completions`` is not asked again, and a
    verdict in ``results`` is reused unless it judged other code than the candidate holds now (the runner
    retracts it and ``on_stale`` hears which).

    ``executor``: as `evaluate` takes it, or a function returning one, called once sampling is done (the
    trainer's executor starts on first use: its workers must not sit beside a sampling model). With
    ``close_policy`` the policy is closed as soon as sampling ends, however it ends, so that its memory (a
    GPU's included) is free for the candidates. Progress: ``sampling`` (see `SamplingProgress`) wraps the
    sampling; ``on_sampled`` hears the candidates before any is evaluated (it may raise to stop there);
    ``evaluating`` is the context the evaluation runs in; ``on_start``, ``on_result`` and ``on_stale`` go to
    `evaluate`."""
    candidates = _sample(
        policy, problems, language, params, completions, template, batch_size, close_policy, sampling, pm
    )
    if on_sampled:
        on_sampled(candidates)
    judged = list(problems) + [problem for problem, _ in extra]
    pool = executor() if callable(executor) else executor
    with nullcontext() if evaluating is None else evaluating:
        verdicts = evaluate(
            judged, candidates + [candidate for _, candidate in extra], config, results, executor=pool,
            workers=workers, on_result=on_result, on_start=on_start, on_stale=on_stale, pm=pm,
        )  # fmt: skip
    return PolicyEvaluation(candidates, verdicts)


def _sample(
    policy: Policy, problems: list[Problem], language: str, params: SamplingParams, out: Path, template: str,
    batch_size: int, close_policy: bool, sampling: SamplingProgress | None, pm,
) -> list[Candidate]:  # fmt: skip
    """The sampling stage of `evaluate_policy`: the candidates of ``out``, the policy asked for what is missing."""
    try:
        reused = 0 if sampling is None else already_sampled(out, problems, language)
        with nullcontext() if sampling is None else sampling(reused, len(problems) - reused) as on_batch:
            return sample_candidates(
                policy, problems, language, params, out, template=template, batch_size=batch_size,
                on_batch=on_batch, pm=pm,
            )  # fmt: skip
    finally:
        if close_policy:
            policy.close()


def already_sampled(path: Path, problems: list[Problem], language: str) -> int:
    """How many of ``problems`` already have completions in ``language`` in ``path`` (sample_candidates asks
    the policy only for the others)."""
    if not path.exists():
        return 0
    rows = read_completions(path, on_skip=lambda message: None)  # sample_candidates reports a torn line
    done = {(r["level"], r["problem"]) for r in rows if r.get("language") == language}
    return sum((p.level, p.name) in done for p in problems)

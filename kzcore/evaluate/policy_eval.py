"""A policy judged on problems: its completions sampled into a file (kzcore.sampling) and the candidates they
hold evaluated into a results file (kzcore.evaluate.runner). The one chain behind `kz eval --policy`,
distillation's teacher and the trainer's held-out scoring, which score the verdicts their own ways
(kzcore.metrics) and bring their own progress display and messages through the callbacks."""

from __future__ import annotations

import time
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
    cost: dict = attrs.Factory(dict)  # what the call spent (`sampling_cost`)


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
    on_unchecked: Callable[[dict[tuple[int, str], str]], None] | None = None,
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
    ``evaluating`` is the context the evaluation runs in; ``on_start``, ``on_result``, ``on_stale`` and ``on_unchecked``
    go to `evaluate`. The returned ``cost`` says what the call spent (`sampling_cost`)."""
    before = sampled_problems(completions, language)
    t0 = time.perf_counter()
    candidates = _sample(
        policy, problems, language, params, completions, template, batch_size, close_policy, sampling, before, pm
    )
    sampling_s = time.perf_counter() - t0
    if on_sampled:
        on_sampled(candidates)
    judged = list(problems) + [problem for problem, _ in extra]
    t1 = time.perf_counter()
    pool = executor() if callable(executor) else executor
    with nullcontext() if evaluating is None else evaluating:
        verdicts = evaluate(
            judged, candidates + [candidate for _, candidate in extra], config, results, executor=pool,
            workers=workers, on_result=on_result, on_start=on_start, on_stale=on_stale, on_unchecked=on_unchecked,
            pm=pm,
        )  # fmt: skip
    cost = sampling_cost(completions, language, before, sampling_s, time.perf_counter() - t1, len(verdicts))
    return PolicyEvaluation(candidates, verdicts, cost)


def _sample(
    policy: Policy, problems: list[Problem], language: str, params: SamplingParams, out: Path, template: str,
    batch_size: int, close_policy: bool, sampling: SamplingProgress | None, done: set[tuple[int, str]], pm,
) -> list[Candidate]:  # fmt: skip
    """The sampling stage of `evaluate_policy`: the candidates of ``out``, the policy asked for what is missing
    (``done``: the problems ``out`` already holds completions of, `sampled_problems`)."""
    try:
        reused = sum((p.level, p.name) in done for p in problems)
        with nullcontext() if sampling is None else sampling(reused, len(problems) - reused) as on_batch:
            return sample_candidates(
                policy, problems, language, params, out, template=template, batch_size=batch_size,
                on_batch=on_batch, pm=pm,
            )  # fmt: skip
    finally:
        if close_policy:
            policy.close()


def sampled_problems(path: Path, language: str) -> set[tuple[int, str]]:
    """The (level, problem) keys with completions in ``language`` in ``path`` (none when it does not exist)."""
    if not path.exists():
        return set()
    rows = read_completions(path, on_skip=lambda message: None)  # sample_candidates reports a torn line
    return {(r["level"], r["problem"]) for r in rows if r.get("language") == language}


def sampling_cost(path: Path, language: str, before: set, sampling_s: float, evaluating_s: float, results: int) -> dict:
    """What one `evaluate_policy` call spent, so that the cost of scoring a checkpoint is known before the next
    is run: ``sampled_completions`` and ``generated_tokens`` (the rows of problems not in ``before``, i.e.
    sampled now, not reused; tokens where the backend reports them), ``sampling_s``, ``tokens_per_s`` (None
    when nothing was sampled or no token was counted), ``evaluating_s`` (the evaluation's wall time, the
    executor's start and reused verdicts included) and ``results``."""
    rows = [
        r
        for r in read_completions(path, on_skip=lambda m: None)
        if r.get("language") == language and (r["level"], r["problem"]) not in before
    ] if path.exists() else []  # fmt: skip
    tokens = sum(r.get("tokens", 0) for r in rows)
    return {
        "sampled_completions": len(rows),
        "generated_tokens": tokens,
        "sampling_s": round(sampling_s, 3),
        "tokens_per_s": round(tokens / sampling_s, 1) if tokens and sampling_s > 0 else None,
        "evaluating_s": round(evaluating_s, 3),
        "results": results,
    }


def cost_line(cost: dict, completions: Path) -> str:
    """One line on what `evaluate_policy` spent, for a command's output."""
    if not cost.get("sampled_completions"):
        sampled = f"completions reused from {completions}"
    else:
        rate = f", {cost['tokens_per_s']} tokens/s" if cost.get("tokens_per_s") else ""
        sampled = (
            f"sampled {cost['sampled_completions']} completions ({cost['generated_tokens']} tokens) in "
            f"{cost['sampling_s']:.1f} s{rate}"
        )
    return f"{sampled}; evaluated {cost['results']} candidates in {cost['evaluating_s']:.1f} s"

"""`evaluate_policy`, the sample-and-evaluate chain of `kz eval --policy`, distillation and the trainer's
scoring: its stages run in order (the policy closed and the executor started between them), extra candidates
share the results file, and a second call reuses both files."""

from __future__ import annotations

import contextlib

import pytest

from kzcore.evaluate import policy_eval
from kzcore.evaluate.policy_eval import evaluate_policy
from kzcore.policy import SamplingParams
from kzcore.problems import load_problems
from kzcore.results import read_headers
from kzcore.types import Candidate, EvalConfig
from tests import fakes_policy

PROBLEMS = {p.name: p for p in load_problems("builtin:1") if p.name in ("1_ReLU", "3_Sigmoid")}


class EventPolicy(fakes_policy.ScriptedPolicy):
    def __init__(self, events: list[str]):
        self.events = events

    def generate(self, prompts, params):
        self.events.append("generate")
        return super().generate(prompts, params)

    def close(self):
        self.events.append("close")


def test_the_policy_closes_before_the_executor_starts(plugins, tmp_path, monkeypatch):
    """With close_policy the model is gone before the run's executor (a function) is started, and what the
    stages report comes in order: sampling's context and batches, the candidates, then the evaluation."""
    pm = plugins("kz_triton")
    events: list[str] = []

    def evaluate(problems, candidates, config, out, executor, workers, on_result, on_start, on_stale, on_unchecked, pm):
        events.append(f"evaluate {len(candidates)} on {executor}")
        return []

    @contextlib.contextmanager
    def sampling(reused, todo):
        events.append(f"sampling {reused}/{todo}")
        yield lambda k: events.append(f"batch {k}")

    def executor():
        events.append("executor")
        return "started"

    monkeypatch.setattr(policy_eval, "evaluate", evaluate)
    evaluation = evaluate_policy(
        EventPolicy(events), list(PROBLEMS.values()), "triton", SamplingParams(n=2), EvalConfig(),
        tmp_path / "c.jsonl", tmp_path / "r.jsonl", executor=executor, close_policy=True, sampling=sampling,
        on_sampled=lambda candidates: events.append(f"sampled {len(candidates)}"), pm=pm,
    )  # fmt: skip
    assert events == [
        "sampling 0/2", "generate", "batch 2", "close", "sampled 4", "executor", "evaluate 4 on started"
    ]  # fmt: skip
    assert [c.problem for c in evaluation.candidates] == ["1_ReLU", "1_ReLU", "3_Sigmoid", "3_Sigmoid"]


def test_the_policy_closes_when_sampling_fails(plugins, tmp_path):
    events: list[str] = []

    class Failing(EventPolicy):
        def generate(self, prompts, params):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        evaluate_policy(
            Failing(events), list(PROBLEMS.values()), "triton", SamplingParams(), EvalConfig(), tmp_path / "c.jsonl",
            tmp_path / "r.jsonl", close_policy=True, pm=plugins("kz_triton"),
        )  # fmt: skip
    assert events == ["close"]
    assert not (tmp_path / "c.jsonl").exists()  # no empty completions file


def test_extra_candidates_share_the_results_file_and_a_second_call_reuses_both_files(plugins, tmp_path, own_workers):
    """Distillation's shape: the policy samples 1_ReLU, a ready solution of 3_Sigmoid comes along as an extra
    candidate; one run header, both judged. Called again, nothing is sampled or evaluated anew."""
    pm = plugins("kz_pylang")
    from kz_pylang import EchoPolicy

    sigmoid = PROBLEMS["3_Sigmoid"]
    extra = Candidate(
        problem=sigmoid.name,
        language="python",
        level=1,
        source=sigmoid.source.replace("class Model(", "class ModelNew("),
    )
    args = ([PROBLEMS["1_ReLU"]], "python", SamplingParams(n=1), EvalConfig(device="cpu", trials=1))
    files = (tmp_path / "c.jsonl", tmp_path / "r.jsonl")
    first = evaluate_policy(EchoPolicy(), *args, *files, workers=1, extra=[(sigmoid, extra)], pm=pm)
    assert [c.problem for c in first.candidates] == ["1_ReLU"]
    assert sorted((r.problem, r.status.value) for r in first.results) == [
        ("1_ReLU", "correct"), ("3_Sigmoid", "correct")
    ]  # fmt: skip
    starts: list[tuple[int, int]] = []

    class Silent(EchoPolicy):
        def generate(self, prompts, params):
            raise AssertionError("asked again for a problem whose completions are on disk")

    again = evaluate_policy(
        Silent(), *args, *files, workers=1, extra=[(sigmoid, extra)], on_start=lambda *n: starts.append(n), pm=pm
    )
    assert starts == [(2, 0)] and len(again.results) == 2
    # what each call spent: one completion sampled the first time (the echo policy counts no tokens), none again
    assert first.cost["sampled_completions"] == 1 and first.cost["results"] == 2
    assert again.cost["sampled_completions"] == 0 and again.cost["tokens_per_s"] is None
    assert len(read_headers(files[1])) == 1

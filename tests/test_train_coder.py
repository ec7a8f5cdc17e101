"""The Coder phase: the CA-GRPO reward function scores real evaluator verdicts per group, and a GRPO phase
with TRL runs end to end on a tiny model, logging reward statistics and saving the checkpoint."""

from __future__ import annotations

import functools
import json
import time

import pytest

from kzcore.executors.local import LocalPool
from kzcore.plugins import plugin_specs
from kzcore.problems import load_problems
from kzcore.prompts import build_prompt
from kzcore.train.ca_grpo import CAGRPOConfig
from kzcore.train.coder import CoderReward, GRPOSettings, run_coder_phase
from kzcore.types import EvalConfig
from tests import fakes_policy
from tests.tinymodel import build_tiny_checkpoint

CFG = EvalConfig(trials=1, timeout_s=60)


@pytest.fixture(scope="module")
def problems():
    return [p for p in load_problems("builtin:1") if p.name in ("1_ReLU", "3_Sigmoid")]


@pytest.fixture
def pool(plugins, own_workers):
    pm = plugins("kz_triton")
    pool = LocalPool(workers=1, config=CFG, plugins=plugin_specs(pm)).start()
    yield pool
    pool.close()


def test_reward_function_pays_per_group(pool, problems, tmp_path):
    samples = tmp_path / "samples.jsonl"
    reward = CoderReward(problems, "triton", pool, CFG, CAGRPOConfig(tau=0.5), tmp_path / "r.jsonl", samples)
    good = [{"role": "assistant", "content": f"```python\n{fakes_policy.SOLUTION}```"}]
    bad = [{"role": "assistant", "content": "no code"}]
    rewards = reward(
        prompts=[[]] * 4,
        completions=[good, bad, bad, bad],
        problem=["1_ReLU", "1_ReLU", "3_Sigmoid", "3_Sigmoid"],
        level=[1, 1, 1, 1],
    )
    assert rewards == [1.0, 0.0, 0.0, 0.0]
    # every completion is kept with its task, verdict, the head of the evaluator's message and its reward
    kept = [json.loads(x) for x in samples.read_text().splitlines()]
    assert [(r["task"], r["status"], r["reward"]) for r in kept] == [
        ("1/1_ReLU", "correct", 1.0), ("1/1_ReLU", "format_error", 0.0),
        ("1/3_Sigmoid", "format_error", 0.0), ("1/3_Sigmoid", "format_error", 0.0),
    ]  # fmt: skip
    assert kept[0]["completion"] == good[0]["content"] and kept[1]["completion"] == "no code"
    assert "code block" in kept[1]["message"] and kept[0]["message"] == ""
    assert {r["group"] for r in kept} == {"0:1/1_ReLU", "0:1/3_Sigmoid"} and {r["call"] for r in kept} == {0}
    (row,) = [json.loads(x) for x in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert row["statuses"] == {"correct": 1, "format_error": 3}
    assert sorted(row["group_correct_rates"]) == [0.0, 0.5] and row["reward_mean"] == 0.25
    assert row["between_calls_seconds"] is None  # nothing came before the first call
    time.sleep(0.05)  # the trainer's generation and update between two reward calls
    reward(prompts=[[]] * 2, completions=[bad, bad], problem=["1_ReLU"] * 2, level=[1, 1])
    second = json.loads((tmp_path / "r.jsonl").read_text().splitlines()[1])
    assert second["between_calls_seconds"] >= 0.05 and second["call"] == 1


def test_grpo_phase_runs_end_to_end(pool, problems, tmp_path, training):
    tiny = build_tiny_checkpoint(tmp_path / "tiny")
    settings = GRPOSettings(max_steps=2, num_generations=2, batch_size=2, max_completion_length=16, use_cpu=True)
    metrics = run_coder_phase(str(tiny), problems, "triton", tmp_path / "out", settings, pool, CFG)
    assert metrics["steps"] == 2
    # the compute the Coder's controls match: 2 steps of 2 completions, each prompt's tokens and its own (<= 16)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny)
    prompt = functools.partial(build_prompt, language="triton", template="kernelbench")
    prompts = sum(
        len(tok.apply_chat_template(prompt(p), add_generation_prompt=True, tokenize=True)["input_ids"])
        for p in problems
    )
    assert metrics["sequences"] == 4 and 2 * prompts < metrics["tokens"] <= 2 * prompts + 4 * 16
    # where the phase's time went: generation (both steps' generate calls), reward evaluation, the rest (updates)
    assert metrics["generation_seconds"] > 0 and metrics["eval_seconds"] > 0 and metrics["update_seconds"] > 0
    total = metrics["generation_seconds"] + metrics["eval_seconds"] + metrics["update_seconds"]
    assert total == pytest.approx(metrics["train_seconds"], abs=0.01)
    rows = [json.loads(x) for x in (tmp_path / "out" / "rewards.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(sum(r["statuses"].values()) == 2 for r in rows)
    assert (tmp_path / "out" / "model.safetensors").exists()


def test_reward_prepares_candidates_before_the_pool_evaluates_them(pool, problems, tmp_path, plugins):
    from tests.fakes_hooks import PREPARE_RECORDER

    plugins("tests.fakes_hooks:PREPARE_RECORDER")  # on the manager the reward reaches by default
    PREPARE_RECORDER.calls.clear()
    reward = CoderReward(problems, "triton", pool, CFG, CAGRPOConfig(tau=0.5), tmp_path / "r.jsonl")
    good = [{"role": "assistant", "content": f"```python\n{fakes_policy.SOLUTION}```"}]
    reward(prompts=[[]] * 2, completions=[good, good], problem=["1_ReLU", "3_Sigmoid"], level=[1, 1])
    ((language, sources, config, _),) = PREPARE_RECORDER.calls
    assert language == "triton" and config == CFG
    assert sources == [fakes_policy.SOLUTION] * 2

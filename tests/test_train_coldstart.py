"""Cold start: distillation keeps only verified-correct teacher outputs and writes a prompt/completion SFT
dataset with provenance; SFT on it with TRL lowers the loss of a tiny model and saves a checkpoint."""

from __future__ import annotations

import json

import pytest

from kzcore.problems import load_problems
from kzcore.train.distill import distill
from kzcore.types import EvalConfig
from tests import fakes_policy
from tests.tinymodel import build_tiny_checkpoint


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny"))


def test_distill_from_reference_solutions_keeps_the_correct_ones(plugins, tmp_path, own_workers):
    pm = plugins("kz_triton")
    problems = [p for p in load_problems("builtin:1") if p.name in ("1_ReLU", "2_GELU")]
    summary = distill(problems, ["triton"], tmp_path, EvalConfig(trials=2), solutions="builtin", workers=1, pm=pm)
    assert (summary.candidates, summary.correct, summary.kept) == (2, 2, 2)
    rows = [json.loads(x) for x in (tmp_path / "sft.jsonl").read_text().splitlines()]
    assert {r["problem"] for r in rows} == {"1_ReLU", "2_GELU"}
    row = rows[0]
    assert row["prompt"][0]["role"] == "system" and "Tiling" in row["prompt"][-1]["content"]
    assert row["completion"][0]["role"] == "assistant" and "class ModelNew" in row["completion"][0]["content"]
    assert row["provenance"]["teacher"] == "solutions:builtin"


def test_distill_from_a_teacher_policy_filters_by_the_verifier(plugins, tmp_path, own_workers):
    pm = plugins("kz_triton", "tests.fakes_policy")
    problems = [p for p in load_problems("builtin:1") if p.name in ("1_ReLU", "3_Sigmoid")]
    summary = distill(
        problems,
        ["triton"],
        tmp_path,
        EvalConfig(trials=2),
        teacher=fakes_policy.ScriptedPolicy(),
        k=2,
        workers=1,
        pm=pm,
    )
    # the scripted teacher solves ReLU (2 samples) and answers Sigmoid with prose (2 format errors)
    assert (summary.candidates, summary.correct, summary.kept) == (4, 2, 2)
    rows = [json.loads(x) for x in (tmp_path / "sft.jsonl").read_text().splitlines()]
    assert {r["problem"] for r in rows} == {"1_ReLU"} and rows[0]["provenance"]["teacher"] == "scripted"


def test_only_faster_keeps_nothing_untimed(plugins, tmp_path, own_workers):
    pm = plugins("kz_triton")
    problems = [p for p in load_problems("builtin:1") if p.name == "1_ReLU"]
    summary = distill(
        problems, ["triton"], tmp_path, EvalConfig(trials=1), solutions="builtin", only_faster=True, workers=1, pm=pm
    )
    assert summary.kept == 0 and "nothing was timed" in summary.note


def test_sft_lowers_loss_and_saves(plugins, tmp_path, tiny, own_workers, training):
    from kzcore.train.sft import SFTSettings, run_sft

    pm = plugins("kz_triton")
    problems = [p for p in load_problems("builtin:1") if p.name in ("1_ReLU", "3_Sigmoid")]
    distill(problems, ["triton"], tmp_path / "d", EvalConfig(trials=1), solutions="builtin", workers=1, pm=pm)
    settings = SFTSettings(max_steps=6, learning_rate=5e-3, batch_size=2, use_cpu=True, max_length=2048)
    metrics = run_sft(str(tiny), tmp_path / "d" / "sft.jsonl", tmp_path / "out", settings)
    assert metrics["steps"] == 6 and metrics["examples"] == 2
    assert metrics["loss_last"] < metrics["loss_first"]
    assert (tmp_path / "out" / "config.json").exists() and (tmp_path / "out" / "tokenizer.json").exists()

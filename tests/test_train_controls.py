"""The Coder phase's controls at the same compute without RL (``[coder] method``, kzcore.train.controls): "sft"
continues SFT on the distilled set, "rft" fine-tunes on the Coder's verified samples of the CA-GRPO draw; each
trains the Coder phase's steps of its batch, records the compute, and the held-out scoring follows."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

from kzcore.policy import Completion
from kzcore.problems import load_problems
from kzcore.train.coder import GRPOSettings
from kzcore.train.config import (
    CoderSection,
    HeldoutSection,
    ModelsSection,
    PluginsSection,
    ProblemsSection,
    PromptsSection,
    RunSection,
    TrainConfig,
)
from kzcore.train.context import RunContext
from kzcore.train.controls import control_settings, lay_out
from kzcore.train.schedule import Schedule
from kzcore.train.sft import SFTSettings
from kzcore.train.trainer import Trainer
from kzcore.types import EvalConfig
from tests import fakes_policy
from tests.tinymodel import build_tiny_checkpoint

# ReLU with the wrong threshold: a fenced module that compiles and runs, and that only the verifier can reject
WRONG = fakes_policy.SOLUTION.replace("tl.maximum(x, 0.0)", "tl.maximum(x, 0.5)")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny"))


def config(tmp_path, tiny, method: str, **schedule) -> TrainConfig:
    """A run of one round whose Coder phase trains 2 steps of 4 sequences (2 prompts x 2 generations) by
    ``method``; [sft] micro-batches of 1, so a control accumulates 4 of them per step; no Proposer phase unless
    ``schedule`` asks for one."""
    return TrainConfig(
        run=RunSection(dir=str(tmp_path / "run")),
        models=ModelsSection(coder=str(tiny)),
        plugins=PluginsSection(workers=1),
        problems=ProblemsSection(
            coldstart="builtin:1", tasks="builtin:1", heldout="builtin:1", heldout_names=("3_Sigmoid",)
        ),
        prompts=PromptsSection(coder_template="kernelbench"),  # the short prompt: rows under [sft] max_length
        schedule=Schedule(**{"rounds": 1, "proposer_steps": 0, "coder_steps": 2, **schedule}),
        sft=SFTSettings(max_steps=1, batch_size=1, use_cpu=True, max_length=2048),
        coder=CoderSection(
            num_generations=2, batch_size=4, max_completion_length=16, use_cpu=True, method=method, seed=3
        ),
        proposer_grpo=GRPOSettings(num_generations=2, batch_size=2, max_completion_length=16, use_cpu=True),
        eval=EvalConfig(trials=1, timeout_s=60),
        heldout=HeldoutSection(n=2, k=(1, 2), max_new_tokens=16, base=False),
    )


def read_rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def sequence_tokens(tiny: Path, rows: list[dict], max_length: int) -> int:
    """The tokens of each row's prompt and completion as one chat, cut at ``max_length``, summed: what SFT
    trains on, padding aside."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny)
    chats = [tok.apply_chat_template(r["prompt"] + r["completion"], tokenize=True)["input_ids"] for r in rows]
    return sum(min(len(ids), max_length) for ids in chats)


def weights(model: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(model / "model.safetensors")


def test_a_controls_sft_trains_the_coders_batch_in_sft_sized_micro_batches():
    coder = CoderSection(batch_size=32, num_generations=8, seed=5, use_cpu=True, save_minutes=2.0)
    settings = control_settings(SFTSettings(batch_size=8, learning_rate=1e-4), coder, steps=6)
    assert (settings.max_steps, settings.batch_size, settings.grad_accum) == (6, 8, 4)
    assert (settings.seed, settings.use_cpu, settings.save_minutes, settings.learning_rate) == (5, True, 2.0, 1e-4)
    # a micro-batch that does not divide the Coder's batch: the largest that does, below it
    odd = control_settings(SFTSettings(batch_size=4), attrs.evolve(coder, batch_size=6), steps=1)
    assert (odd.batch_size, odd.grad_accum) == (3, 2)


def test_laid_out_rows_fill_every_step_and_continue_through_the_data():
    rows = [{"i": i} for i in range(5)]
    first = lay_out(rows, 12, "s")
    assert len(first) == 12
    # whole passes, each a permutation of the rows in its own order
    assert sorted(r["i"] for r in first[:5]) == sorted(r["i"] for r in first[5:10]) == list(range(5))
    assert [r["i"] for r in first[:5]] != [r["i"] for r in first[5:10]]
    # a later phase starts where the earlier stopped: together they are one longer layout
    assert first + lay_out(rows, 7, "s", start=12) == lay_out(rows, 19, "s")
    assert lay_out(rows, 12, "s") == first and lay_out(rows, 12, "t") != first  # seeded


def test_the_sft_control_continues_sft_for_the_coders_steps_and_batch(plugins, tmp_path, tiny, monkeypatch, training):
    """``method = "sft"``: after the cold start and a (frozen) Proposer phase, the Coder phase is SFT of the SFT
    phase's model on rows of the distilled set, 2 optimizer steps x 4 sequences, each row a distinct distilled
    row; its metrics count the steps, sequences and tokens; the held-out scoring follows."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("KZ_CACHE", str(tmp_path / "cache"))
    pm = plugins("kz_triton", "kz_models", "tests.fakes_hooks:FAKE_EXECUTORS")
    cfg = config(tmp_path, tiny, "sft", proposer_steps=1, freeze_proposer_at_step=0)
    cfg = attrs.evolve(
        cfg,
        plugins=attrs.evolve(cfg.plugins, executor="inline"),  # every candidate correct
        sft=attrs.evolve(cfg.sft, max_length=4096),  # the distilled rows whole (the tiny model's context)
    )
    state = Trainer(cfg, pm=pm, log=lambda s: None).run()
    run = tmp_path / "run"
    assert state["done"] == ["00-distill", "00-sft", "01-proposer", "01-coder"]
    m = state["metrics"]["01-coder"]
    assert m["method"] == "sft" and m["steps"] == 2 and m["sequences"] == 2 * 4
    distilled = read_rows(run / "phases" / "00-distill" / "sft.jsonl")
    assert m["source_rows"] == len(distilled) == 26
    trained = read_rows(run / "phases" / "01-coder" / "sft-rows.jsonl")
    pairs = {json.dumps([r["prompt"], r["completion"]]) for r in distilled}
    assert len(trained) == 8 and all(json.dumps([r["prompt"], r["completion"]]) in pairs for r in trained)
    assert len({json.dumps(r) for r in trained}) == 8  # one pass: no row twice
    assert m["tokens"] == sequence_tokens(tiny, trained, cfg.sft.max_length)
    # it started from the SFT phase's model, and trained it
    control = json.loads((run / "phases" / "01-coder" / "control.json").read_text())
    assert control["identity"]["model"] == str(run / "phases" / "00-sft" / "model")
    before, after = weights(run / "phases" / "00-sft" / "model"), weights(run / "phases" / "01-coder" / "model")
    assert any(not before[k].equal(after[k]) for k in before)
    # no task drawn, no pass rate measured; held-out scoring after the phase as after a CA-GRPO one
    assert "tasks_measured" not in m and not (run / "task_rates.jsonl").exists()
    assert [r["phase"] for r in read_rows(run / "heldout.jsonl")] == ["00-sft", "01-coder"]
    assert "heldout_pass@1" in m


class HalfRightPolicy:
    """Answers ReLU with the reference solution in its even samples and a wrong ReLU in its odd ones, everything
    else with prose; records the checkpoint it samples and its calls."""

    name = "half-right"
    calls: list[int] = []
    checkpoints: list[str] = []

    def generate(self, prompts, params):
        HalfRightPolicy.calls.append(len(prompts))
        out = []
        for i, chat in enumerate(prompts):
            relu = "torch.relu" in chat[-1]["content"]
            texts = [(fakes_policy.SOLUTION if s % 2 == 0 else WRONG) if relu else "I cannot." for s in range(params.n)]
            out.append(
                [Completion(text=f"```python\n{t}```", prompt_index=i, sample_index=s) for s, t in enumerate(texts)]
            )
        return out

    def close(self):
        """Nothing to release: the answers are written in the test."""


def sample_with(policy_class, monkeypatch):
    """Every sampling of a checkpoint in the run (the rft draw, held-out scoring) through ``policy_class``."""
    policy_class.calls.clear()
    policy_class.checkpoints.clear()

    def policy_for(self, checkpoint):
        policy_class.checkpoints.append(str(checkpoint))
        return policy_class()

    monkeypatch.setattr(RunContext, "policy_for", policy_for)


def rft_trainer(plugins, tmp_path, tiny, monkeypatch, log) -> tuple[Trainer, list]:
    """A Trainer of the "rft" control with no cold start, whose Coder tasks are ReLU and GELU, and the draw of
    its Coder phase (2 steps x 2 prompts) as a CA-GRPO phase would make it."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    pm = plugins("kz_triton", "kz_models")
    trainer = Trainer(config(tmp_path, tiny, "rft", cold_start=False), pm=pm, log=log)
    trainer.problems.tasks = [p for p in load_problems("builtin:1", pm=pm) if p.name in ("1_ReLU", "2_GELU")]
    drawn, _ = trainer.problems.coder_tasks(2 * 2, round=1)
    return trainer, [p.name for p in drawn]


def test_the_rft_control_fine_tunes_on_the_verified_samples_of_the_coders_draw(
    plugins, tmp_path, tiny, monkeypatch, training
):
    """``method = "rft"``: the CA-GRPO draw's tasks, 2 samples each from the current Coder, judged by the
    evaluator (a wrong ReLU that runs is rejected, prose too); only the correct ones are trained on, for the
    Coder phase's 2 steps x 4 sequences; the verdicts become the tasks' pass rates; held-out scoring follows.
    A rerun after the phase trained (killed in its held-out scoring) samples and trains nothing again."""
    lines: list[str] = []
    sample_with(HalfRightPolicy, monkeypatch)
    trainer, drawn = rft_trainer(plugins, tmp_path, tiny, monkeypatch, lines.append)
    assert "1_ReLU" in drawn and "2_GELU" in drawn and len(set(drawn)) < len(drawn)  # repeats: m groups each
    state = trainer.run()
    run, phase = tmp_path / "run", tmp_path / "run" / "phases" / "01-coder"
    assert state["done"] == ["01-coder"]
    m = state["metrics"]["01-coder"]
    assert [t["name"] for t in json.loads((phase / "rft" / "draw.json").read_text())["tasks"]] == drawn
    relu_samples = 2 * drawn.count("1_ReLU")
    assert m["method"] == "rft" and m["samples"] == 2 * len(drawn)
    assert m["correct"] == m["kept"] == relu_samples // 2 and m["correct_rate"] == m["correct"] / m["samples"]
    verdicts = [r for f in phase.joinpath("rft").glob("*results-triton.jsonl") for r in read_rows(f) if "status" in r]
    statuses = sorted(r["status"] for r in verdicts if r["problem"] == "1_ReLU")
    assert statuses == ["correct"] * (relu_samples // 2) + ["incorrect"] * (relu_samples // 2)
    kept = read_rows(phase / "rft" / "kept.jsonl")
    assert kept and all(r["problem"] == "1_ReLU" for r in kept)
    assert all(fakes_policy.SOLUTION in r["completion"][-1]["content"] for r in kept)
    assert not any(WRONG in r["completion"][-1]["content"] for r in kept)
    assert all(r["prompt"] == trainer.context.coder_prompt(trainer.problems.tasks[0]) for r in kept)
    # 2 optimizer steps of 4 sequences, every one a kept row; tokens as SFT counts them
    trained = read_rows(phase / "sft-rows.jsonl")
    assert m["steps"] == 2 and m["sequences"] == len(trained) == 8
    assert {json.dumps(r) for r in trained} <= {json.dumps(r) for r in kept}
    assert m["tokens"] == sequence_tokens(tiny, trained, trainer.config.sft.max_length)
    before, after = weights(tiny), weights(phase / "model")
    assert any(not before[k].equal(after[k]) for k in before)
    # the base model was sampled (the current Coder), then the phase's model for the held-out scoring
    assert HalfRightPolicy.checkpoints == [str(tiny), str(phase / "model")]
    # each task's verdicts: its pass rate for the round
    rates = {r["task"]: r["passed"] / r["k"] for r in read_rows(run / "task_rates.jsonl")}
    assert rates == {"1/1_ReLU": 0.5, "1/2_GELU": 0.0} and m["tasks_measured"] == 2
    assert [r["phase"] for r in read_rows(run / "heldout.jsonl")] == ["01-coder"] and "heldout_pass@1" in m
    # killed in the held-out scoring: the same command again finds the samples, verdicts and model on disk
    stamp = (phase / "model" / "model.safetensors").stat().st_mtime_ns
    (run / "state.json").write_text(json.dumps({"done": [], "metrics": {}}))
    HalfRightPolicy.calls.clear()
    again = Trainer(trainer.config, pm=trainer.pm, log=lines.append)  # [problems] tasks: all 26 of builtin:1
    redone = again.run()["metrics"]["01-coder"]
    assert HalfRightPolicy.calls == [] and "rft control: trained in an earlier run" in "\n".join(lines)
    assert (phase / "model" / "model.safetensors").stat().st_mtime_ns == stamp
    assert redone["task_sources"] == m["task_sources"]  # the first draw, not a new one
    assert {k: redone[k] for k in ("steps", "sequences", "tokens", "kept")} == {
        k: m[k] for k in ("steps", "sequences", "tokens", "kept")
    }


class NeverRightPolicy(HalfRightPolicy):
    """Prose for every prompt: nothing the evaluator can file correct."""

    calls: list[int] = []
    checkpoints: list[str] = []

    def generate(self, prompts, params):
        NeverRightPolicy.calls.append(len(prompts))
        return [
            [Completion(text="I cannot.", prompt_index=i, sample_index=s) for s in range(params.n)]
            for i in range(len(prompts))
        ]


def test_an_rft_phase_with_no_correct_sample_says_so_and_leaves_the_coder_as_it_was(
    plugins, tmp_path, tiny, monkeypatch, training
):
    lines: list[str] = []
    sample_with(NeverRightPolicy, monkeypatch)
    trainer, drawn = rft_trainer(plugins, tmp_path, tiny, monkeypatch, lines.append)
    state = trainer.run()
    m = state["metrics"]["01-coder"]
    phase = tmp_path / "run" / "phases" / "01-coder"
    assert state["done"] == ["01-coder"] and m["method"] == "rft"
    assert (m["samples"], m["correct"], m["kept"], m["steps"], m["sequences"], m["tokens"]) == (8, 0, 0, 0, 0, 0)
    assert "nothing trained" in m["note"]
    assert any("rft: 0 of 8 samples correct, nothing to fine-tune on" in line for line in lines)
    assert not (phase / "sft-rows.jsonl").exists()
    # the phase's model is the one it started from, where a Coder phase's model goes, and held-out scores it
    assert weights(phase / "model").keys() == weights(tiny).keys()
    assert all(weights(phase / "model")[k].equal(v) for k, v in weights(tiny).items())
    assert trainer.checkpoints.latest("coder") == str(phase / "model")
    assert NeverRightPolicy.checkpoints == [str(tiny), str(phase / "model")]
    assert "heldout_pass@1" in m and m["heldout_pass@1"] == 0.0

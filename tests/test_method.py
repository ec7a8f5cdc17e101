"""The trainer against the method (KernelZero): the schedule's defaults, the Coder's task mix (the
Proposer's newest batch by default), the Coder's measured pass rates fed back to the pool and the API-set
weighting, separate Proposer and Coder models, and one Coder prompt in SFT data, RL, pass-rate sampling and
held-out evaluation. docs/training.md's "method vs code" table points here."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

from kz_suites import BUILTIN_SUITE
from kzcore.problems import load_problems
from kzcore.proposer.catalog import load_catalog
from kzcore.proposer.gates import GATE_ORDER, GateResult
from kzcore.proposer.pool import TaskRecord, append_records, read_pool
from kzcore.proposer.sampler import api_weights
from kzcore.sampling import prompt_sha
from kzcore.train import trainer as trainer_module
from kzcore.train.coder import task_dataset
from kzcore.train.config import (
    HeldoutSection,
    ModelsSection,
    PluginsSection,
    ProblemsSection,
    TaskMixSection,
    TrainConfig,
    load_config,
)
from kzcore.train.schedule import Schedule
from kzcore.train.trainer import Trainer
from kzcore.types import EvalConfig, Phase
from tests import fakes_policy
from tests.tinymodel import build_tiny_checkpoint

ROOT = Path(__file__).resolve().parent.parent
RELU = str(BUILTIN_SUITE / "level1/1_ReLU.py")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def tiny2(tmp_path_factory):
    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny2"), hidden=48)


def make_trainer(tmp_path, tiny, pm, **sections) -> Trainer:
    cfg = TrainConfig(
        models=ModelsSection(coder=str(tiny)),
        plugins=PluginsSection(workers=1, generation="recording"),
        problems=ProblemsSection(coldstart=RELU, tasks="builtin:1", heldout=RELU, exclude_heldout=False),
        eval=EvalConfig(trials=1, timeout_s=60),
        heldout=HeldoutSection(n=2, k=(1, 2, 10)),
    )
    cfg = attrs.evolve(cfg, run=attrs.evolve(cfg.run, dir=str(tmp_path / "run")), **sections)
    return Trainer(cfg, pm=pm, log=lambda s: None)


# -- schedule --------------------------------------------------------------------------------------
def test_schedule_defaults_are_the_methods():
    s = Schedule()
    assert (s.rounds, s.proposer_steps, s.coder_steps, s.cold_start) == (4, 20, 20, True)
    roles = [(p.role, p.round, p.steps) for p in s.phases()]
    assert roles[:2] == [("distill", 0, 0), ("sft", 0, 0)]
    assert roles[2:] == [(r, n, 20) for n in range(1, 5) for r in ("proposer", "coder")]


def test_freeze_proposer_at_step_40_as_the_method_does():
    phases = Schedule(freeze_proposer_at_step=40).phases()
    # the Proposer trains 40 steps (rounds 1 and 2), then proposes with frozen weights; the Coder goes on
    assert [(p.round, p.steps, p.frozen) for p in phases if p.role == "proposer"] == [
        (1, 20, False), (2, 20, False), (3, 20, True), (4, 20, True),
    ]  # fmt: skip
    assert [p.round for p in phases if p.role == "coder"] == [1, 2, 3, 4]
    cut = Schedule(proposer_steps=20, freeze_proposer_at_step=30).phases()
    assert [(p.round, p.steps, p.frozen) for p in cut if p.role == "proposer"][:3] == [
        (1, 20, False), (2, 10, False), (3, 20, True),
    ]  # fmt: skip


def test_shipped_ablation_configs(tmp_path):
    taus = {}
    for path in sorted((ROOT / "configs" / "ablations").glob("tau-*.toml")):
        taus[path.stem] = load_config(path).ca_grpo.tau
    assert taus == {"tau-0": 0.0, "tau-0.25": 0.25, "tau-0.5": 0.5, "tau-1.1": 1.1}
    frozen = load_config(ROOT / "configs" / "ablations" / "frozen-proposer.toml")
    assert frozen.schedule.freeze_proposer_at_step == 40
    full = load_config(ROOT / "configs" / "kernelzero-8gpu.toml")
    assert full.models.proposer != "same"  # the method trains two models
    assert len(full.problems.heldout) == 2 and full.heldout.n >= 10 and 10 in full.heldout.k


# -- the Coder's tasks -----------------------------------------------------------------------------
def record(i: int, round: int, passed: int | None = None, apis=("ReLU",)) -> TaskRecord:
    from kzcore.proposer.pool import PassRate

    source = Path(RELU).read_text()
    return TaskRecord(
        id=f"t{i}", apis=apis, level=1, code=source.replace("torch.relu(x)", f"torch.relu(x) * {i + 2}"),
        gates={name: GateResult(True) for name in GATE_ORDER},
        pass_rates=() if passed is None else (PassRate(round, 4, passed),), provenance={"round": round},
    )  # fmt: skip


def test_coder_tasks_default_to_the_newest_accepted_batch(plugins, tmp_path, tiny):
    trainer = make_trainer(tmp_path, tiny, plugins("kz_triton"))
    append_records(trainer.problems.pool_path, [record(i, 1) for i in range(3)] + [record(i, 2) for i in range(3, 6)])
    tasks, sources = trainer.problems.coder_tasks(6, round=2)
    assert sources == {"newest": 6}
    names = [t.name for t in tasks]
    assert sorted(names) == sorted(f"proposed_t{i}" for i in (3, 4, 5, 3, 4, 5))  # each once before repeats
    assert len(set(names[:3])) == 3


def test_coder_task_mix_shares(plugins, tmp_path, tiny):
    trainer = make_trainer(tmp_path, tiny, plugins("kz_triton"), task_mix=TaskMixSection(older=0.5, builtin=0.25))
    append_records(trainer.problems.pool_path, [record(i, 1) for i in range(3)] + [record(i, 2) for i in range(3, 6)])
    tasks, sources = trainer.problems.coder_tasks(8, round=2)
    assert sources == {"older": 4, "builtin": 2, "newest": 2}
    names = [t.name for t in tasks]
    assert sum(n in {"proposed_t0", "proposed_t1", "proposed_t2"} for n in names) == 4
    assert sum(not n.startswith("proposed_") for n in names) == 2
    # no newest batch (a frozen Proposer): its share goes to the older pool tasks, then the built-in ones
    _, sources = trainer.problems.coder_tasks(8, round=3)
    assert sources == {"older": 6, "builtin": 2}
    with pytest.raises(ValueError):
        TaskMixSection(older=0.8, builtin=0.5)


def test_coder_tasks_from_the_verified_cold_start(plugins, tmp_path, tiny):
    from kzcore.errors import KzError
    from kzcore.problems import load_problems
    from kzcore.train.distill import write_verified_problems

    problems = {p.name: p for p in load_problems("builtin:1")}
    trainer = make_trainer(
        tmp_path, tiny, plugins("kz_triton"),
        problems=ProblemsSection(coldstart=RELU, tasks="coldstart", heldout=RELU, heldout_names=("1_ReLU",)),
    )  # fmt: skip
    with pytest.raises(KzError, match='tasks = "coldstart" needs the distill phase'):
        _ = trainer.problems.tasks

    def row(problem, language, chars=100):
        return {"problem": problem, "level": 1, "language": language, "completion": [{"content": "x" * chars}]}

    rows = [
        row("1_ReLU", "triton"),  # held out: never a task
        row("2_GELU", "triton", 900),
        row("2_GELU", "triton", 700),  # the shortest verified answer counts
        row("2_GELU", "cuda", 5000),
        row("3_Sigmoid", "cuda"),  # verified in CUDA only: not a Triton task
        row("4_LeakyReLU", "triton", 2000),
    ]
    distilled = tmp_path / "run" / "phases" / "00-distill"
    distilled.mkdir(parents=True)
    write_verified_problems(distilled / "problems.jsonl", list(problems.values()), rows)
    assert [p.name for p in trainer.problems.tasks] == ["2_GELU", "4_LeakyReLU"]
    assert trainer.problems.tasks[0].source == problems["2_GELU"].source
    # a curriculum by solution length: only problems whose shortest verified Triton answer fits
    short = attrs.evolve(trainer.config.problems, task_max_solution_chars=1000)
    trainer = make_trainer(tmp_path, tiny, trainer.pm, problems=short)
    assert [p.name for p in trainer.problems.tasks] == ["2_GELU"]
    tasks, sources = trainer.problems.coder_tasks(3, round=1)
    assert sources == {"builtin": 3} and {t.name for t in tasks} == {"2_GELU"}
    none_fit = attrs.evolve(short, task_max_solution_chars=10)
    with pytest.raises(KzError, match="no cold-start problem verified in triton with a solution of <= 10"):
        _ = make_trainer(tmp_path, tiny, trainer.pm, problems=none_fit).problems.tasks


def test_coder_pass_rates_go_back_to_the_pool_and_the_api_weights(plugins, tmp_path, tiny):
    trainer = make_trainer(tmp_path, tiny, plugins("kz_triton"))
    append_records(trainer.problems.pool_path, [record(0, 1, passed=2, apis=("Tanh",)), record(1, 1, passed=2)])
    before = api_weights(load_catalog(), read_pool(trainer.problems.pool_path))
    # the Coder phase of round 1 saw t0 fail 8 of 8 and t1 pass 8 of 8; a built-in task 3 of 4
    tally = {"1/proposed_t0": [0, 8], "1/proposed_t1": [8, 8], "1/3_Sigmoid": [3, 4]}
    assert trainer.problems.record_pass_rates(Phase("coder", 2, 1), tally) == 3
    pool = {r.id: r for r in read_pool(trainer.problems.pool_path)}
    assert pool["t0"].latest_pass_rate == 0.0 and pool["t1"].latest_pass_rate == 1.0
    assert [p.round for p in pool["t0"].pass_rates] == [1, 2]
    assert trainer.problems.task_rates()["1/3_Sigmoid"] == 0.75
    after = api_weights(load_catalog(), read_pool(trainer.problems.pool_path))
    assert after["Tanh"] > before["Tanh"]  # the failed API set is now aimed at


# -- separate models -------------------------------------------------------------------------------
def test_separate_proposer_model(plugins, tmp_path, tiny, tiny2):
    pm = plugins("kz_triton", "kz_models")
    trainer = make_trainer(tmp_path, tiny, pm, models=ModelsSection(coder=str(tiny), proposer=f"hf:{tiny2}"))
    assert trainer.checkpoints.proposer_base == str(tiny2)
    assert trainer.checkpoints.latest("proposer") == str(tiny2)
    assert trainer.checkpoints.latest("coder") == str(tiny)
    run = tmp_path / "run"
    for pid in ("00-sft", "01-proposer"):
        (run / "phases" / pid / "model").mkdir(parents=True)
        (run / "phases" / pid / "model" / "config.json").write_text("{}")
    (run / "state.json").write_text(json.dumps({"done": ["00-distill", "00-sft", "01-proposer"], "metrics": {}}))
    assert trainer.checkpoints.latest("coder") == str(run / "phases" / "00-sft" / "model")
    assert trainer.checkpoints.latest("proposer") == str(run / "phases" / "01-proposer" / "model")


# -- one Coder prompt ------------------------------------------------------------------------------
def test_one_coder_prompt_in_sft_rl_pass_rates_and_heldout(plugins, tmp_path, tiny, monkeypatch, training):
    pm = plugins("kz_triton", "kz_models", "tests.fakes_policy")
    trainer = make_trainer(tmp_path, tiny, pm)
    (relu,) = load_problems(RELU, pm=pm)
    expected = trainer.context.coder_prompt(relu)
    assert "tiling" in json.dumps(expected).lower()  # the configured (principles) template, not the default
    # 1. SFT data
    trainer.distill(Phase("distill", 0, 0), tmp_path / "distill")
    (row,) = [json.loads(x) for x in (tmp_path / "distill" / "sft.jsonl").read_text().splitlines()]
    assert row["prompt"] == expected
    # 2. RL: the dataset the Coder phase hands GRPO
    seen = {}

    def fake_coder_phase(
        model, problems, language, output_dir, settings, executor, eval_config, ca, prompt_for, pm, **kw
    ):
        seen["prompts"] = task_dataset(problems, prompt_for)["prompt"]
        return {}

    monkeypatch.setattr(trainer_module, "run_coder_phase", fake_coder_phase)
    monkeypatch.setattr(trainer, "evaluate_heldout", lambda phase, ckpt: {})
    monkeypatch.setattr(trainer.problems, "tasks", [relu])
    trainer.coder(Phase("coder", 1, 1), tmp_path / "coder")
    assert seen["prompts"] and all(p == expected for p in seen["prompts"])
    # 3. the Proposer phase's pass-rate sampling of the current Coder
    from kzcore.train import proposer_phase

    captured = {}
    monkeypatch.setattr(
        proposer_phase, "run_grpo", lambda model, data, funcs, s, out, pm=None, **kw: captured.update(f=funcs[0]) or {}
    )
    trainer.proposer(Phase("proposer", 1, 1), tmp_path / "proposer")
    task = attrs.evolve(record(0, 1), code=relu.source)
    fakes_policy.PROMPTS.clear()
    monkeypatch.setattr(proposer_phase, "map_prepared", lambda executor, jobs: [])
    captured["f"].coder = trainer.context.policy_for(trainer.checkpoints.base)
    captured["f"].with_pass_rates([task])
    assert fakes_policy.PROMPTS and all(p == expected for p in fakes_policy.PROMPTS)
    # 4. held-out evaluation
    fakes_policy.PROMPTS.clear()
    monkeypatch.undo()
    metrics = trainer.evaluate_heldout(Phase("base", 0, 0), Path(trainer.checkpoints.base))
    assert fakes_policy.PROMPTS and all(p == expected for p in fakes_policy.PROMPTS)
    rows = [json.loads(x) for x in (tmp_path / "run/heldout/00-base/completions-triton.jsonl").read_text().splitlines()]
    assert {r["prompt_sha"] for r in rows} == {prompt_sha(expected)}
    # held-out metrics: per language and level, pass@k only for k <= n, and the verdict mix
    assert metrics["heldout_pass@1"] == metrics["heldout_triton_pass@1"] == 1.0  # the scripted policy solves ReLU
    assert "heldout_triton_l1_pass@2" in metrics and "heldout_pass@10" not in metrics
    assert metrics["heldout_triton_statuses"] == {"correct": 2}

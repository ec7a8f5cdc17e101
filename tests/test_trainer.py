"""The alternating trainer end to end on a tiny model: distill (reference solutions) -> SFT -> Proposer
GRPO -> Coder GRPO -> held-out evaluation, every phase's checkpoint saved, logs and plots written, and
the Proposer's modules filed in the task pool."""

from __future__ import annotations

import json
import types

import attrs
import pytest

from kzcore.cli import main
from kzcore.errors import KzError
from kzcore.train.ca_grpo import CAGRPOConfig
from kzcore.train.coder import GRPOSettings
from kzcore.train.config import (
    HeldoutSection,
    ModelsSection,
    PluginsSection,
    ProblemsSection,
    ProposerSection,
    RunSection,
    TaskMixSection,
    TrainConfig,
)
from kzcore.train.schedule import Schedule
from kzcore.train.sft import SFTSettings
from kzcore.train.trainer import Trainer
from kzcore.types import EvalConfig
from tests.tinymodel import build_tiny_checkpoint


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny"))


def config(tmp_path, tiny) -> TrainConfig:
    grpo = GRPOSettings(num_generations=2, batch_size=2, max_completion_length=16, use_cpu=True)
    return TrainConfig(
        run=RunSection(dir=str(tmp_path / "run")),
        models=ModelsSection(coder=str(tiny)),
        plugins=PluginsSection(workers=1),
        problems=ProblemsSection(
            coldstart="builtin:1", tasks="builtin:1", heldout="builtin:1", heldout_names=("1_ReLU",)
        ),
        schedule=Schedule(rounds=1, proposer_steps=1, coder_steps=1),
        sft=SFTSettings(max_steps=1, batch_size=1, use_cpu=True, max_length=2048),
        coder=grpo,
        ca_grpo=CAGRPOConfig(),
        proposer=ProposerSection(k=2),
        proposer_grpo=grpo,
        eval=EvalConfig(trials=1, timeout_s=60),
        heldout=HeldoutSection(n=2, k=(1, 2), max_new_tokens=16),
    )


def inline_cold_start(plugins, tmp_path, tiny, monkeypatch, **heldout) -> tuple:
    """(plugin manager, config) for a run of the cold start only (distill, SFT) through the test's inline
    executor (``tests.fakes_hooks.InlineExecutor``, which records every job), ``[heldout]`` settings changed
    by ``heldout``."""
    from tests import fakes_hooks

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("KZ_CACHE", str(tmp_path / "cache"))  # the fake executor's made-up problem checks stay here
    pm = plugins("kz_triton", "kz_models", "tests.fakes_hooks:FAKE_EXECUTORS")
    fakes_hooks.InlineExecutor.instances.clear()
    cfg = config(tmp_path, tiny)
    cfg = attrs.evolve(
        cfg,
        plugins=attrs.evolve(cfg.plugins, executor="inline"),
        schedule=Schedule(rounds=0, cold_start=True),
        heldout=attrs.evolve(cfg.heldout, **heldout),
    )
    return pm, cfg


def test_one_round_end_to_end(plugins, tmp_path, tiny, monkeypatch, training):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    pm = plugins("kz_triton", "kz_models")
    cfg = config(tmp_path, tiny)
    # as configs/gpu-small.toml does: the Coder's built-in share from the cold start's verified problems with
    # short solutions, GRPO with gradient checkpointing, and a Proposer model of its own with a cold start
    cfg = attrs.evolve(
        cfg,
        models=attrs.evolve(cfg.models, proposer=str(tiny)),
        problems=attrs.evolve(cfg.problems, tasks="coldstart", task_max_solution_chars=1500),
        coder=attrs.evolve(cfg.coder, gradient_checkpointing=True),
        proposer=attrs.evolve(cfg.proposer, cold_start_steps=1),
        task_mix=attrs.evolve(cfg.task_mix, calibrate=1),  # and the first round's tasks calibrated
        heldout=attrs.evolve(cfg.heldout, probe=1),  # and a training probe
    )
    state = Trainer(cfg, pm=pm, log=lambda s: None).run()
    run = tmp_path / "run"
    assert state["done"] == ["00-distill", "00-sft", "01-proposer", "01-coder"]
    distilled = state["metrics"]["00-distill"]
    assert distilled["kept"] == distilled["correct"] == distilled["candidates"] == 26  # 27 minus held-out ReLU
    # the Proposer's cold start: a row per verified cold-start module (held-out ReLU not among them)
    sft = state["metrics"]["00-sft"]
    assert sft["proposer_sft_rows"] == 26 and sft["proposer_sft_steps"] == 1
    proposer_rows = [json.loads(x) for x in (run / "phases" / "00-sft" / "proposer-sft.jsonl").read_text().splitlines()]
    assert "1_ReLU" not in {r["problem"] for r in proposer_rows}
    # keep_checkpoints = "last-best": the newest model of each role (01-coder, 01-proposer) and the best by
    # held-out pass@1 (all 0 on a tiny model: the earliest, 00-sft) stay; the cold start's Proposer, which
    # 01-proposer started from, is pruned, its logs stay
    for pid in ("00-sft", "01-coder", "01-proposer"):
        assert (run / "phases" / pid / "model" / "model.safetensors").exists(), pid
    pruned = run / "phases" / "00-sft" / "proposer"
    assert not (pruned / "model.safetensors").exists() and (pruned / "config.json.pruned").exists()
    assert (run / "phases" / "01-proposer" / "rewards.jsonl").exists()
    pool = [json.loads(x) for x in (run / "pool.jsonl").read_text().splitlines()]
    assert len(pool) == 2  # one step x one prompt x 2 generations, each filed with its gate verdicts
    assert all(r["gates"] for r in pool)
    coder = state["metrics"]["01-coder"]
    assert coder["steps"] == 1 and "heldout_pass@1" in coder and "heldout_pass@2" in coder
    assert coder["method"] == "ca-grpo" and coder["sequences"] == 2 and coder["tokens"] > 0
    assert coder["calibration_tasks"] >= 1 and "probe_triton_pass@1" in coder
    heldout = [json.loads(x) for x in (run / "heldout.jsonl").read_text().splitlines()]
    assert [h["phase"] for h in heldout] == ["00-base", "00-sft", "01-coder"]  # base, after SFT, after RL
    assert "base_heldout_pass@1" in state["metrics"]["00-sft"] and "heldout_pass@2" in state["metrics"]["00-sft"]
    assert (coder["heldout_problems"], coder["heldout_flagged"]) == (1, 0)  # the problem check kept 1_ReLU
    # the cost of each held-out evaluation: 2 completions sampled now, their tokens, the wall times
    assert coder["heldout_triton_sampled_completions"] == 2 and coder["heldout_triton_generated_tokens"] > 0
    assert coder["heldout_triton_tokens_per_s"] > 0 and coder["heldout_triton_evaluating_s"] >= 0
    assert json.loads((run / "heldout-problems.json").read_text())["problems"] == ["builtin:level1/1_ReLU"]
    assert (run / "curves.png").stat().st_size > 0
    # held-out ReLU never reached distillation or the Coder's tasks
    sft_rows = [json.loads(x) for x in (run / "phases" / "00-distill" / "sft.jsonl").read_text().splitlines()]
    assert "1_ReLU" not in {r["problem"] for r in sft_rows}
    trained_on = [json.loads(x)["problem"] for x in (run / "phases" / "01-coder" / "model" / "tasks.jsonl").read_text().splitlines()]  # fmt: skip
    short = {r["problem"] for r in sft_rows if len(r["completion"][-1]["content"]) <= 1500}
    assert trained_on and set(trained_on) <= short


def test_latest_checkpoint_follows_finished_phases(plugins, tmp_path, tiny):
    pm = plugins("kz_triton", "kz_models")
    cfg = attrs.evolve(config(tmp_path, tiny), problems=ProblemsSection(coldstart="builtin:1", tasks="builtin:1"))
    trainer = Trainer(cfg, pm=pm, log=lambda s: None)
    assert trainer.checkpoints.latest("coder") == str(tiny)
    model = tmp_path / "run" / "phases" / "00-sft" / "model"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (tmp_path / "run" / "state.json").write_text(json.dumps({"done": ["00-distill", "00-sft"], "metrics": {}}))
    assert trainer.checkpoints.latest("coder") == trainer.checkpoints.latest("proposer") == str(model)
    # a Proposer of its own: the base until the cold start trains one (PHASE/proposer), then that
    own = Trainer(attrs.evolve(cfg, models=attrs.evolve(cfg.models, proposer=str(tiny))), pm=pm, log=lambda s: None)
    assert own.checkpoints.latest("coder") == str(model) and own.checkpoints.latest("proposer") == str(tiny)
    cold = tmp_path / "run" / "phases" / "00-sft" / "proposer"
    cold.mkdir()
    (cold / "config.json").write_text("{}")
    assert own.checkpoints.latest("proposer") == str(cold) and own.checkpoints.latest("coder") == str(model)


def test_a_proposer_cold_start_needs_the_proposers_own_model(tmp_path, tiny, capsys):
    cfg = config(tmp_path, tiny)
    with pytest.raises(KzError, match="cold_start_steps trains the Proposer's own model"):
        attrs.evolve(cfg, proposer=attrs.evolve(cfg.proposer, cold_start_steps=5))
    # read from a file, the dry run refuses it too, in one line naming the file
    path = tmp_path / "c.toml"
    path.write_text('[models]\nproposer = "same"\n[proposer]\ncold_start_steps = 4\n')
    assert main(["train", "--config", str(path), "--dry-run"]) != 0
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(path) in err and "cold_start_steps trains the Proposer's own model" in err


def test_the_run_holds_one_executor_the_configured_one(plugins, tmp_path, tiny, monkeypatch, training):
    """Distillation, the held-out evaluations and the RL phases all go through one executor of kind
    ``[plugins] executor``, started once and closed when the run ends (before: distillation and held-out
    evaluation always started a fresh local pool of their own)."""
    from tests import fakes_hooks

    pm, cfg = inline_cold_start(plugins, tmp_path, tiny, monkeypatch)
    state = Trainer(cfg, pm=pm, log=lambda s: None).run()
    assert state["done"] == ["00-distill", "00-sft"]
    (executor,) = fakes_hooks.InlineExecutor.instances
    assert executor.closed and executor.workers == 1 and executor.config == cfg.eval
    candidates = [j for j in executor.jobs if hasattr(j, "candidate")]
    distilled = [j for j in candidates if j.candidate.completion is None]  # the suite's ready sources
    heldout = [j for j in candidates if j.candidate.completion is not None]  # sampled from the model
    assert len(distilled) == state["metrics"]["00-distill"]["candidates"] == 26
    assert {j.problem.name for j in heldout} == {"1_ReLU"} and len(heldout) == 2 * 2  # base and SFT, n = 2


def test_heldout_base_false_skips_the_base_models_evaluation(plugins, tmp_path, tiny, monkeypatch, training):
    """``[heldout] base = false``: a run that repeats a measured base model samples and scores only the SFT
    model (n samples of each held-out problem instead of 2n), and its metrics carry no ``base_`` keys."""
    from tests import fakes_hooks

    pm, cfg = inline_cold_start(plugins, tmp_path, tiny, monkeypatch, base=False)
    state = Trainer(cfg, pm=pm, log=lambda s: None).run()
    (executor,) = fakes_hooks.InlineExecutor.instances
    heldout = [j for j in executor.jobs if hasattr(j, "candidate") and j.candidate.completion is not None]
    assert len(heldout) == 2  # the SFT model's n = 2 samples of 1_ReLU; none from the base model
    assert not [k for k in state["metrics"]["00-sft"] if k.startswith("base_")]
    assert "heldout_pass@1" in state["metrics"]["00-sft"]


def test_a_training_probe_scores_the_same_training_problems_in_every_run(
    plugins, tmp_path, tiny, monkeypatch, training
):
    """``[heldout] probe = N``: at every held-out evaluation, N training problems (never held-out ones) are
    sampled and scored too, in the first language, under ``probe_`` keys and ``probe-`` files; which N is fixed
    by the config, not the run's seed, so seeds and ablations share one training-side curve."""
    from tests import fakes_hooks

    pm, cfg = inline_cold_start(plugins, tmp_path, tiny, monkeypatch, base=False, probe=2)
    trainer = Trainer(cfg, pm=pm, log=lambda s: None)
    probe = {p.name for p in trainer.problems.probe_problems()}
    other_seed = Trainer(attrs.evolve(cfg, run=attrs.evolve(cfg.run, seed=7)), pm=pm, log=lambda s: None)
    assert len(probe) == 2 and probe == {p.name for p in other_seed.problems.probe_problems()} and "1_ReLU" not in probe
    state = trainer.run()
    sft = state["metrics"]["00-sft"]
    assert "probe_triton_pass@1" in sft and sum(sft["probe_triton_statuses"].values()) == 2 * 2  # 2 problems, n 2
    assert "heldout_pass@1" in sft and not any(k.startswith("probe_") and "cuda" in k for k in sft)
    out = tmp_path / "run" / "heldout" / "00-sft"
    rows = [json.loads(x) for x in (out / "probe-results-triton.jsonl").read_text().splitlines()]
    scored = {r["problem"] for r in rows if r.get("type") != "run"}  # the first line is the run's header
    assert scored == probe and (out / "results-triton.jsonl").exists()
    (executor,) = fakes_hooks.InlineExecutor.instances
    sampled = {j.problem.name for j in executor.jobs if hasattr(j, "candidate") and j.candidate.completion}
    assert sampled == probe | {"1_ReLU"}


def test_calibration_measures_every_task_before_the_first_coder_phase(plugins, tmp_path, tiny, monkeypatch, training):
    """``[task_mix] calibrate = k``: before the first Coder phase, k samples of every task from the Coder,
    evaluated, their pass rates filed as round 0 (so the first round's draw leans to the frontier, as later
    rounds' measured rates do); a later Coder phase, or a resumed one, does not calibrate again."""
    from kzcore.train import trainer as trainer_mod
    from kzcore.types import Phase

    pm, cfg = inline_cold_start(plugins, tmp_path, tiny, monkeypatch, base=False)
    cfg = attrs.evolve(cfg, task_mix=attrs.evolve(cfg.task_mix, calibrate=2))
    trainer = Trainer(cfg, pm=pm, log=lambda s: None)
    trained = []
    monkeypatch.setattr(trainer_mod, "run_coder_phase", lambda *a, **k: trained.append(a[1]) or {"steps": 0})
    monkeypatch.setattr(trainer, "evaluate_heldout", lambda phase, checkpoint: {})  # no model was trained
    phase_dir = tmp_path / "run" / "phases" / "01-coder"
    metrics = trainer.coder(Phase("coder", 1, 1), phase_dir)
    tasks = {f"{p.level}/{p.name}" for p in trainer.problems.tasks}
    # the inline executor files every candidate correct: every task solved, none at the frontier
    assert metrics["calibration_tasks"] == len(tasks) == 26 and metrics["calibration_correct"] == 26 * 2
    assert metrics["calibration_frontier"] == 0
    rates = [json.loads(x) for x in (tmp_path / "run" / "task_rates.jsonl").read_text().splitlines()]
    assert {r["task"] for r in rates} == tasks and {(r["round"], r["k"]) for r in rates} == {(0, 2)}
    sampled = [json.loads(x) for x in (phase_dir / "calibration" / "completions-triton.jsonl").read_text().splitlines()]
    assert len([r for r in sampled if "problem" in r]) == 26 * 2
    assert trainer.problems.task_rates() == {task: 1.0 for task in tasks} and trained  # the phase went on to train
    again = trainer.coder(Phase("coder", 2, 1), tmp_path / "run" / "phases" / "02-coder")
    assert "calibration_tasks" not in again


@pytest.mark.parametrize("edge", [0.1, 0.02])
def test_measured_pass_rates_lean_the_draw_to_the_frontier(plugins, tmp_path, tiny, edge):
    """Built-in tasks are drawn with weight edge_weight + frontier_reward(p): at the default 0.1 a task solved
    half the time is drawn about eleven times as often as one never (or always) solved, at 0.02 51 times."""
    pm = plugins("kz_triton", "kz_models")
    cfg = attrs.evolve(config(tmp_path, tiny), task_mix=TaskMixSection(builtin=1.0, edge_weight=edge))
    trainer = Trainer(cfg, pm=pm, log=lambda s: None)
    tasks = [f"{p.level}/{p.name}" for p in trainer.problems.tasks]
    frontier = tasks[0]
    rows = [{"round": 0, "task": t, "passed": 2 if t == frontier else 0, "k": 4} for t in tasks]
    (tmp_path / "run").mkdir(parents=True, exist_ok=True)
    (tmp_path / "run" / "task_rates.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    drawn, _ = trainer.problems.coder_tasks(2000, round=1)
    share = sum(f"{p.level}/{p.name}" == frontier for p in drawn) / len(drawn)
    expected = (1 + edge) / (1 + edge + edge * (len(tasks) - 1))  # 26 tasks: ~0.30 / ~0.67, uniform 1/26 ~ 0.04
    assert abs(share - expected) < 0.05, (share, expected)


@pytest.mark.parametrize("edge", [0, -0.1])
def test_an_edge_weight_that_could_never_draw_a_task_is_refused(edge):
    with pytest.raises(ValueError, match="edge_weight must be positive"):
        TaskMixSection(builtin=1.0, edge_weight=edge)


def test_scoring_fills_the_policys_batch_with_each_call(plugins, tmp_path, tiny):
    """Held-out, probe and calibration sampling hand the policy enough prompts a call for its batch of rows:
    4 samples each of 16 prompts for a 64-row batch, not 8 prompts (32 rows, decoded as long as 64)."""
    from kzcore.train.scoring import prompts_per_call

    pm = plugins("kz_triton", "kz_models")
    cfg = config(tmp_path, tiny)
    trainer = Trainer(attrs.evolve(cfg, plugins=PluginsSection(workers=1, generation="hf?batch_size=64")), pm=pm)
    policy = trainer.context.policy_for(tiny)
    try:
        assert policy.batch_size == 64
        assert prompts_per_call(policy, 4) == 16 and prompts_per_call(policy, 16) == 4
        assert prompts_per_call(policy, 100) == 1  # more samples than rows: one prompt a call
    finally:
        policy.close()
    assert prompts_per_call(types.SimpleNamespace(), 4) == 8  # a policy that batches its own way


def test_a_rerun_says_its_samples_and_verdicts_were_reused(plugins, tmp_path, monkeypatch):
    """A resumed run's held-out scoring finds every completion and verdict on disk: its lines say they were
    reused from the earlier run, not that 0 of 2 were sampled in 0 s. (The evaluator is a stand-in that reports
    how many verdicts it found on disk, as kzcore.evaluate.runner.evaluate does through ``on_start``.)"""
    from kzcore.evaluate import policy_eval
    from kzcore.problems import load_problems
    from kzcore.train import scoring
    from kzcore.train.context import RunContext
    from tests import fakes_policy

    on_disk = []

    def evaluate(
        problems,
        candidates,
        config,
        out,
        executor,
        on_start,
        on_result,
        pm,
        on_stale=None,
        workers=None,
        on_unchecked=None,
    ):
        on_start(len(on_disk), len(candidates) - len(on_disk))
        on_disk[:] = candidates
        return []

    monkeypatch.setattr(policy_eval, "evaluate", evaluate)  # the chain scoring runs (evaluate_policy)
    problems = [p for p in load_problems("builtin:1") if p.name in ("1_ReLU", "3_Sigmoid")]
    lines: list[str] = []
    # no executor runs: the stand-in evaluate above is handed this one and ignores it
    context = RunContext(TrainConfig(), pm=plugins("kz_triton"), log=lines.append, executor=object())
    params = scoring.SamplingParams(n=1)
    for _ in range(2):
        lines.clear()
        scoring.sample_and_evaluate(
            context, fakes_policy.ScriptedPolicy(), problems, "triton", params, tmp_path, "", "held-out 00-sft"
        )
    assert lines == [
        "held-out 00-sft: sampling 1 per problem: 2/2 reused from an earlier run",
        "held-out 00-sft: evaluating: 2 results reused from an earlier run",
    ]
    assert len((tmp_path / "completions-triton.jsonl").read_text().splitlines()) == 2  # none sampled twice


def test_a_quiet_run_turns_library_progress_bars_off_before_any_model_loads(plugins, tmp_path, tiny):
    """Resolving the base checkpoints (the embedded model's conversion, loading weights) happens when the
    Trainer is built, so a quiet run's log must lose the bars by then, not only when the schedule starts."""
    import datasets
    import transformers

    pm = plugins("kz_triton", "kz_models")
    cfg = attrs.evolve(config(tmp_path, tiny), problems=ProblemsSection(coldstart="builtin:1", tasks="builtin:1"))
    transformers.utils.logging.enable_progress_bar()
    datasets.enable_progress_bars()
    try:
        Trainer(cfg, pm=pm, log=lambda s: None)
        assert transformers.utils.logging.is_progress_bar_enabled() and datasets.is_progress_bar_enabled()
        Trainer(attrs.evolve(cfg, run=attrs.evolve(cfg.run, quiet=True)), pm=pm, log=lambda s: None)
        assert not transformers.utils.logging.is_progress_bar_enabled()
        assert not datasets.is_progress_bar_enabled()
    finally:
        transformers.utils.logging.enable_progress_bar()
        datasets.enable_progress_bars()

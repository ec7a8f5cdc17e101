"""``[heldout] phases`` and ``[heldout] validation``: a large held-out suite (KernelBench) is scored only at the
run's ends, and settings are chosen on a validation split of the cold start that never reaches training."""

from __future__ import annotations

import attrs
import pytest

from kzcore.train.config import HeldoutSection, ModelsSection, ProblemsSection, TrainConfig
from kzcore.train.schedule import Schedule
from kzcore.types import Phase


def trainer(tmp_path, seed: int = 0, **heldout):
    from kzcore.train.trainer import Trainer

    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    cfg = TrainConfig(
        models=ModelsSection(coder=str(model)),
        problems=ProblemsSection(coldstart="builtin", tasks="builtin", heldout="builtin:1", heldout_names=("1_ReLU",)),
        schedule=Schedule(rounds=2, proposer_steps=1, coder_steps=1),
        heldout=HeldoutSection(**heldout),
    )
    cfg = attrs.evolve(cfg, run=attrs.evolve(cfg.run, dir=str(tmp_path / "run"), seed=seed))
    return Trainer(cfg, log=lambda s: None)


def test_ends_scores_the_held_out_problems_for_base_sft_and_the_last_coder_phase_only(tmp_path):
    ends = trainer(tmp_path, phases="ends")
    scored = [p for p in [Phase("base", 0, 0), *ends.config.schedule.phases()] if ends.scores_heldout(p)]
    assert [(p.role, p.round) for p in scored] == [("base", 0), ("sft", 0), ("coder", 2)]
    every = trainer(tmp_path)
    assert all(every.scores_heldout(p) for p in every.config.schedule.phases())


def test_last_skips_the_sft_model_that_an_earlier_run_of_the_seed_scored(tmp_path):
    last = trainer(tmp_path, phases="last")
    scored = [p for p in [Phase("base", 0, 0), *last.config.schedule.phases()] if last.scores_heldout(p)]
    assert [(p.role, p.round) for p in scored] == [("base", 0), ("coder", 2)]


def test_validation_problems_are_fixed_by_the_config_and_never_trained_on(tmp_path):
    run = trainer(tmp_path, validation=3)
    names = [p.name for p in run.problems.validation]
    assert len(names) == 3 and "1_ReLU" not in names
    assert names == [p.name for p in trainer(tmp_path, seed=5, validation=3).problems.validation]  # not the seed's
    never = set(run.problems.never_distilled)
    assert never == {"1_ReLU", *names}  # their distillation variants are left out with the held-out ones'
    trained = {p.name for p in run.problems.coldstart} | {p.name for p in run.problems.tasks}
    assert not trained & set(names)
    assert len(run.problems.coldstart) == len(trainer(tmp_path).problems.coldstart) - 3


def test_a_validation_split_that_leaves_nothing_to_train_on_is_an_error(tmp_path):
    from kzcore.errors import KzError

    with pytest.raises(KzError, match=r"validation = 100 would leave no cold-start problem to train on"):
        trainer(tmp_path, validation=100)


def test_a_phase_between_the_ends_samples_only_the_validation_problems(tmp_path, monkeypatch):
    """Phase 01-coder of a two-round run with phases = "ends": the validation problems are scored (first language,
    ``validation_`` keys), the held-out ones are not sampled; the row still goes to RUN/heldout.jsonl."""
    import json

    from kzcore.train import trainer as trainer_module

    run = trainer(tmp_path, phases="ends", validation=2)
    run.context.run_dir.mkdir(parents=True)
    asked = []

    def score(context, policy, problems, language, out, where, prefix, clean=None):
        asked.append((prefix, language, sorted(p.name for p in problems)))
        return {f"{prefix}_{language}_pass@1": 0.5}

    class Policy:
        def close(self):
            asked.append("closed")

    monkeypatch.setattr(trainer_module, "score_problems", score)
    monkeypatch.setattr(type(run.context), "policy_for", lambda self, checkpoint: Policy())
    metrics = run.evaluate_heldout(Phase("coder", 1, 1), tmp_path / "model")
    validation = sorted(p.name for p in run.problems.validation)
    assert asked == [("validation", "triton", validation), "closed"]
    assert metrics == {"validation_triton_pass@1": 0.5}
    row = json.loads((run.context.run_dir / "heldout.jsonl").read_text())
    assert row["phase"] == "01-coder" and "heldout_pass@1" not in row


def test_a_fork_scores_the_same_held_out_problems_as_its_source(tmp_path):
    """fork_run.py copies RUN/heldout-problems.json: a control forked after SFT reads back the source's kept
    set instead of checking again, so every arm is scored on the same problems."""
    import json

    from experiments.learning_signal.fork_run import fork

    src = tmp_path / "src"
    for sub in ("00-distill", "00-sft/model"):
        (src / "phases" / sub).mkdir(parents=True)
    (src / "state.json").write_text(json.dumps({"done": ["00-distill", "00-sft"], "metrics": {"00-distill": {}, "00-sft": {}}}))  # fmt: skip
    record = {"problem_check": True, "problems": ["kernelbench:level1/23_Softmax"], "flagged": {}}
    (src / "heldout-problems.json").write_text(json.dumps(record))
    fork(src, tmp_path / "arm")
    assert json.loads((tmp_path / "arm" / "heldout-problems.json").read_text()) == record


def test_compose_makes_the_proposer_cold_start_modules_for_the_run_decontaminated_once(tmp_path, monkeypatch):
    """``[proposer] cold_start_modules = "compose"``: the composer runs once, against the run's held-out
    problems, into RUN/composed.jsonl with its coverage table; a resumed run reads the file back."""
    import json

    from kzcore.proposer import composer

    calls = []
    real = composer.compose

    def compose(catalog, heldout=(), **kw):  # the real composer, on three APIs to keep the test short
        calls.append(sorted(p.name for p in heldout))
        return real(catalog, apis=["Exp", "Sqrt", "Sum"], per_api=1, heldout=heldout, **kw)

    monkeypatch.setattr(composer, "compose", compose)
    run = trainer(tmp_path)
    config = attrs.evolve(run.config, proposer=attrs.evolve(run.config.proposer, cold_start_modules="compose"))
    from kzcore.train.trainer import Trainer

    lines = []
    run = Trainer(config, log=lines.append)
    modules = [p for p in run.problems.proposer_cold_start_problems() if p.name.startswith("composed_")]
    assert len(modules) == 3 and calls == [["1_ReLU"]]
    coverage = json.loads((run.context.run_dir / "composed.coverage.json").read_text())
    assert coverage["modules"] == 3 and coverage["heldout"] == ["builtin:level1/1_ReLU"]
    assert lines and lines[0].startswith("Proposer cold start: 3 composed modules")
    again = Trainer(config, log=lines.append).problems.proposer_cold_start_problems()
    assert len([p for p in again if p.name.startswith("composed_")]) == 3 and len(calls) == 1  # read back


def test_the_plan_names_frozen_proposer_phases_and_the_held_out_schedule(plugins, tmp_path):
    from kzcore.train.plan import format_plan, training_plan

    pm = plugins("kz_triton", "kz_models")
    config = trainer(tmp_path, phases="ends", validation=2).config
    config = attrs.evolve(config, schedule=attrs.evolve(config.schedule, freeze_proposer_at_step=0))
    lines = format_plan(training_plan(config, 1, pm=pm))
    phases = next(line for line in lines if line.startswith("phases: "))
    assert "01-proposer (frozen: proposes, does not train), 01-coder (1 steps)" in phases
    held = next(line for line in lines if line.startswith("held-out: "))
    assert "after the base model, SFT and the last Coder phase; 2 cold-start problems kept out of training" in held

"""The graded gate-failure reward ([proposer] graded_gate_reward, a departure from the method): a failed module
is paid by how far it got, increasing within [-1, 0); accepted modules keep the frontier reward; off (the
default) every failure pays gate_penalty; bad values are clear config errors; the plan says it is on. And the
Coder's other tasks (built-in, cold-start, variant, composed) reach the Proposer's API draw through their API
sets."""

from __future__ import annotations

import types

import pytest

from kzcore.problems import load_problems
from kzcore.proposer.catalog import load_catalog
from kzcore.proposer.gates import (
    AST,
    DEGENERATE,
    DETERMINISTIC,
    DUPLICATE,
    FAILURE_STAGES,
    FINITE,
    GATE_ORDER,
    GRADED_REWARDS,
    RUNS,
    GateResult,
    failure_stage,
)
from kzcore.proposer.pool import PassRate, TaskRecord
from kzcore.proposer.sampler import api_weights, coder_task_records, sample_api_sets, task_api_set
from kzcore.train.config import ConfigError, ProposerSection, load_config
from kzcore.train.proposer_phase import ProposerReward

CATALOG = load_catalog()
RELU = next(p for p in load_problems("builtin:1") if p.name == "1_ReLU")
GOOD = RELU.source
NO_PARSE = "class Model(nn.Module:\n    pass\n"
NO_STRUCTURE = "import torch\n\n\ndef forward(x):\n    return torch.relu(x)\n"
NO_API = GOOD.replace("torch.relu(x)", "torch.tanh(x)")
UNSAFE = "import os\n" + GOOD  # uses ReLU, but the AST gate refuses the import


def record(code: str, failed: str | None, apis=("ReLU",), p: float | None = None) -> TaskRecord:
    """A module whose gates passed up to ``failed`` (None: all passed, with pass rate ``p``)."""
    gates = {}
    for gate in GATE_ORDER:
        gates[gate] = GateResult(gate != failed, "" if gate != failed else "failed")
        if gate == failed:
            break
    rates = (PassRate(1, 4, int(p * 4)),) if p is not None else ()
    return TaskRecord(id="x", apis=apis, level=1, code=code, gates=gates, pass_rates=rates)


LADDER = [  # (module, its first failed gate), one per stage, in FAILURE_STAGES order
    (NO_PARSE, AST),
    (NO_STRUCTURE, AST),
    (NO_API, AST),
    (UNSAFE, AST),
    (GOOD, RUNS),
    (GOOD, DETERMINISTIC),
]


def test_failure_stages_follow_how_far_a_module_got():
    stages = [failure_stage(code, ("ReLU",), CATALOG, gate) for code, gate in LADDER]
    assert stages == [0, 1, 2, 3, 3, 4]
    assert failure_stage("", ("ReLU",), CATALOG, AST) == 0  # no code block at all
    assert failure_stage(GOOD, ("ReLU",), CATALOG, DUPLICATE) == 3
    assert failure_stage(GOOD, ("ReLU",), CATALOG, FINITE) == failure_stage(GOOD, (), CATALOG, DEGENERATE) == 4
    assert len(FAILURE_STAGES) == len(GRADED_REWARDS) == 5


def reward_for(settings: ProposerSection) -> ProposerReward:
    run = types.SimpleNamespace(catalog=CATALOG)
    return ProposerReward(run, [], None, "triton", None, None, settings, 4, 64, None, None)


def test_graded_rewards_increase_with_the_stage_reached_and_accepted_modules_keep_the_frontier():
    graded = reward_for(ProposerSection(graded_gate_reward=True))
    paid = [graded.reward(record(code, gate)) for code, gate in LADDER]
    assert paid == [-1.0, -0.8, -0.6, -0.4, -0.4, -0.2]
    assert all(-1.0 <= r < 0.0 for r in paid) and paid == sorted(paid)
    assert graded.reward(record(GOOD, None, p=0.5)) == 1.0  # frontier reward, tent at 0.5
    assert graded.reward(record(GOOD, None, p=1.0)) == 0.0 > max(paid)
    own = reward_for(ProposerSection(graded_gate_reward=(-1.0, -0.9, -0.5, -0.3, -0.05)))
    assert [own.reward(record(code, gate)) for code, gate in LADDER] == [-1.0, -0.9, -0.5, -0.3, -0.3, -0.05]
    method = reward_for(ProposerSection())  # off: the method's gate penalty for every failure
    assert {method.reward(record(code, gate)) for code, gate in LADDER} == {-1.0}
    assert reward_for(ProposerSection(gate_penalty=-2.0)).reward(record(GOOD, DEGENERATE)) == -2.0


@pytest.mark.parametrize(
    "value, message",
    [
        ('"yes"', "graded_gate_reward must be true or false or a list of a number"),
        ("[-1, -0.5]", "must be true, false or 5 increasing rewards in \\[-1, 0\\)"),
        ("[-1, -0.4, -0.6, -0.2, -0.1]", "5 increasing rewards"),
        ("[-1, -0.8, -0.6, -0.4, 0.0]", "5 increasing rewards"),
        ("[-2, -0.8, -0.6, -0.4, -0.2]", "5 increasing rewards"),
    ],
)
def test_a_bad_graded_gate_reward_is_a_clear_config_error(tmp_path, value, message):
    path = tmp_path / "c.toml"
    path.write_text(f"[proposer]\ngraded_gate_reward = {value}\n")
    with pytest.raises(ConfigError, match=message):
        load_config(path)


def test_graded_rewards_stay_below_at_edges_and_load_from_toml(tmp_path):
    with pytest.raises(ValueError, match="must be below at_edges"):
        ProposerSection(graded_gate_reward=True, at_edges=-0.5)
    assert ProposerSection(graded_gate_reward=True, at_edges=-0.1).gate_grades == GRADED_REWARDS
    assert ProposerSection().gate_grades == () and ProposerSection(graded_gate_reward=False).gate_grades == ()
    path = tmp_path / "c.toml"
    path.write_text("[proposer]\ngraded_gate_reward = [-1, -0.7, -0.5, -0.3, -0.1]\n")
    assert load_config(path).proposer.gate_grades == (-1, -0.7, -0.5, -0.3, -0.1)


def test_the_plan_records_the_graded_reward_and_the_cold_start_modules(tmp_path, plugins):
    import json

    import attrs

    from kzcore.train.config import TrainConfig
    from kzcore.train.plan import format_plan, training_plan

    composed = tmp_path / "composed.jsonl"
    composed.write_text(json.dumps({"name": "composed_ReLU_0", "level": 1, "code": GOOD}) + "\n")
    pm = plugins("kz_triton", "kz_cuda", "kz_models")
    config = TrainConfig()
    plan = training_plan(config, pm=pm)
    assert plan["proposer_graded_gate_reward"] == [] and plan["proposer_cold_start_modules"] == {}
    assert not any("graded" in line for line in format_plan(plan))
    config = attrs.evolve(
        config, proposer=attrs.evolve(config.proposer, graded_gate_reward=True, cold_start_modules=str(composed))
    )
    plan = training_plan(config, pm=pm)
    assert plan["proposer_graded_gate_reward"] == list(GRADED_REWARDS)
    assert plan["proposer_cold_start_modules"] == {str(composed): 1}
    lines = format_plan(plan)
    assert "Proposer gate failures graded by the stage reached (-1, -0.8, -0.6, -0.4, -0.2), not the method's " \
        "gate_penalty -1" in lines  # fmt: skip
    assert f"Proposer cold-start modules {composed}: 1" in lines


# ----------------------------------------------------------------------------------------------------
# the Coder's other tasks in the Proposer's API draw
# ----------------------------------------------------------------------------------------------------


def test_a_builtin_task_maps_to_the_catalog_apis_its_reference_uses():
    builtin = {p.name: p for p in load_problems("builtin")}
    assert task_api_set(builtin["1_ReLU"], CATALOG) == ("ReLU",)
    assert task_api_set(builtin["8_Conv2d_ReLU_BiasAdd"], CATALOG) == ("Conv2d", "ReLU", "Add")
    assert task_api_set(builtin["20_MatmulTransposedB"], CATALOG) == ("Matmul", "Transpose")
    broken = types.SimpleNamespace(source="def (", level=1, name="broken")
    assert task_api_set(broken, CATALOG) == ()


def test_the_coder_failing_a_builtin_task_raises_its_apis_weights_and_replays_its_api_set():
    problems = [p for p in load_problems("builtin") if p.name in ("1_ReLU", "13_Conv2d_MaxPool_Sigmoid", "2_GELU")]
    results = {"1/1_ReLU": (2, 0, 4), "2/13_Conv2d_MaxPool_Sigmoid": (2, 4, 4)}  # 2_GELU: never measured
    rows = coder_task_records(problems, results, CATALOG)
    assert [(r.apis, r.latest_pass_rate, r.accepted) for r in rows] == [
        (("ReLU",), 0.0, True),
        (("Conv2d", "Sigmoid", "MaxPool2d"), 1.0, True),
    ]
    weights = api_weights(CATALOG, rows)
    assert weights["ReLU"] == 2.0  # 1 + boost 2 x failure 1 / (1 task + 1)
    assert weights["Conv2d"] == weights["Sigmoid"] == weights["GELU"] == 1.0  # solved, or never measured
    draws = sample_api_sets(CATALOG, 200, rows, rng=0)
    assert sum(s == ("ReLU",) for s in draws) > 20  # replayed (p 0 <= 0.25) about 1 draw in 8, and weighted
    assert sum(s == ("ReLU",) for s in sample_api_sets(CATALOG, 200, [], rng=0)) < 5


def test_the_proposer_phase_feeds_the_coders_task_results_into_its_draw(tmp_path, monkeypatch):
    pytest.importorskip("datasets")
    import attrs

    from kzcore.train import proposer_phase
    from kzcore.train.config import TrainConfig
    from kzcore.types import Phase

    seen = {}

    def fake_grpo(model, dataset, funcs, settings, output_dir, pm=None, **kwargs):
        seen["apis"] = dataset["apis"]
        return {"steps": 1}

    config = TrainConfig()
    config = attrs.evolve(
        config,
        proposer=attrs.evolve(config.proposer, set_size=(1, 1)),
        proposer_grpo=attrs.evolve(config.proposer_grpo, batch_size=64, num_generations=1),
    )

    context = types.SimpleNamespace(
        config=config, pm=None, executor=None, language="triton", coder_prompt=None, log=print,
        policy_for=lambda ckpt: types.SimpleNamespace(close=lambda: None),
    )  # fmt: skip

    def run(results):
        problems = types.SimpleNamespace(
            pool_path=tmp_path / "pool.jsonl", tasks=[RELU], task_results=lambda: results,
            proposer_cold_start_problems=lambda: [RELU],
        )  # fmt: skip
        phase_dir = tmp_path / f"phase{len(results)}"
        phase_dir.mkdir()
        (phase_dir / "rewards.jsonl").write_text("")
        metrics = proposer_phase.run_proposer_phase(
            context, problems, Phase("proposer", 1, 1), phase_dir, coder_checkpoint="c", proposer_checkpoint="p"
        )
        return metrics, list(seen["apis"])

    monkeypatch.setattr(proposer_phase, "run_grpo", fake_grpo)
    metrics, apis = run({"1/1_ReLU": (0, 0, 4)})
    assert metrics["coder_tasks_weighting"] == 1
    assert sum(a == ["ReLU"] for a in apis) > 8  # 64 single-API draws: replayed and weighted
    metrics, apis = run({})
    assert metrics["coder_tasks_weighting"] == 0 and sum(a == ["ReLU"] for a in apis) < 5


def test_task_results_and_the_proposer_cold_start_modules(tmp_path):
    import json

    from kzcore.train.config import RunSection, TrainConfig
    from kzcore.train.context import RunContext
    from kzcore.train.tasks import TASK_RATES, RunProblems

    rows = [
        {"round": 0, "task": "1/1_ReLU", "passed": 1, "k": 4},
        {"round": 1, "task": "1/1_ReLU", "passed": 3, "k": 4},
        {"round": 1, "task": "2/9_Conv2d_Tanh_Scale", "passed": 0, "k": 2},
    ]
    (tmp_path / TASK_RATES).write_text("".join(json.dumps(r) + "\n" for r in rows))
    composed = tmp_path / "composed.jsonl"
    composed.write_text(json.dumps({"name": "composed_ReLU_0", "level": 1, "code": GOOD}) + "\n")
    run = RunSection(dir=str(tmp_path))
    config = TrainConfig(run=run, proposer=ProposerSection(cold_start_modules=str(composed)))
    problems = RunProblems(RunContext(config), heldout=[], coldstart=[RELU])  # no distill phase: [problems] coldstart
    assert problems.task_results() == {"1/1_ReLU": (1, 3, 4), "2/9_Conv2d_Tanh_Scale": (1, 0, 2)}
    assert problems.task_rates() == {"1/1_ReLU": 0.75, "2/9_Conv2d_Tanh_Scale": 0.0}
    assert [p.name for p in problems.proposer_cold_start_problems()] == ["1_ReLU", "composed_ReLU_0"]
    plain = RunProblems(RunContext(TrainConfig(run=run)), heldout=[], coldstart=[RELU])
    assert [p.name for p in plain.proposer_cold_start_problems()] == ["1_ReLU"]

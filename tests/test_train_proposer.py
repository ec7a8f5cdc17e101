"""Frontier-reward wiring: proposed modules go through the real gates; a scripted Coder with known pass
rates on the accepted ones gives known Proposer rewards, and the pool records the pass rates."""

from __future__ import annotations

import functools
import random

import pytest

from kzcore.evaluate.problem_check import check_problems
from kzcore.executors.local import LocalPool
from kzcore.plugins import plugin_specs
from kzcore.policy import Completion, SamplingParams
from kzcore.problems import load_problems
from kzcore.proposer.catalog import load_catalog
from kzcore.proposer.gates import AstGateConfig
from kzcore.proposer.pool import read_pool
from kzcore.proposer.propose import ProposerRun
from kzcore.train.config import ProposerSection
from kzcore.train.proposer_phase import ProposerReward
from kzcore.types import EvalConfig
from tests import fakes_policy

CFG = EvalConfig(trials=1, timeout_s=60)
RELU_MODULE = next(p for p in load_problems("builtin:1") if p.name == "1_ReLU").source


class ScriptedCoder:
    """Solves a module's problem in exactly `passes` of its k samples."""

    name = "scripted-coder"

    def __init__(self, passes: int):
        self.passes = passes

    def generate(self, prompts, params: SamplingParams):
        good = f"```python\n{fakes_policy.SOLUTION}```"
        return [
            [Completion(good if s < self.passes else "no", i, s) for s in range(params.n)] for i in range(len(prompts))
        ]

    def close(self):
        pass


@pytest.fixture
def pool(plugins, own_workers):
    pm = plugins("kz_triton")
    pool = LocalPool(workers=1, config=CFG, plugins=plugin_specs(pm)).start()
    yield pool
    pool.close()


def make_reward(pool, tmp_path, passes: int) -> ProposerReward:
    catalog = load_catalog()
    run = ProposerRun(
        policy="proposer", catalog=catalog, check_problems=functools.partial(check_problems, pool=pool), config=CFG,
        seed=0, round=1, sampler=None, params=SamplingParams(), examples=0, ast_config=AstGateConfig(),
        rng=random.Random(0), example_pool=[], history=[], seen={},
    )  # fmt: skip
    return ProposerReward(
        run, [[{"role": "user", "content": "x"}]], ScriptedCoder(passes), "triton", pool, CFG,
        ProposerSection(k=4, shape="tent"), 4, 64, tmp_path / "pool.jsonl", tmp_path / "log.jsonl",
    )  # fmt: skip


@pytest.mark.parametrize("passes, expected", [(2, 1.0), (1, 0.5), (4, 0.0), (0, 0.0)])
def test_known_pass_rates_give_known_frontier_rewards(pool, tmp_path, passes, expected):
    reward = make_reward(pool, tmp_path, passes)
    module = [{"role": "assistant", "content": f"```python\n{RELU_MODULE}```"}]
    prose = [{"role": "assistant", "content": "I will not write code."}]
    rewards = reward(prompts=[[]] * 2, completions=[module, prose], apis=[["ReLU"], ["ReLU"]], chat_index=[0, 0])
    assert rewards == [pytest.approx(expected), -1.0]  # the prose fails the AST gate: gate penalty
    accepted, failed = read_pool(tmp_path / "pool.jsonl")
    assert accepted.accepted and accepted.latest_pass_rate == passes / 4
    assert (accepted.pass_rates[0].round, accepted.pass_rates[0].k) == (1, 4)
    assert failed.failed_gate == "ast"


def test_duplicate_module_in_the_same_step_gets_the_penalty(pool, tmp_path):
    reward = make_reward(pool, tmp_path, 2)
    module = [{"role": "assistant", "content": f"```python\n{RELU_MODULE}```"}]
    rewards = reward(prompts=[[]] * 2, completions=[module, module], apis=[["ReLU"], ["ReLU"]], chat_index=[0, 0])
    assert rewards == [1.0, -1.0]
    assert [r.failed_gate for r in read_pool(tmp_path / "pool.jsonl")] == [None, "duplicate"]


def run_phase(tmp_path, monkeypatch, cold_start, name="phase", batch_size=64, **proposer):
    """One Proposer phase of a default config with ``[proposer]`` settings ``proposer``, single-API sets,
    ``batch_size`` one-sample prompts and ``cold_start`` as the Proposer's cold-start problems (and the Coder's
    task), GRPO replaced by a recorder: (the phase's metrics, the GRPO dataset)."""
    pytest.importorskip("datasets")
    import types

    import attrs

    from kzcore.train import proposer_phase
    from kzcore.train.config import TrainConfig
    from kzcore.types import Phase

    seen = {}

    def fake_grpo(model, dataset, funcs, settings, output_dir, pm=None, **kwargs):
        seen["dataset"] = dataset
        return {"steps": 1}

    config = TrainConfig()
    config = attrs.evolve(
        config,
        proposer=attrs.evolve(config.proposer, set_size=(1, 1), **proposer),
        proposer_grpo=attrs.evolve(config.proposer_grpo, batch_size=batch_size, num_generations=1),
    )
    context = types.SimpleNamespace(
        config=config, pm=None, executor=None, language="triton", coder_prompt=None, log=print,
        policy_for=lambda ckpt: types.SimpleNamespace(close=lambda: None),
    )  # fmt: skip
    problems = types.SimpleNamespace(
        pool_path=tmp_path / f"{name}-pool.jsonl", proposer_cold_start_problems=lambda: cold_start,
        tasks=cold_start[:1], task_results=lambda: {},
    )  # fmt: skip
    monkeypatch.setattr(proposer_phase, "run_grpo", fake_grpo)
    phase_dir = tmp_path / name
    phase_dir.mkdir()
    (phase_dir / "rewards.jsonl").write_text("")
    metrics = proposer_phase.run_proposer_phase(
        context, problems, Phase("proposer", 1, 1), phase_dir, coder_checkpoint="c", proposer_checkpoint="p"
    )
    return metrics, seen["dataset"]


def test_the_proposer_phase_starts_its_draw_on_the_apis_it_has_seen(tmp_path, monkeypatch):
    """[proposer] unseen_weight: the phase's API sets lean to the APIs of the Proposer's examples, the cold
    start's problems and the Coder's tasks; the phase reports how many that is."""
    from kzcore.proposer.prompt import load_examples
    from kzcore.train import proposer_phase

    relu = next(p for p in load_problems("builtin:1") if p.name == "1_ReLU")
    metrics, dataset = run_phase(tmp_path, monkeypatch, [relu], unseen_weight=0.001)
    catalog = load_catalog()
    known = proposer_phase.known_apis(catalog, [p for p, _ in load_examples(catalog)] + [relu])
    assert "ReLU" in known and 20 < len(known) < len(catalog.apis) and metrics["known_apis"] == len(known)
    # 64 single-API sets: with 0.001 for an unseen API, about 1 in 3 of ~80 unseen would show up in 64 draws
    apis = dataset["apis"]
    assert len(apis) == 64 and sum(a[0] not in known for a in apis) <= 3


def test_per_api_examples_reach_the_proposer_phases_prompts(tmp_path, monkeypatch):
    """``[proposer] examples = "per-api"``: each prompt of a Proposer phase shows a module of the Proposer's cold
    start for its requested API; ``"suite"`` shows the suite's."""
    from kzcore.types import Problem

    relu = next(p for p in load_problems("builtin:1") if p.name == "1_ReLU")
    # a cold-start module that shows Tanh (which no level-1 suite module uses) after ReLU; relu's module is the
    # request {ReLU} itself, never shown for it, so the chain shows ReLU too
    chain = Problem(name="relu_tanh", level=2, source=relu.source.replace("torch.relu(x)", "torch.tanh(torch.relu(x))"))

    def users(examples: str) -> list[str]:  # single APIs drawn mostly among the ~40 the examples show, Tanh too
        _, dataset = run_phase(
            tmp_path, monkeypatch, [relu, chain], examples, 128, examples=examples, unseen_weight=0.001
        )
        return [c[1]["content"] for c in dataset["prompt"]]

    per_api = users("per-api")
    asked = [u for u in per_api if "- Tanh (" in u or "- ReLU (" in u]
    assert len(asked) >= 2 and any("- Tanh (" in u for u in asked)
    assert all(chain.source.strip() in u for u in asked)
    assert all(chain.source.strip() not in u for u in per_api if u not in asked)
    assert all(chain.source.strip() not in u for u in users("suite"))

"""Diversity of accepted Proposer modules (distinct API sets, dedup keys, the most common template's share)
per phase and in ``kz pool stats``, and the Proposer's share of a Coder phase's prompts with its pass rate."""

from __future__ import annotations

import pytest

from kzcore.cli import main
from kzcore.executors.local import LocalPool
from kzcore.jsonl import read_jsonl
from kzcore.plugins import plugin_specs
from kzcore.proposer.gates import GATE_ORDER, GateResult, dedup_key
from kzcore.proposer.pool import TaskRecord, append_records, diversity, stats, template
from kzcore.train.proposer_phase import phase_diversity
from kzcore.train.tasks import proposer_task_metrics
from tests.test_train_proposer import CFG, RELU_MODULE, make_reward

CONV_RELU = """
import torch
import torch.nn as nn

C = 16


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(C, C, 3)

    def forward(self, x):
        return torch.relu(self.conv(x)) * 2.0


def get_inputs():
    return [torch.rand(2, C, 8, 8)]


def get_init_inputs():
    return []
"""
# the same module, other names: the same dedup key and template
CONV_RELU_RENAMED = CONV_RELU.replace("self.conv", "self.layer").replace("(x)", "(inp)").replace("x):", "inp):")
# the same calls in the same order with other sizes and constants: another dedup key, the same template
CONV_RELU_RESIZED = CONV_RELU.replace("C = 16", "C = 32").replace("* 2.0", "* 3.0")
GELU_SUM = """
import torch
import torch.nn.functional as F


class Model(torch.nn.Module):
    def forward(self, x):
        return F.gelu(x).sum(dim=1)


def get_inputs():
    return [torch.rand(4, 64)]


def get_init_inputs():
    return []
"""


def record(id: str, code: str, apis: tuple[str, ...], *, accepted: bool = True, round: int = 1) -> TaskRecord:
    """A pool record with every gate passed (or the AST gate failed) and a real dedup key."""
    gates = {name: GateResult(True) for name in GATE_ORDER} if accepted else {"ast": GateResult(False, "no")}
    return TaskRecord(
        id=id, apis=apis, level=1, code=code, gates=gates, provenance={"round": round}, dedup_key=dedup_key(code, apis)
    )


def test_template_erases_names_and_constants_but_not_the_calls():
    assert template(CONV_RELU) == template(CONV_RELU_RENAMED) == template(CONV_RELU_RESIZED)
    assert template(CONV_RELU) != template(GELU_SUM)
    assert template(CONV_RELU) != template(CONV_RELU.replace("torch.relu", "torch.sigmoid"))
    assert template("def (") != template("def )")  # modules that do not parse: each its own


def test_diversity_counts_api_sets_dedup_keys_and_the_top_template_share():
    records = [
        record("a", CONV_RELU, ("Conv2d", "ReLU")),
        record("b", CONV_RELU_RENAMED, ("ReLU", "Conv2d")),  # the same set, the same dedup key
        record("c", CONV_RELU_RESIZED, ("Conv2d", "ReLU")),
        record("d", GELU_SUM, ("GELU", "sum")),
        record("e", GELU_SUM, ("Softmax",), accepted=False),  # not accepted: not counted
    ]
    assert records[0].dedup_key == records[1].dedup_key != records[2].dedup_key
    d = diversity(records)
    assert (d.accepted, d.api_sets, d.dedup_keys, d.top_template_share) == (4, 2, 3, 0.75)
    assert d.to_metrics() == {"accepted_api_sets": 2, "accepted_dedup_keys": 3, "top_template_share": 0.75}
    spread = diversity([records[0], records[3]])
    assert (spread.api_sets, spread.dedup_keys, spread.top_template_share) == (2, 2, 0.5)


def test_nothing_accepted_has_no_template_share():
    d = diversity([record("e", GELU_SUM, ("GELU",), accepted=False)])
    assert (d.accepted, d.api_sets, d.dedup_keys, d.top_template_share) == (0, 0, 0, None)
    assert diversity([]).top_template_share is None


def test_phase_diversity_reads_only_the_modules_its_reward_log_names(tmp_path):
    pool = tmp_path / "pool.jsonl"
    earlier = [record("old1", GELU_SUM, ("GELU", "sum"), round=0), record("old2", GELU_SUM, ("GELU",), round=0)]
    phase = [record("a", CONV_RELU, ("Conv2d", "ReLU")), record("c", CONV_RELU_RESIZED, ("Conv2d", "ReLU"))]
    append_records(pool, earlier + phase + [record("x", GELU_SUM, ("GELU",), accepted=False)])
    rows = [{"accepted": 1, "accepted_ids": ["a"]}, {"accepted": 1, "accepted_ids": ["c"]}]
    d = phase_diversity(rows, pool)
    assert (d.accepted, d.api_sets, d.dedup_keys, d.top_template_share) == (2, 1, 2, 1.0)
    none = phase_diversity([{"accepted": 0, "accepted_ids": []}], pool)
    assert (none.accepted, none.top_template_share) == (0, None)
    assert phase_diversity([], tmp_path / "absent.jsonl").top_template_share is None


@pytest.fixture
def pool(plugins):
    pm = plugins("kz_triton")
    pool = LocalPool(workers=1, config=CFG, plugins=plugin_specs(pm)).start()
    yield pool
    pool.close()


def test_the_reward_log_names_the_accepted_modules(pool, tmp_path):
    reward = make_reward(pool, tmp_path, 2)
    module = [{"role": "assistant", "content": f"```python\n{RELU_MODULE}```"}]
    prose = [{"role": "assistant", "content": "I will not write code."}]
    reward(prompts=[[]] * 2, completions=[module, prose], apis=[["ReLU"], ["ReLU"]], chat_index=[0, 0])
    rows = read_jsonl(tmp_path / "log.jsonl")
    accepted = [r for r in read_jsonl(tmp_path / "pool.jsonl") if r["accepted"]]
    assert [i for r in rows for i in r["accepted_ids"]] == [accepted[0]["id"]]
    d = phase_diversity(rows, tmp_path / "pool.jsonl")
    assert (d.accepted, d.api_sets, d.dedup_keys, d.top_template_share) == (1, 1, 1, 1.0)


def test_pool_stats_reports_diversity_for_the_pool_and_each_round(tmp_path, capsys):
    records = [
        record("old", GELU_SUM, ("GELU", "sum"), round=0),
        record("a", CONV_RELU, ("Conv2d", "ReLU")),
        record("c", CONV_RELU_RESIZED, ("Conv2d", "ReLU")),
        record("x", GELU_SUM, ("GELU",), accepted=False, round=2),
    ]
    s = stats(records)
    assert (s.diversity.accepted, s.diversity.api_sets, s.diversity.dedup_keys) == (3, 2, 3)
    assert s.diversity.top_template_share == pytest.approx(2 / 3)
    assert list(s.rounds) == [0, 1, 2]
    assert (s.rounds[1].api_sets, s.rounds[1].top_template_share) == (1, 1.0)
    assert (s.rounds[2].accepted, s.rounds[2].top_template_share) == (0, None)
    path = tmp_path / "pool.jsonl"
    append_records(path, records)
    assert main(["pool", "stats", str(path), "--png", str(tmp_path / "h.png")]) == 0
    out = capsys.readouterr().out
    assert "4 modules, 3 accepted" in out  # the existing summary line is unchanged
    assert "accepted diversity: 2 API sets, 3 dedup keys, top template share 0.67" in out
    assert "round 1: 2 accepted, 1 API sets, 2 dedup keys, top template share 1.00" in out
    assert "round 2: 0 accepted, 0 API sets, 0 dedup keys, top template share n/a" in out


def test_proposer_task_share_and_pass_rate():
    sources = {"newest": 6, "older": 2, "builtin": 2}
    tally = {"1/proposed_a": [1, 4], "1/proposed_b": [4, 4], "1/19_ReLU": [0, 4]}
    assert proposer_task_metrics(sources, tally) == {"proposer_task_share": 0.8, "proposer_task_pass_rate": 0.625}
    only_builtin = proposer_task_metrics({"builtin": 4}, {"1/19_ReLU": [2, 4]})
    assert only_builtin == {"proposer_task_share": 0.0, "proposer_task_pass_rate": None}
    assert proposer_task_metrics({}, {}) == {"proposer_task_share": None, "proposer_task_pass_rate": None}

"""The JSONL readers outside results and completions (task pool, problem and solution files, SFT rows, the
Coder and Proposer phases' reward logs) go through kzcore.jsonl: a torn last line (an interrupted write) is
skipped with a warning naming file and line, appends after one start on a line of their own, and a
malformed line elsewhere in a pool or an input file stays a clear error naming file and line."""

from __future__ import annotations

import json
import logging
import types
from pathlib import Path

import pytest

from kz_suites import BUILTIN_SUITE
from kzcore.errors import KzError, ProblemFormatError
from kzcore.problems import load_problems, load_solutions
from kzcore.proposer.gates import GATE_ORDER, GateResult
from kzcore.proposer.pool import (
    PoolError,
    TaskRecord,
    append_records,
    read_pool,
    record_pass_rates,
    to_hf_dataset,
)
from kzcore.train.sft import load_sft_rows

RELU_PATH = BUILTIN_SUITE / "level1/1_ReLU.py"
RELU = RELU_PATH.read_text()
TORN = '{"name": "x", "co'


def torn(path: Path, rows: list[dict], tail: str = TORN) -> Path:
    """``rows`` as whole lines, then ``tail`` without its newline: what an interrupted writer leaves."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + tail)
    return path


def every_line_parses(path: Path) -> list[dict]:
    text = path.read_text()
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def warned_torn(caplog, path: Path, lineno: int) -> bool:
    return any(
        r.name == "kzcore.jsonl" and r.getMessage().startswith(f"{path}:{lineno}: torn last line")
        for r in caplog.records
    )


def record(i: int) -> TaskRecord:
    gates = {name: GateResult(True) for name in GATE_ORDER}
    return TaskRecord(id=f"t{i}", apis=("Conv2d",), level=1, code=f"# task {i}\n", gates=gates)


# -- the task pool ---------------------------------------------------------------------------------
def test_read_pool_skips_a_torn_last_line(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="kzcore.jsonl")
    pool = torn(tmp_path / "pool.jsonl", [record(0).to_json(), record(1).to_json()])
    assert read_pool(pool) == [record(0), record(1)]
    assert warned_torn(caplog, pool, 3)
    # a malformed line that is not the last one is still an error naming the line (nothing is dropped)
    pool.write_text(json.dumps(record(0).to_json()) + "\n{not json\n" + json.dumps(record(1).to_json()) + "\n")
    with pytest.raises(PoolError, match=r"pool\.jsonl:2: not a task record"):
        read_pool(pool)


def test_append_records_after_a_torn_line_leaves_a_valid_pool(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="kzcore.jsonl")
    pool = torn(tmp_path / "pool.jsonl", [record(0).to_json()])
    append_records(pool, [record(1), record(2)])
    assert [row["id"] for row in every_line_parses(pool)] == ["t0", "t1", "t2"]
    assert read_pool(pool) == [record(0), record(1), record(2)]
    assert any("torn last line dropped" in r.getMessage() for r in caplog.records)


def test_record_pass_rates_rewrites_a_torn_pool_whole(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="kzcore.jsonl")
    pool = torn(tmp_path / "pool.jsonl", [record(0).to_json(), record(1).to_json()])
    assert record_pass_rates(pool, 0, {"t1": (3, 4)}) == 1
    rows = every_line_parses(pool)
    assert [row["id"] for row in rows] == ["t0", "t1"] and rows[1]["pass_rates"][0]["p"] == 0.75
    assert warned_torn(caplog, pool, 3)
    assert not (tmp_path / "pool.jsonl.tmp").exists()


def test_pool_with_a_torn_line_loads_as_a_hf_dataset(tmp_path, monkeypatch, caplog):
    pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    caplog.set_level(logging.WARNING, logger="kzcore.jsonl")
    pool = torn(tmp_path / "pool.jsonl", [record(0).to_json(), record(1).to_json()])
    ds = to_hf_dataset(pool, cache_dir=tmp_path / "cache")
    assert ds["id"] == ["t0", "t1"] and ds[0]["gates"]["ast"] == {"ok": True, "reason": ""}
    assert warned_torn(caplog, pool, 3)


# -- problem and solution files --------------------------------------------------------------------
def test_problem_jsonl_skips_a_torn_last_line(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="kzcore.jsonl")
    path = torn(tmp_path / "p.jsonl", [{"name": "1_ReLU", "code": RELU, "level": 1}])
    (problem,) = load_problems(str(path))
    assert (problem.name, problem.level, problem.source) == ("1_ReLU", 1, RELU)
    assert warned_torn(caplog, path, 2)
    # malformed input elsewhere stays a one-line error naming file and line (blank lines counted)
    path.write_text(json.dumps({"name": "1_ReLU", "code": RELU}) + "\n\n{not json\n")
    with pytest.raises(ProblemFormatError, match=r"p\.jsonl:3: expected a JSON object with 'name' and 'code'"):
        load_problems(str(path))
    path.write_text("\n" + json.dumps({"name": "1_ReLU"}) + "\n")
    with pytest.raises(ProblemFormatError, match=r"p\.jsonl:2: expected a JSON object with 'name' and 'code'"):
        load_problems(str(path))


def test_solutions_jsonl_skips_a_torn_last_line(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="kzcore.jsonl")
    (relu,) = load_problems(str(RELU_PATH))
    rows = [{"problem": "1_ReLU", "code": "a"}, {"problem": "1_ReLU", "completion": "b"}]
    path = tmp_path / "sols.jsonl"
    path.write_text(json.dumps(rows[0]) + "\n\n" + json.dumps(rows[1]) + "\n" + '{"problem": "1_ReLU", "co')
    cands = load_solutions(str(path), [relu], "triton")
    assert [(c.sample, c.source, c.completion, c.origin) for c in cands] == [
        (0, "a", None, f"{path}:1"),
        (1, None, "b", f"{path}:3"),  # line numbers count the blank line
    ]
    assert warned_torn(caplog, path, 4)
    path.write_text("[1, 2]\n" + json.dumps(rows[0]) + "\n")
    with pytest.raises(ProblemFormatError, match=r"sols\.jsonl:1: expected a JSON object with 'problem'"):
        load_solutions(str(path), [relu], "triton")


# -- training data and logs ------------------------------------------------------------------------
def test_sft_rows_skip_a_torn_last_line(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="kzcore.jsonl")
    chat = [{"role": "user", "content": "hi"}]
    row = {"prompt": chat, "completion": [{"role": "assistant", "content": "ok"}], "problem": "1_ReLU"}
    path = torn(tmp_path / "sft.jsonl", [row, row])
    assert load_sft_rows(path) == [{"prompt": row["prompt"], "completion": row["completion"]}] * 2
    assert warned_torn(caplog, path, 3)
    path.write_text(json.dumps(row) + "\n\n" + json.dumps({"prompt": chat}) + "\n")
    with pytest.raises(KzError, match=r"sft\.jsonl:3: SFT rows need 'prompt' and 'completion'"):
        load_sft_rows(path)
    path.write_text(TORN)
    with pytest.raises(KzError, match=r"sft\.jsonl: no SFT rows"):
        load_sft_rows(path)


def test_coder_phase_metrics_skip_a_torn_rewards_line(tmp_path, monkeypatch, caplog):
    pytest.importorskip("datasets")
    from kzcore.train import coder
    from kzcore.types import EvalConfig

    caplog.set_level(logging.WARNING, logger="kzcore.jsonl")
    out = tmp_path / "out"
    logged = {"correct_rate": 0.5, "frac_groups_zero_std": 0.25, "eval_seconds": 1.5}

    def fake_grpo(model, dataset, funcs, settings, output_dir, pm=None, **kwargs):
        torn(output_dir / "rewards.jsonl", [logged, logged], tail='{"call": 3, "rew')
        return {"steps": 2, "train_seconds": 9.0, "generation_seconds": 4.0}

    monkeypatch.setattr(coder, "run_grpo", fake_grpo)
    (relu,) = load_problems(str(RELU_PATH))

    def prompt(problem):
        return [{"role": "user", "content": problem.name}]

    metrics = coder.run_coder_phase(
        "m", [relu], "triton", out, coder.GRPOSettings(), None, EvalConfig(), prompt_for=prompt
    )
    assert metrics == {
        "steps": 2, "train_seconds": 9.0, "generation_seconds": 4.0, "correct_rate": 0.5, "frac_groups_zero_std": 0.25,
        "eval_seconds": 3.0, "between_calls_seconds": 0, "update_seconds": 2.0,
    }  # fmt: skip
    assert warned_torn(caplog, out / "rewards.jsonl", 3)


def test_proposer_phase_metrics_skip_a_torn_rewards_line(tmp_path, monkeypatch, caplog):
    pytest.importorskip("datasets")
    from kzcore.train import proposer_phase
    from kzcore.train.config import TrainConfig
    from kzcore.types import Phase

    caplog.set_level(logging.WARNING, logger="kzcore.jsonl")
    phase_dir = tmp_path / "phase"
    logged = {"step": 1, "accepted": 2, "failures": {"ast": 1, "duplicate": 1}}

    def fake_grpo(model, dataset, funcs, settings, output_dir, pm=None, **kwargs):
        phase_dir.mkdir(parents=True, exist_ok=True)
        torn(phase_dir / "rewards.jsonl", [logged, logged], tail='{"step": 3, "acc')
        return {"steps": 1}

    closed = []
    context = types.SimpleNamespace(
        config=TrainConfig(),
        pm=None,
        executor=None,
        language="triton",
        coder_prompt=None,
        policy_for=lambda ckpt: types.SimpleNamespace(close=lambda: closed.append(ckpt)),
        log=print,
    )
    problems = types.SimpleNamespace(pool_path=tmp_path / "pool.jsonl", task_results=lambda: {})
    append_records(tmp_path / "pool.jsonl", [record(0)])
    monkeypatch.setattr(proposer_phase, "run_grpo", fake_grpo)
    metrics = proposer_phase.run_proposer_phase(
        context, problems, Phase("proposer", 1, 1), phase_dir, coder_checkpoint="coder-ckpt", proposer_checkpoint="p"
    )
    assert metrics == {"steps": 1, "accepted": 4, "proposed": 8, "coder_tasks_weighting": 0}
    assert closed == ["coder-ckpt"]
    assert warned_torn(caplog, phase_dir / "rewards.jsonl", 3)

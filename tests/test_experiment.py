"""The learning-signal experiment's machinery: aggregation over seeds (pinned on synthetic curves) and a
quick end-to-end run of both variants on a tiny model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.learning_signal.run import HELDOUT, aggregate, markdown

ROOT = Path(__file__).resolve().parent.parent


def write_curve(run_dir: Path, values: list[float]) -> Path:
    run_dir.mkdir(parents=True)
    phases = ["00-base", "00-sft", "01-coder"]
    rows = [{"phase": p, "heldout_pass@1": v, "heldout_pass@4": min(1.0, 2 * v)} for p, v in zip(phases, values)]
    (run_dir / "heldout.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run_dir


def test_aggregate_means_spreads_and_verdict(tmp_path):
    runs = {
        "full": {0: write_curve(tmp_path / "f0", [0.0, 0.2, 0.4]), 1: write_curve(tmp_path / "f1", [0.0, 0.1, 0.2])},
        "frozen": {0: write_curve(tmp_path / "z0", [0.1, 0.1, 0.1]), 1: write_curve(tmp_path / "z1", [0.0, 0.1, 0.0])},
    }
    report = aggregate(runs, (1, 4))
    full = report["full/pass@1"]
    assert [p["phase"] for p in full["phases"]] == ["00-base", "00-sft", "01-coder"]
    assert full["phases"][2]["mean"] == pytest.approx(0.3) and full["phases"][2]["std"] == pytest.approx(0.1)
    assert full["gain_mean"] == pytest.approx(0.3) and full["gain_exceeds_spread"]
    frozen = report["frozen/pass@1"]
    assert frozen["gain_mean"] == pytest.approx(0.0) and not frozen["gain_exceeds_spread"]
    assert "| full/pass@1 | 0.000 ± 0.000 | 0.150 ± 0.050 | 0.300 ± 0.100 | +0.300 ± 0.100 | True |" in markdown(report)


def test_quick_run_of_both_variants_on_a_tiny_model(tmp_path, training):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("KZ_LOAD_PLUGINS", None)
    cmd = [
        sys.executable,
        "experiments/learning_signal/run.py",
        "--model",
        "tiny",
        "--quick",
        "--seeds",
        "0",
        "--runs",
        str(tmp_path),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert set(report["report"]) == {"full/pass@1", "full/pass@2", "frozen/pass@1", "frozen/pass@2"}
    assert [p["phase"] for p in report["report"]["full/pass@1"]["phases"]] == ["00-base", "00-sft", "01-coder"]
    assert list(report["meta"]["heldout"]) == list(HELDOUT)
    frozen_done = json.loads((tmp_path / "frozen-seed0" / "state.json").read_text())["done"]
    assert "01-proposer" in frozen_done  # frozen after round 1: round 1 still trains the Proposer
    sft_rows = [
        json.loads(x)
        for x in (tmp_path / "full-seed0" / "phases" / "00-distill" / "sft.jsonl").read_text().splitlines()
    ]
    assert not {r["problem"] for r in sft_rows} & set(HELDOUT)
    assert (tmp_path / "curves.png").stat().st_size > 0


def test_the_gpu_report_aligns_phases_sums_training_verdicts_and_shows_the_probe(tmp_path, capsys, monkeypatch):
    """experiments/learning_signal/report.py on two synthetic runs: one forked without a base evaluation
    (its points keep their phase positions), one with a training probe; each Coder phase's training verdicts
    summed over its steps; the probe gets its own column and panel."""
    from experiments.learning_signal import report

    def run(name: str, heldout: list[dict], rewards: list[dict]) -> Path:
        d = tmp_path / name
        (d / "phases" / "01-coder" / "model").mkdir(parents=True)
        metrics = {"01-coder": {"correct_rate": 0.25, "frac_reward_zero_std": 0.5, "seconds": 9.0}}
        (d / "state.json").write_text(json.dumps({"done": ["00-sft", "01-coder"], "metrics": metrics}))
        (d / "heldout.jsonl").write_text("".join(json.dumps(r) + "\n" for r in heldout))
        rows = "".join(json.dumps(r) + "\n" for r in rewards)
        (d / "phases" / "01-coder" / "model" / "rewards.jsonl").write_text(rows)
        return d

    step = {"correct_rate": 0.5, "reward_mean": 0.5, "reward_std": 0.5, "frac_groups_zero_std": 0.5}
    rewards = [{**step, "statuses": {"correct": 1, "incorrect": 1}}, {**step, "statuses": {"correct": 2}}]
    s0 = run("s0", [{"phase": p, "heldout_cuda_pass@1": v} for p, v in [("00-base", 0), ("00-sft", 0.1), ("01-coder", 0.2)]], rewards)  # fmt: skip
    s1 = run("s1", [{"phase": p, "heldout_cuda_pass@1": v, "probe_cuda_pass@1": 2 * v} for p, v in [("00-sft", 0.1), ("01-coder", 0.3)]], rewards)  # fmt: skip
    out = tmp_path / "rep" / "report"
    monkeypatch.setattr(sys, "argv", ["report.py", "--out", str(out), "--languages", "cuda", f"full-s0={s0}", f"full-s1={s1}"])  # fmt: skip
    assert report.main() == 0
    data = json.loads(out.with_suffix(".json").read_text())
    assert data["runs"]["full-s1"]["train_statuses"] == {"01-coder": {"correct": 3, "incorrect": 1}}
    assert data["heldout_pass@1"]["cuda"]["full"]["01-coder"] == {"mean": 0.25, "min": 0.2, "max": 0.3, "n": 2}
    table = capsys.readouterr().out
    assert "| probe pass@1 |" in table and "| full-s1 | 01-coder | 0.300 / – / – |  | 0.600 | 0.250 |" in table
    assert out.with_suffix(".png").stat().st_size > 0


def test_a_fork_refuses_a_cold_start_whose_models_were_pruned(tmp_path):
    """fork_run.py copies a run's cold start; when the source has pruned one of its models since (the cold
    start's Proposer goes once a Proposer phase has trained one), the fork would start from the base model
    instead, so it stops with a message."""
    from experiments.learning_signal.fork_run import fork

    src = tmp_path / "src"
    for sub in ("00-distill", "00-sft/model", "00-sft/proposer"):
        (src / "phases" / sub).mkdir(parents=True)
    (src / "phases" / "00-sft" / "model" / "config.json").write_text("{}")
    (src / "phases" / "00-sft" / "proposer" / "config.json.pruned").write_text("{}")
    (src / "state.json").write_text(json.dumps({"done": ["00-distill", "00-sft"], "metrics": {"00-distill": {}, "00-sft": {}}}))  # fmt: skip
    with pytest.raises(SystemExit, match=r"has pruned phases/00-sft/proposer"):
        fork(src, tmp_path / "dst")
    assert not (tmp_path / "dst").exists()
    fork(src, tmp_path / "seed", after="distill")  # a seed fork copies no model
    assert json.loads((tmp_path / "seed" / "state.json").read_text())["done"] == ["00-distill"]

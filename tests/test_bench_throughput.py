"""bench/throughput.py: one batch through pools of each worker count, side by side; its order and its report."""

from __future__ import annotations

import argparse

import pytest


@pytest.fixture
def throughput(monkeypatch):
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent))
    from bench import throughput

    return throughput


def test_counts_are_measured_in_mirrored_passes(throughput):
    assert throughput.order([1, 4], 1) == [1, 4]
    assert throughput.order([1, 4], 2) == [1, 4, 4, 1]
    assert throughput.order([1, 2, 4], 3) == [1, 2, 4, 4, 2, 1, 1, 2, 4]


def test_the_report_gives_each_counts_mean_wall_and_its_speedup_over_the_first(throughput):
    args = argparse.Namespace(counts=[1, 4], problems=["1_ReLU"], samples=8, size="auto")
    runs = [{"workers": 1, "wall_s": 30.0}, {"workers": 4, "wall_s": 18.0}, {"workers": 4, "wall_s": 22.0}]
    report = throughput.report({"runs": runs, "order": [1, 4, 4, 1]}, args, partial=False)
    assert report["mean_wall_s"] == {"1": 30.0, "4": 20.0}
    assert report["speedup_vs_first"] == {"1": 1.0, "4": 1.5} and report["meets_target"] is True
    slow = throughput.report({"runs": runs[:1] + [{"workers": 4, "wall_s": 31.3}], "order": [1, 4]}, args, False)
    assert slow["speedup_vs_first"]["4"] == pytest.approx(0.958, abs=1e-3) and slow["meets_target"] is False
    partial = throughput.report({"runs": runs[:1], "order": [1, 4]}, args, partial=True)
    assert partial["meets_target"] is None and partial["partial"] is True  # no verdict on a run cut short


def test_an_unknown_problem_is_named(throughput):
    with pytest.raises(SystemExit, match="no built-in level-1 problem 99_Nothing"):
        throughput.batch(["1_ReLU", "99_Nothing"])


def test_a_cpu_run_measures_each_worker_count_and_writes_its_report(tmp_path, own_workers):
    """The bench end to end on the CPU (Triton's interpreter, small sizes): two counts, one pool each."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path / "throughput.json"
    root = Path(__file__).resolve().parent.parent
    cmd = [sys.executable, "-m", "bench", "run", "throughput", "--device", "cpu", "--size", "small",
           "--problems", "1_ReLU,3_Sigmoid", "--samples", "2", "--workers", "1,2", "--out", str(out)]  # fmt: skip
    env = {**os.environ, "TRITON_INTERPRET": "1", "HF_HUB_OFFLINE": "1", "KZ_LOAD_PLUGINS": "triton,suites"}
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["partial"] is False and [r["workers"] for r in report["runs"]] == [1, 2]
    assert all(r["candidates"] == 4 and r["correct"] == 4 and r["not_correct"] == [] for r in report["runs"])
    assert all(r["stage_total_s"]["check"] > 0 for r in report["runs"])  # where the work went, stage by stage
    assert set(report["speedup_vs_first"]) == {"1", "2"} and isinstance(report["meets_target"], bool)

"""bench/side_by_side.py: `kz eval` alone, again, and in runs started together with and without the host-wide GPU
lock; its report compares each candidate's speedup side by side with its speedup alone."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def side_by_side(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))
    from bench import side_by_side

    return side_by_side


def test_the_report_bounds_each_deviation_by_the_timers_own_spread(side_by_side):
    args = argparse.Namespace(device="cuda", size="full", problems="1_ReLU,3_Sigmoid", runs=2)
    alone = {"1_ReLU": 1.00, "3_Sigmoid": 2.00}
    phases = {
        "alone": {"speedups": [alone]},
        "again": {"speedups": [{"1_ReLU": 1.004, "3_Sigmoid": 1.99}]},
        "locked": {"speedups": [{"1_ReLU": 1.01, "3_Sigmoid": 2.02}, {"1_ReLU": 0.99, "3_Sigmoid": 1.98}]},
        "unlocked": {"speedups": [{"1_ReLU": 0.80, "3_Sigmoid": None}, {"1_ReLU": 0.9, "3_Sigmoid": 1.5}]},
    }
    out = side_by_side.report({"phases": phases}, args, partial=False)
    assert out["alone_vs_alone"] == {"1_ReLU": 0.004, "3_Sigmoid": 0.005} and out["bound"] == 0.02
    assert out["locked_vs_alone"] == {"1_ReLU": 0.01, "3_Sigmoid": 0.01} and out["meets_target"] is True
    assert out["unlocked_vs_alone"] == {"1_ReLU": 0.2}  # 3_Sigmoid untimed in one run: not compared
    phases["locked"]["speedups"][1]["3_Sigmoid"] = 1.9
    assert side_by_side.report({"phases": phases}, args, partial=False)["meets_target"] is False
    cpu = argparse.Namespace(**{**vars(args), "device": "cpu"})
    assert side_by_side.report({"phases": phases}, cpu, partial=False)["meets_target"] is False  # no figure on a CPU
    assert "meets_target" not in side_by_side.report({"phases": phases}, args, partial=True)


def test_a_smoke_run_on_the_cpu_fills_every_phase(tmp_path, own_workers):
    import subprocess

    from tests.test_cli_subprocess import kz_env

    out = tmp_path / "sbs.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "run", "side_by_side", "--device", "cpu", "--size", "small",
         "--problems", "1_ReLU", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env=kz_env(),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert set(report["phases"]) == {"alone", "again", "locked", "unlocked"} and report["partial"] is False
    assert [len(report["phases"][p]["speedups"]) for p in ("alone", "again", "locked", "unlocked")] == [1, 1, 2, 2]
    assert set(report["phases"]["alone"]["speedups"][0]) == {"1_ReLU"} and report["meets_target"] is False

"""Each phase's CPU seconds are recorded beside its wall seconds, counting the CPU its child processes spent
(those that ended and those still running, such as the evaluator's workers), and bench/phase_seconds.py reports
them as JSON, so that a slowdown of the demo shows as a number."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from kzcore.train.schedule import Schedule, run_schedule

ROOT = Path(__file__).resolve().parent.parent
BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5:\n    pass\n"


def test_a_phase_counts_the_cpu_of_its_children(tmp_path):
    """One child runs to its end inside the phase, one burns its CPU and then outlives the phase (as the
    evaluator's workers do): the phase's CPU seconds hold both, though the trainer itself only waits."""
    done = tmp_path / "burnt"
    live = None

    def handler(phase, phase_dir):
        nonlocal live
        subprocess.run([sys.executable, "-c", BURN], check=True)
        script = BURN + f"open({str(done)!r}, 'w').close()\ntime.sleep(60)\n"
        live = subprocess.Popen([sys.executable, "-c", script])
        deadline = time.monotonic() + 300
        while not done.exists():
            assert live.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        return {}

    try:
        state = run_schedule(
            Schedule(rounds=0), {"distill": handler, "sft": lambda p, d: {}}, tmp_path, log=lambda s: None
        )
    finally:
        live.kill()
        live.wait()
    metrics = state["metrics"]["00-distill"]
    assert metrics["cpu_seconds"] >= 1.0  # 0.5 s burnt by each child
    assert state["metrics"]["00-sft"]["cpu_seconds"] < 0.5  # the live child sleeps through the next phase


def test_the_bench_reports_each_phase(tmp_path):
    state = {
        "done": ["00-distill", "00-sft"],
        "metrics": {
            "00-distill": {"seconds": 20.0, "cpu_seconds": 31.5, "kept": 40},
            "00-sft": {"seconds": 150.0, "cpu_seconds": 290.25, "train_seconds": 140.0, "resumed_at_step": 0},
        },
    }
    (tmp_path / "state.json").write_text(json.dumps(state))
    out = tmp_path / "report.json"
    command = [sys.executable, "bench/phase_seconds.py", "--run-dir", str(tmp_path), "--out", str(out)]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report == json.loads(out.read_text())
    assert report["phases"] == {
        "00-distill": {"seconds": 20.0, "cpu_seconds": 31.5},
        "00-sft": {"seconds": 150.0, "cpu_seconds": 290.25, "train_seconds": 140.0, "resumed_at_step": 0},
    }
    assert report["seconds"] == 170.0 and report["cpu_seconds"] == 321.75 and report["bench"] == "phase_seconds"
    empty = subprocess.run(
        [sys.executable, "bench/phase_seconds.py", "--run-dir", str(tmp_path / "none")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert empty.returncode == 1 and empty.stderr.strip().endswith(
        "has no finished phase (run the config first, or --run)"
    )

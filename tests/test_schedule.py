"""The alternating schedule: phases in order with the configured step counts, lifecycle hooks fired,
the Proposer frozen after round X, and resume after a kill at a phase boundary."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from kzcore.train.schedule import Schedule, read_state, run_schedule
from tests import fakes_train

ROOT = Path(__file__).resolve().parent.parent


def test_phases_alternate_with_configured_steps():
    phases = Schedule(rounds=2, proposer_steps=20, coder_steps=15).phases()
    assert [(p.role, p.round, p.steps) for p in phases] == [
        ("distill", 0, 0), ("sft", 0, 0), ("proposer", 1, 20), ("coder", 1, 15), ("proposer", 2, 20), ("coder", 2, 15),
    ]  # fmt: skip


def test_freeze_proposer_after_round():
    phases = Schedule(rounds=3, proposer_steps=5, coder_steps=5, cold_start=False, freeze_proposer_after=1).phases()
    assert [(p.role, p.round, p.frozen) for p in phases] == [
        ("proposer", 1, False), ("coder", 1, False), ("proposer", 2, True), ("coder", 2, False),
        ("proposer", 3, True), ("coder", 3, False),
    ]  # fmt: skip


def test_run_schedule_fires_hooks_in_order(plugins, tmp_path):
    pm = plugins("tests.fakes_train")
    fakes_train.EVENTS.clear()
    seen = []
    handlers = dict.fromkeys(
        ("distill", "sft", "proposer", "coder"), lambda ph, d: seen.append(ph.role) or {"steps": ph.steps}
    )
    state = run_schedule(
        Schedule(rounds=1, proposer_steps=2, coder_steps=3), handlers, tmp_path, pm=pm, log=lambda s: None
    )
    assert seen == ["distill", "sft", "proposer", "coder"]
    assert fakes_train.EVENTS == [
        ("start", "distill", 0, 0), ("end", "distill", 0, 0), ("start", "sft", 0, 0), ("end", "sft", 0, 0),
        ("start", "proposer", 1, 2), ("end", "proposer", 1, 2), ("start", "coder", 1, 3), ("end", "coder", 1, 3),
    ]  # fmt: skip
    assert state["done"] == ["00-distill", "00-sft", "01-proposer", "01-coder"]
    assert state["metrics"]["01-coder"]["seconds"] >= 0


def test_resume_after_kill_mid_phase(tmp_path):
    """Kill the run while round 1's Coder phase is running; a re-run redoes that phase and continues."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.fakes_train", str(tmp_path), "coder"], cwd=ROOT)
    log = tmp_path / "log.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (log.exists() and '"coder", 1' in log.read_text()):
        time.sleep(0.1)
    proc.kill()
    proc.wait(10)
    assert read_state(tmp_path)["done"] == ["00-distill", "00-sft", "01-proposer"]
    subprocess.run([sys.executable, "-m", "tests.fakes_train", str(tmp_path), "none"], cwd=ROOT, check=True, timeout=60)
    runs = [json.loads(x) for x in log.read_text().splitlines()]
    assert [(r[0], r[1]) for r in runs] == [
        ("distill", 0), ("sft", 0), ("proposer", 1), ("coder", 1),  # first process, killed in coder 1
        ("coder", 1), ("proposer", 2), ("coder", 2),  # resumed: finished phases are not run again
    ]  # fmt: skip
    assert len({r[2] for r in runs[:4]} | {r[2] for r in runs[4:]}) == 2
    assert read_state(tmp_path)["done"][-1] == "02-coder"


def test_until_stops_after_the_named_phase_and_a_later_run_resumes(plugins, tmp_path):
    """`kz train --until 00-distill` builds the cold-start set on one machine; the same run dir, carried to
    another, resumes at SFT."""
    pm = plugins("tests.fakes_train")
    seen = []
    handlers = dict.fromkeys(("distill", "sft", "proposer", "coder"), lambda ph, d: seen.append(ph.role) or {})
    schedule = Schedule(rounds=1, proposer_steps=2, coder_steps=3)
    state = run_schedule(schedule, handlers, tmp_path, pm=pm, log=lambda s: None, until="00-distill")
    assert seen == ["distill"] and state["done"] == ["00-distill"]
    state = run_schedule(schedule, handlers, tmp_path, pm=pm, log=lambda s: None)
    assert seen == ["distill", "sft", "proposer", "coder"]
    assert state["done"] == ["00-distill", "00-sft", "01-proposer", "01-coder"]


def test_until_a_phase_the_schedule_lacks_names_the_ones_it_has(tmp_path):
    import pytest

    from kzcore.errors import KzError

    with pytest.raises(KzError, match=r"--until '02-coder'.*its phases: 00-distill, 00-sft, 01-proposer, 01-coder"):
        run_schedule(Schedule(rounds=1), {}, tmp_path, log=lambda s: None, until="02-coder")
    assert read_state(tmp_path)["done"] == []

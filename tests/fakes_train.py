"""Lifecycle recorder plugin and a schedule driver for tests/test_schedule.py (importable by subprocesses)."""

import json
import os
import sys
import time
from pathlib import Path

from kzcore import hookimpl

EVENTS = []


@hookimpl
def kz_phase_start(phase):
    EVENTS.append(("start", phase.role, phase.round, phase.steps))


@hookimpl
def kz_phase_end(phase, metrics):
    EVENTS.append(("end", phase.role, phase.round, metrics.get("steps")))


def drive(run_dir: str, slow_role: str) -> None:
    """Run a 2-round schedule whose handlers log to run_dir/log.jsonl; `slow_role` in round 1 sleeps long."""
    from kzcore.train.schedule import Schedule, run_schedule

    def handler(phase, phase_dir):
        with open(Path(run_dir) / "log.jsonl", "a") as f:
            f.write(json.dumps([phase.role, phase.round, os.getpid()]) + "\n")
        if phase.role == slow_role and phase.round == 1:
            time.sleep(60)
        return {"steps": phase.steps}

    handlers = dict.fromkeys(("distill", "sft", "proposer", "coder"), handler)
    run_schedule(Schedule(rounds=2, proposer_steps=3, coder_steps=2), handlers, Path(run_dir), log=lambda s: None)


if __name__ == "__main__":
    drive(sys.argv[1], sys.argv[2])

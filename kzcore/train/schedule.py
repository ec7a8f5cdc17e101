"""The alternating schedule: cold start (distill, then SFT), then R rounds of Proposer steps and Coder
steps. Runs phases in order, fires the lifecycle hooks, and records each finished phase in a state file at
the phase boundary so a killed run resumes at the first unfinished phase.

Neighbours: `kzcore.train.trainer` supplies the phase handlers (distill, sft, proposer, coder);
this module knows nothing about models."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import attrs

from kzcore.errors import KzError
from kzcore.jsonl import write_text_atomic
from kzcore.types import Phase

STATE_FILE = "state.json"


@attrs.frozen
class Schedule:
    rounds: int = attrs.field(default=4, validator=attrs.validators.ge(0))
    proposer_steps: int = attrs.field(default=20, validator=attrs.validators.ge(0))
    coder_steps: int = attrs.field(default=20, validator=attrs.validators.ge(0))
    cold_start: bool = True
    # The frozen-Proposer ablation, in rounds or in Proposer steps (the method freezes at step 40): Proposer
    # training stops after this many rounds / once this many Proposer steps have trained (a phase is cut short
    # to end exactly there); later rounds' Proposer phases still propose tasks, with the frozen Proposer.
    # None: never frozen.
    freeze_proposer_after: int | None = None
    freeze_proposer_at_step: int | None = None

    def phases(self) -> list[Phase]:
        out = []
        if self.cold_start:
            out += [Phase("distill", 0, 0), Phase("sft", 0, 0)]
        trained = 0
        for r in range(1, self.rounds + 1):
            steps = self.proposer_steps
            if self.freeze_proposer_after is not None and r > self.freeze_proposer_after:
                steps = 0
            if self.freeze_proposer_at_step is not None:
                steps = min(steps, max(0, self.freeze_proposer_at_step - trained))
            if steps:
                out.append(Phase("proposer", r, steps))
                trained += steps
            elif self.proposer_steps:
                out.append(Phase("proposer", r, self.proposer_steps, frozen=True))
            if self.coder_steps:
                out.append(Phase("coder", r, self.coder_steps))
        return out


def phase_id(phase: Phase) -> str:
    return f"{phase.round:02d}-{phase.role}"


def read_state(run_dir: Path) -> dict:
    path = run_dir / STATE_FILE
    if not path.exists():
        return {"done": [], "metrics": {}}
    return json.loads(path.read_text())


def _write_state(run_dir: Path, state: dict) -> None:
    write_text_atomic(run_dir / STATE_FILE, json.dumps(state, indent=2))  # a kill leaves the old state or the new


Handler = Callable[[Phase, Path], dict[str, float]]


def cpu_seconds() -> float:
    """CPU seconds (user + system) used so far by this process and its children: those that ended (getrusage)
    and those still running, such as the evaluator's workers, which live across phases (psutil, where
    installed). The difference of two readings is a phase's CPU cost, whichever process spent it."""
    import resource

    used = sum(
        r.ru_utime + r.ru_stime
        for r in (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    )
    try:
        import psutil
    except ImportError:
        return used
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.Error:  # ended between the listing and the reading: getrusage counts it once reaped
            continue
        # with what its own ended children used (a worker's compiler processes)
        used += (
            times.user + times.system + getattr(times, "children_user", 0.0) + getattr(times, "children_system", 0.0)
        )
    return used


def phases_until(schedule: Schedule, until: str | None = None) -> list[Phase]:
    """The schedule's phases, up to and including the phase with id ``until`` (e.g. ``"00-distill"``); all of
    them when ``until`` is None. An id the schedule does not have is an error naming the ones it has."""
    phases = schedule.phases()
    if until is None:
        return phases
    ids = [phase_id(p) for p in phases]
    if until not in ids:
        raise KzError(f"--until {until!r}: no such phase in this schedule; its phases: {', '.join(ids)}")
    return phases[: ids.index(until) + 1]


def run_schedule(
    schedule: Schedule, handlers: dict[str, Handler], run_dir: Path, pm=None, log=print, until: str | None = None
) -> dict:
    """Run every unfinished phase (up to ``until``, see ``phases_until``): ``handlers[role](phase, phase_dir)
    -> metrics``. Returns the state."""
    from kzcore.plugins import get_plugin_manager

    pm = pm or get_plugin_manager()
    run_dir.mkdir(parents=True, exist_ok=True)
    state = read_state(run_dir)
    phases = phases_until(schedule, until)
    for i, phase in enumerate(phases, 1):
        pid = phase_id(phase)
        if pid in state["done"]:
            log(f"phase {i}/{len(phases)} {pid}: done in an earlier run, skipped")
            continue
        steps = f", {phase.steps} step{'s' if phase.steps != 1 else ''}" if phase.steps else ""
        log(f"phase {i}/{len(phases)} {pid}: starting ({phase.role}{steps}{', frozen' if phase.frozen else ''})")
        phase_dir = run_dir / "phases" / pid
        phase_dir.mkdir(parents=True, exist_ok=True)
        pm.hook.kz_phase_start(phase=phase)
        t0, cpu0 = time.perf_counter(), cpu_seconds()
        metrics = dict(handlers[phase.role](phase, phase_dir))
        metrics["seconds"] = round(time.perf_counter() - t0, 3)
        metrics["cpu_seconds"] = round(cpu_seconds() - cpu0, 3)  # bench/phase_seconds.py reports both
        pm.hook.kz_phase_end(phase=phase, metrics=metrics)
        state["done"].append(pid)
        state["metrics"][pid] = metrics
        _write_state(run_dir, state)
        log(f"phase {pid}: {metrics}")
    return state

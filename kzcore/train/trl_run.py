"""Running one TRL trainer (SFT or GRPO) for a phase, the same way in every phase: the trainer's state saved
every few minutes (or every N steps) into ``OUT/checkpoint-STEP``, only the newest kept, and resumed from when
the same command runs again; every checkpoint removed once the phase's model is saved; the libraries' bars and
metric dicts replaced by one line per step when asked (``quiet``); and the text Ctrl-C prints, saying what an
interrupted phase kept.

Neighbours: kzcore.train.sft and kzcore.train.coder build the trainers (kzcore.train.precision picks their
dtype); kzcore.cli prints `InterruptNote`. transformers is imported only inside the functions that need it."""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from kzcore.errors import KzError
from kzcore.jsonl import write_text_atomic

CHECKPOINT = "checkpoint-"
TRAINER_STATE = "trainer_state.json"  # transformers writes it last into a checkpoint: one without it is torn
IDENTITY = "kz-resume.json"  # what the checkpoints in a directory were trained from
# settings that may change between an interrupted run and its resumption without changing what is trained
NOT_IDENTITY = ("save_steps", "save_minutes", "report_to", "logging_steps")


def checkpoint_step(path: Path) -> int | None:
    """The step of a ``checkpoint-STEP`` directory, None for any other name."""
    suffix = path.name[len(CHECKPOINT) :] if path.name.startswith(CHECKPOINT) else ""
    return int(suffix) if suffix.isdigit() else None


def checkpoint_progress(checkpoint: Path) -> tuple[int, int] | None:
    """(steps done, steps of the phase) of a complete checkpoint; None for a torn one (cut in its writing)."""
    try:
        state = json.loads((checkpoint / TRAINER_STATE).read_text())
        return int(state["global_step"]), int(state["max_steps"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def last_checkpoint(output_dir: Path) -> Path | None:
    """The newest complete checkpoint in ``output_dir``, or None."""
    if not output_dir.is_dir():
        return None
    steps = sorted(
        ((checkpoint_step(p), p) for p in output_dir.iterdir() if p.is_dir() and checkpoint_step(p) is not None),
        reverse=True,
    )
    return next((p for _, p in steps if checkpoint_progress(p) is not None), None)


def remove_checkpoints(output_dir: Path, keep: Path | None = None) -> None:
    """Delete every ``checkpoint-*`` directory in ``output_dir`` but ``keep``."""
    if not output_dir.is_dir():
        return
    for path in output_dir.iterdir():
        if path.is_dir() and checkpoint_step(path) is not None and path != keep:
            shutil.rmtree(path, ignore_errors=True)


def identity_of(model: str, settings: Any, **parts: Any) -> dict:
    """What a phase's checkpoints were trained from: the starting model, the settings that change training
    (not where and how often it saves or logs) and ``parts`` (a data file's or a dataset's hash)."""
    import attrs

    fields = {k: v for k, v in attrs.asdict(settings).items() if k not in NOT_IDENTITY}
    return json.loads(json.dumps({"model": str(model), "settings": fields, **parts}, default=str))


def rows_sha(rows: Iterable[Any]) -> str:
    """A hash of training rows (a dataset's prompts, an SFT file's rows), in order."""
    digest = hashlib.sha256()
    for row in rows:
        digest.update(json.dumps(row, sort_keys=True, default=str).encode())
    return digest.hexdigest()[:16]


def resume_point(output_dir: Path, identity: dict) -> Path | None:
    """The checkpoint to resume from in ``output_dir`` (None: start at step 0), after removing torn and older
    ones. Checkpoints of a different run (another model, data or settings, per ``identity``) are a KzError: they
    are never resumed from silently, nor deleted."""
    checkpoint = last_checkpoint(output_dir)
    recorded = output_dir / IDENTITY
    if checkpoint is not None and recorded.exists():
        try:
            before = json.loads(recorded.read_text())
        except ValueError:
            before = None
        if before != identity:
            changed = sorted(k for k in {*identity, *(before or {})} if (before or {}).get(k) != identity.get(k))
            raise KzError(
                f"{output_dir} holds {checkpoint.name} of a different run ({', '.join(changed) or 'unreadable'} "
                f"changed); delete {checkpoint} to start over, or use another output directory"
            )
    remove_checkpoints(output_dir, keep=checkpoint)
    write_text_atomic(recorded, json.dumps(identity, indent=1))
    return checkpoint


def save_every(steps: int, minutes: float):
    """A TrainerCallback asking for a checkpoint every ``steps`` steps and whenever ``minutes`` have passed since
    the last one (0 turns either off); never at the last step, after which the phase saves its model. Once a
    checkpoint is written the older ones are removed (transformers' own rotation would do it too, with a
    warning per save on filesystems whose mtime it distrusts)."""
    from transformers import TrainerCallback

    class SaveEvery(TrainerCallback):
        def __init__(self):
            self.last = time.monotonic()

        def on_train_begin(self, args, state, control, **kwargs):
            self.last = time.monotonic()

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step >= state.max_steps:
                return control
            by_steps = steps > 0 and state.global_step % steps == 0
            by_time = minutes > 0 and time.monotonic() - self.last >= minutes * 60
            if by_steps or by_time:
                control.should_save = True
            return control

        def on_save(self, args, state, control, **kwargs):
            self.last = time.monotonic()
            if state.is_world_process_zero:
                output_dir = Path(args.output_dir)
                remove_checkpoints(output_dir, keep=output_dir / f"{CHECKPOINT}{state.global_step}")

    return SaveEvery()


def save_cadence(steps: int, minutes: float) -> str:
    """How often `save_every` saves, in words: ``"every 5 minutes"``, ``"every 2 steps and every 5 minutes"``."""
    parts = [f"every {steps} step{'s' if steps != 1 else ''}"] if steps > 0 else []
    parts += [f"every {minutes:g} minute{'s' if minutes != 1 else ''}"] if minutes > 0 else []
    return " and ".join(parts) or "only at the end"


STEP_KEYS = ("loss", "reward", "reward_std")


def step_lines(label: str, log: Callable[[str], None]):
    """A TrainerCallback logging one line per logged step, for quiet runs: ``sft: step 2/4: loss 1.951 (37 s)``."""
    from transformers import TrainerCallback

    class StepLines(TrainerCallback):
        def __init__(self):
            self.t0 = time.monotonic()

        def on_train_begin(self, args, state, control, **kwargs):
            self.t0 = time.monotonic()

        def on_log(self, args, state, control, logs=None, **kwargs):
            shown = [f"{k} {logs[k]:.4g}" for k in STEP_KEYS if isinstance((logs or {}).get(k), (int, float))]
            if shown and state.is_world_process_zero:
                elapsed = time.monotonic() - self.t0
                log(f"{label}: step {state.global_step}/{state.max_steps}: {', '.join(shown)} ({elapsed:.0f} s)")

    return StepLines()


def quiet_libraries() -> None:
    """Turn off the progress bars transformers (loading weights) and datasets (tokenizing, mapping) draw."""
    import datasets
    import transformers

    transformers.utils.logging.disable_progress_bar()
    datasets.disable_progress_bars()


def train_phase(
    trainer, output_dir: Path, settings, label: str, identity: dict, log: Callable[[str], None] = print,
    quiet: bool = False, on_start: Callable[[int], None] | None = None,
) -> dict:  # fmt: skip
    """Train ``trainer`` (built with ``output_dir`` as its output directory) to its last step, resuming from
    the newest complete checkpoint there (`resume_point`); checkpoints every ``settings.save_steps`` steps /
    ``settings.save_minutes`` minutes, the newest one kept. ``on_start(step)`` runs before training with the
    step it starts at (0, or the checkpoint's), so a caller can drop what its reward logs wrote after that step.
    Saves the model and its tokenizer to ``output_dir``, then removes the checkpoints. Returns
    ``{"resumed_at_step", "train_seconds"}`` (seconds of this run's part)."""
    from transformers import PrinterCallback, ProgressCallback

    trainer.add_callback(save_every(settings.save_steps, settings.save_minutes))
    if quiet:
        trainer.remove_callback(PrinterCallback)  # TRL's metric dicts, one per step
        trainer.remove_callback(ProgressCallback)
        trainer.add_callback(step_lines(label, log))
    checkpoint = resume_point(output_dir, identity)
    step = checkpoint_step(checkpoint) if checkpoint is not None else 0
    if on_start is not None:
        on_start(step)
    if checkpoint is not None:
        log(f"{label}: resuming at step {step} of {trainer.args.max_steps} from {checkpoint}")
    t0 = time.perf_counter()
    trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint is not None else None)
    seconds = time.perf_counter() - t0
    trainer.save_model(str(output_dir))
    if trainer.is_world_process_zero():
        trainer.processing_class.save_pretrained(str(output_dir))
        remove_checkpoints(output_dir)
        (output_dir / IDENTITY).unlink(missing_ok=True)
    return {"resumed_at_step": step, "train_seconds": round(seconds, 3)}


# -- what an interrupted command kept ------------------------------------------------------------------

ROLE_LABELS = {"sft": "SFT", "coder": "Coder GRPO", "proposer": "Proposer GRPO"}


def kept_steps(dirs: Iterable[tuple[str, Path]]) -> list[str]:
    """``"LABEL kept S of N steps in CHECKPOINT"`` for each (label, output directory) holding a checkpoint."""
    kept = []
    for label, output_dir in dirs:
        checkpoint = last_checkpoint(output_dir)
        progress = checkpoint_progress(checkpoint) if checkpoint is not None else None
        if progress is not None:
            kept.append(f"{label} kept {progress[0]} of {progress[1]} steps in {checkpoint}")
    return kept


def unfinished_phase_dirs(run_dir: Path) -> list[tuple[str, Path]]:
    """(label, output directory) of every training phase of ``kz train``'s run that has not finished: its model
    directory, and the SFT phase's Proposer cold start."""
    from kzcore.train.schedule import read_state

    phases = run_dir / "phases"
    if not phases.is_dir():
        return []
    done = set(read_state(run_dir)["done"])
    dirs = []
    for phase_dir in sorted(p for p in phases.iterdir() if p.is_dir() and p.name not in done):
        label = ROLE_LABELS.get(phase_dir.name.split("-", 1)[-1], phase_dir.name)
        dirs += [(label, phase_dir / "model"), (f"{label} (the Proposer's cold start)", phase_dir / "proposer")]
    return dirs


class InterruptNote:
    """The text of the line Ctrl-C prints for a training command, worked out when it is printed: what each
    unfinished phase kept (``SFT kept 3 of 8 steps in runs/x/checkpoint-3``) and how to resume, else
    ``otherwise``."""

    def __init__(self, dirs: Callable[[], list[tuple[str, Path]]], resume: str, otherwise: str):
        self.dirs, self.resume, self.otherwise = dirs, resume, otherwise

    def __str__(self) -> str:
        kept = kept_steps(self.dirs())
        return "; ".join([*kept, self.resume]) if kept else self.otherwise

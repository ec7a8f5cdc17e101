"""Supervised fine-tuning on a distilled dataset with TRL's SFTTrainer (prompt/completion rows, so the loss
covers the completion only). Imports TRL lazily: the rest of kzcore works without it."""

from __future__ import annotations

from pathlib import Path

import attrs

from kzcore.errors import KzError
from kzcore.jsonl import read_jsonl_numbered


@attrs.frozen
class SFTSettings:
    max_steps: int = 20
    learning_rate: float = 2e-5
    batch_size: int = 2
    grad_accum: int = 1
    max_length: int = 4096
    seed: int = 0
    use_cpu: bool = False
    report_to: tuple[str, ...] = ()
    logging_steps: int = 1
    # the trainer's state is saved every save_steps steps and whenever save_minutes have passed since the last
    # save (0 turns either off); an interrupted run resumes from the newest save (kzcore.train.trl_run)
    save_steps: int = 0
    save_minutes: float = 5.0


def load_sft_rows(path: Path) -> list[dict]:
    """The prompt/completion rows of a distilled JSONL file. A torn last line is skipped with a warning; any
    other line that is not a JSON object with 'prompt' and 'completion' is a KzError naming it."""

    def reject(where: str, why: str) -> KzError:
        return KzError(f"{where}: SFT rows need 'prompt' and 'completion' (chat messages); not a JSON object ({why})")

    rows = []
    for lineno, row in read_jsonl_numbered(path, reject):
        if "prompt" not in row or "completion" not in row:
            raise KzError(f"{path}:{lineno}: SFT rows need 'prompt' and 'completion' (chat messages)")
        rows.append({"prompt": row["prompt"], "completion": row["completion"]})
    if not rows:
        raise KzError(f"{path}: no SFT rows (did distillation keep anything?)")
    return rows


def run_sft(
    model: str, data: Path, output_dir: Path, settings: SFTSettings = SFTSettings(), log=print, quiet: bool = False,
    label: str = "sft", callbacks: tuple = (),
) -> dict:  # fmt: skip
    """Fine-tune the checkpoint at ``model`` on ``data``; saves to ``output_dir``; returns metrics. Resumes from
    the newest checkpoint a run of the same model, data and settings left in ``output_dir``; ``quiet`` replaces
    the libraries' bars and metric dicts with one ``log`` line per step; ``callbacks`` are extra TrainerCallbacks."""
    try:
        from datasets import Dataset
        from trl import SFTConfig, SFTTrainer
    except ImportError as exc:
        raise KzError(f"SFT needs trl and datasets ({exc}); pip install 'kzcore[train]'") from None
    from kzcore.train.precision import trainer_precision
    from kzcore.train.trl_run import identity_of, quiet_libraries, rows_sha, train_phase

    if not Path(model).is_dir():
        raise KzError(f"--model {model}: not a checkpoint directory")
    if quiet:
        quiet_libraries()
    rows = load_sft_rows(Path(data))
    args = SFTConfig(
        output_dir=str(output_dir),
        max_steps=settings.max_steps,
        learning_rate=settings.learning_rate,
        per_device_train_batch_size=settings.batch_size,
        gradient_accumulation_steps=settings.grad_accum,
        max_length=settings.max_length,
        seed=settings.seed,
        use_cpu=settings.use_cpu,
        report_to=list(settings.report_to) or "none",
        logging_steps=settings.logging_steps,
        save_strategy="no",  # checkpoints are asked for by trl_run's callback (every N steps or minutes)
        disable_tqdm=quiet,
        completion_only_loss=True,
        include_num_input_tokens_seen="non_padding",  # the "tokens" metric, kept in the trainer's state on resume
        **trainer_precision(settings.use_cpu),
    )
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), callbacks=list(callbacks))
    if len(trainer.train_dataset) == 0:  # TRL drops rows whose completion truncation leaves no token of
        raise KzError(f"{data}: no SFT row keeps a completion token within max_length {settings.max_length}")
    identity = identity_of(model, settings, data=rows_sha(rows))
    run = train_phase(trainer, Path(output_dir), settings, label, identity, log=log, quiet=quiet)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return {
        "examples": len(rows),
        "steps": trainer.state.global_step,
        "loss_first": losses[0] if losses else float("nan"),
        "loss_last": losses[-1] if losses else float("nan"),
        "tokens": trainer.state.num_input_tokens_seen,  # prompt and completion tokens trained on, padding not
        **run,
    }

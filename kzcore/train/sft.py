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


def run_sft(model: str, data: Path, output_dir: Path, settings: SFTSettings = SFTSettings()) -> dict:
    """Fine-tune the checkpoint at ``model`` on ``data``; saves to ``output_dir``; returns metrics."""
    try:
        from datasets import Dataset
        from trl import SFTConfig, SFTTrainer
    except ImportError as exc:
        raise KzError(f"SFT needs trl and datasets ({exc}); pip install 'kzcore[train]'") from None
    if not Path(model).is_dir():
        raise KzError(f"--model {model}: not a checkpoint directory")
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
        save_strategy="no",
        completion_only_loss=True,
    )
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows))
    result = trainer.train()
    trainer.save_model(str(output_dir))
    trainer.processing_class.save_pretrained(str(output_dir))
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return {
        "examples": len(rows),
        "steps": trainer.state.global_step,
        "loss_first": losses[0] if losses else float("nan"),
        "loss_last": losses[-1] if losses else float("nan"),
        "train_seconds": result.metrics.get("train_runtime", 0.0),
    }

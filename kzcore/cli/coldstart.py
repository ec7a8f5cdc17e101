"""The cold start: `kz distill` (teacher kernels, verified, into an SFT dataset) and `kz sft` (fine-tuning a
checkpoint on it)."""

from __future__ import annotations

import json
from pathlib import Path

from kzcore.cli.options import KERNELBENCH_HELP, _add_eval_args, _add_workers, _config_from, _load_problems, ranged
from kzcore.types import Command


def _cmd_distill(args) -> int:
    from rich.console import Console

    from kzcore.plugins import require_language
    from kzcore.train.distill import distill

    args.language = args.language or ["triton"]
    for language in args.language:
        require_language(language)
    problems = _load_problems(args.problems, args.kernelbench)
    args.saved = f"teacher samples and results so far are in {args.out}; run the same command again to resume"
    kind, _, arg = args.teacher.partition(":")
    teacher = None
    if kind != "solutions":
        from kzcore.policy import load_policy

        teacher = load_policy(args.teacher)
    try:
        summary = distill(
            problems, args.language, Path(args.out), _config_from(args), teacher=teacher,
            solutions=arg if kind == "solutions" else None, k=args.k, only_faster=args.only_faster,
            template=args.template, workers=args.workers,
        )  # fmt: skip
    finally:
        if teacher is not None:
            teacher.close()
    console = Console()
    console.print(
        f"{summary.candidates} candidates, {summary.correct} correct, {summary.kept} kept -> {summary.dataset}"
    )
    if summary.note:
        console.print(f"[yellow]{summary.note}[/yellow]")
    return 0


def _cmd_sft(args) -> int:
    from kzcore.train.sft import SFTSettings, run_sft
    from kzcore.train.trl_run import InterruptNote, save_cadence

    settings = SFTSettings(
        max_steps=args.max_steps, learning_rate=args.lr, batch_size=args.batch_size, max_length=args.max_length,
        use_cpu=args.cpu, report_to=tuple(args.report_to), save_steps=args.save_steps, save_minutes=args.save_minutes,
    )  # fmt: skip
    args.saved = InterruptNote(
        lambda: [("SFT", Path(args.out))], "run the same command again to resume",
        f"nothing was saved (kz sft saves its state to {args.out} {save_cadence(args.save_steps, args.save_minutes)})",
    )  # fmt: skip
    metrics = run_sft(args.model, Path(args.data), Path(args.out), settings, quiet=args.quiet)
    print(json.dumps(metrics))
    return 0


def _configure_distill(parser) -> None:
    parser.description = (
        "The cold start: kernels from a teacher policy (or a suite's reference solutions) are "
        "evaluated, and the correct ones (with --only-faster, the faster ones) become prompt/completion rows "
        "in OUT/sft.jsonl for kz sft. Teacher samples and results are kept in --out; the same command resumes."
    )
    parser.add_argument("--teacher", required=True, help="a policy spec, or solutions:SUITE for a suite's references")
    parser.add_argument("--problems", required=True, help="builtin[:levels], a directory, a .py file or a .jsonl")
    parser.add_argument("--language", action="append", default=None, help="repeatable (default: triton)")
    parser.add_argument("-k", type=ranged(int, 1), default=4, help="teacher samples per problem and language")
    parser.add_argument("--only-faster", action="store_true", help="keep only kernels faster than eager (GPU)")
    parser.add_argument("--template", default="principles", help="prompt template: kernelbench | principles")
    parser.add_argument("--out", default="runs/distill", help="output directory (sft.jsonl and the verified kernels)")
    _add_workers(parser)
    parser.add_argument("--kernelbench", default=None, metavar="PATH", help=KERNELBENCH_HELP)
    _add_eval_args(parser)


def _configure_sft(parser) -> None:
    parser.description = (
        "Supervised fine-tuning of a local checkpoint on the sft.jsonl of kz distill with TRL's "
        "SFTTrainer (the loss covers the completions only); the model is saved to --out at the end and the "
        "metrics are printed as JSON. Needs the train extra (trl, datasets)."
    )
    parser.add_argument("--model", required=True, help="a checkpoint directory")
    parser.add_argument("--data", required=True, help="sft.jsonl from kz distill")
    parser.add_argument("--out", default="runs/sft", help="output directory for the fine-tuned checkpoint")
    parser.add_argument("--max-steps", type=ranged(int, 1), default=20, help="optimizer steps")
    parser.add_argument("--lr", type=ranged(float, 0, low_open=True), default=2e-5, help="learning rate")
    parser.add_argument("--batch-size", type=ranged(int, 1), default=2, help="examples per device per step")
    parser.add_argument(
        "--max-length", type=ranged(int, 1), default=4096, help="longest example in tokens (longer are cut)"
    )
    parser.add_argument("--cpu", action="store_true", help="train on the CPU (required on a machine without CUDA)")
    parser.add_argument("--report-to", action="append", default=[], help="e.g. tensorboard")
    parser.add_argument(
        "--save-steps", type=ranged(int, 0), default=0, help="save the trainer's state every N steps (0: by time)"
    )
    parser.add_argument(
        "--save-minutes", type=ranged(float, 0), default=5.0,
        help="save the trainer's state when this many minutes passed since the last save (0: by steps only); "
        "the same command resumes from the newest save",
    )  # fmt: skip
    parser.add_argument("--quiet", action="store_true", help="one line per step, no progress bars or metric dicts")


def commands() -> list[Command]:
    """`kz distill` and `kz sft`, as kzcore.builtins.commands registers them."""
    return [
        Command(
            name="distill", run=_cmd_distill, help="cold start: teacher kernels, verified, into an SFT dataset",
            configure=_configure_distill,
        ),
        Command(
            name="sft", run=_cmd_sft, help="fine-tune a checkpoint on a distilled dataset (TRL SFTTrainer)",
            configure=_configure_sft,
        ),
    ]  # fmt: skip

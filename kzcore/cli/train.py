"""`kz train`: the alternating KernelZero trainer from a TOML config (`--dry-run` prints its plan)."""

from __future__ import annotations

from pathlib import Path

from kzcore.cli.options import UsageError, ranged
from kzcore.types import Command


def _cmd_train(args) -> int:
    from kzcore.train.config import check_device, load_config
    from kzcore.train.schedule import phases_until

    config = load_config(Path(args.config))  # types checked here and the device below: before any phase runs
    if args.dry_run:
        from kzcore.train.plan import format_plan, launcher_processes, training_plan

        plan = training_plan(config, launcher_processes(args.accelerate_config, args.processes))
        print("\n".join(format_plan(plan)))
        return 0
    if args.processes is not None or args.accelerate_config is not None:
        raise UsageError("--processes and --accelerate-config only go with --dry-run (launch with accelerate launch)")
    roles = None if args.until is None else {p.role for p in phases_until(config.schedule, args.until)}
    check_device(config, roles=roles)
    if args.run_dir:
        import attrs

        config = attrs.evolve(config, run=attrs.evolve(config.run, dir=args.run_dir))
    from kzcore.train.trainer import Trainer

    trainer = Trainer(config)
    from kzcore.train.trl_run import InterruptNote, unfinished_phase_dirs

    resume = f"finished phases are recorded in {config.run.dir}; run the same command again to resume"
    args.saved = InterruptNote(lambda: unfinished_phase_dirs(Path(config.run.dir)), resume, resume)
    state = trainer.run(until=args.until)
    run_dir = Path(config.run.dir)
    print(f"phases done: {', '.join(state['done'])}")
    print(f"logs: {run_dir / 'state.json'} and {run_dir / 'phases'}/*/")
    print(f"checkpoints: {run_dir / 'phases'}/*/model")
    print(f"plots: {run_dir / 'curves.png'}")
    return 0


def _configure(parser) -> None:
    parser.description = (
        "The KernelZero schedule from a TOML config: a cold start (distillation, then SFT), then "
        "rounds of Proposer phases that grow the task pool and Coder GRPO phases that train on it, scored on "
        "held-out problems. The config is checked before any phase runs; finished phases are recorded in the "
        "run directory, so the same command resumes."
    )
    parser.add_argument("--config", required=True, help="TOML config (docs/training.md lists every key)")
    parser.add_argument("--run-dir", default=None, help="override [run] dir")
    parser.add_argument(
        "--until", default=None, metavar="PHASE",
        help="stop after this phase id (e.g. 00-distill: build the cold-start set here, train elsewhere)",
    )  # fmt: skip
    parser.add_argument(
        "--dry-run", action="store_true",
        help="print the plan (phases, processes, batch layout, evaluator workers, what exists here); train nothing",
    )  # fmt: skip
    parser.add_argument(
        "--processes", type=ranged(int, 1), default=None, help="with --dry-run: training processes (one GPU each)"
    )  # fmt: skip
    parser.add_argument(
        "--accelerate-config", default=None, metavar="YAML",
        help="with --dry-run: take the process count from this accelerate config's num_processes",
    )  # fmt: skip


def commands() -> list[Command]:
    """`kz train`, as kzcore.builtins.commands registers it."""
    return [
        Command(
            name="train", run=_cmd_train, help="the alternating KernelZero trainer from a TOML config",
            configure=_configure,
        )
    ]  # fmt: skip

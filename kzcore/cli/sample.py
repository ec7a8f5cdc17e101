"""`kz sample`: completions from a policy into a completions JSONL, without evaluating them. `_sample` is
also how `kz eval --policy` gets its candidates."""

from __future__ import annotations

from pathlib import Path

from kzcore.cli.options import KERNELBENCH_HELP, _add_only, _add_policy_args, _load_problems, _only
from kzcore.types import Command


def _sampling_params(args):
    from kzcore.policy import SamplingParams

    return SamplingParams(
        n=args.n, temperature=args.temperature, top_p=args.top_p, max_new_tokens=args.max_new_tokens, seed=args.seed
    )


def _sample(args, problems, out: Path, console):
    """Sample ``args.n`` completions per problem from ``args.policy`` into ``out``; returns the candidates."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from kzcore.policy import load_policy
    from kzcore.sampling import sample_candidates

    policy = load_policy(args.policy)
    progress = Progress(
        TextColumn(f"[bold]sampling {args.policy}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )
    try:
        with progress:
            task = progress.add_task("", total=len(problems))
            return sample_candidates(
                policy, problems, args.language, _sampling_params(args), out, template=args.template,
                batch_size=args.batch_size, on_batch=lambda k: progress.update(task, advance=k),
            )  # fmt: skip
    finally:
        policy.close()


def _cmd_sample(args) -> int:
    from rich.console import Console

    from kzcore.plugins import require_language

    require_language(args.language)
    problems = _only(_load_problems(args.problems, args.kernelbench), args.only, args.problems)
    console = Console(stderr=True)
    args.saved = f"completions so far are in {args.out}; run the same command again to resume"
    candidates = _sample(args, problems, Path(args.out), console)
    Console().print(f"{len(candidates)} completions for {len(problems)} problems in {args.out}")
    return 0


def _configure(parser) -> None:
    parser.description = (
        "Prompt a policy (a model backend, NAME[:ARG]) with each problem and append its "
        "completions to --out, without evaluating them; the same command resumes, asking only for what is "
        "missing. kz eval --solutions OUT evaluates them later."
    )
    parser.add_argument("--problems", required=True, help="builtin[:levels], a directory, a .py file or a .jsonl")
    parser.add_argument("--language", default="triton", help="kernel language the policy is asked to write")
    parser.add_argument("--out", default="runs/completions.jsonl", help="completions JSONL (appended; resumes)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed")
    parser.add_argument("--kernelbench", default=None, metavar="PATH", help=KERNELBENCH_HELP)
    _add_only(parser, "sample for", ", each keeping its level")
    _add_policy_args(parser, "the policy backend, NAME[:ARG]")


def commands() -> list[Command]:
    """`kz sample`, as kzcore.builtins.commands registers it."""
    return [
        Command(
            name="sample", run=_cmd_sample, help="sample candidate solutions from a policy into a completions JSONL",
            configure=_configure,
        )
    ]  # fmt: skip

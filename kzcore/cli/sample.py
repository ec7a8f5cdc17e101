"""`kz sample`: completions from a policy into a completions JSONL, without evaluating them. Its sampling
options and bar are also `kz eval --policy`'s."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from kzcore.cli.options import KERNELBENCH_HELP, _add_only, _add_policy_args, _load_problems, _only
from kzcore.types import Command


def _sampling_params(args):
    from kzcore.policy import SamplingParams

    return SamplingParams(
        n=args.n, temperature=args.temperature, top_p=args.top_p, max_new_tokens=args.max_new_tokens, seed=args.seed
    )


def _sampling_progress(policy: str, console):
    """The sampling bar of `kz sample` and `kz eval --policy`, in the shape `evaluate_policy` takes as
    ``sampling``: a context around the sampling whose value advances the bar by each batch's prompts."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(
        TextColumn(f"[bold]sampling {policy}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )

    @contextmanager
    def sampling(reused: int, todo: int) -> Iterator[Callable[[int], None]]:
        with progress:
            task = progress.add_task("", total=reused + todo)
            yield lambda k: progress.update(task, advance=k)

    return sampling


def _cmd_sample(args) -> int:
    from rich.console import Console

    from kzcore.plugins import require_language
    from kzcore.policy import load_policy
    from kzcore.sampling import sample_candidates

    require_language(args.language)
    problems = _only(_load_problems(args.problems, args.kernelbench), args.only, args.problems)
    console = Console(stderr=True)
    args.saved = f"completions so far are in {args.out}; run the same command again to resume"
    policy = load_policy(args.policy)
    try:
        with _sampling_progress(args.policy, console)(0, len(problems)) as on_batch:
            candidates = sample_candidates(
                policy, problems, args.language, _sampling_params(args), Path(args.out), template=args.template,
                batch_size=args.batch_size, on_batch=on_batch,
            )  # fmt: skip
    finally:
        policy.close()
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

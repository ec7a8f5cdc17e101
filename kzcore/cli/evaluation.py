"""`kz eval`: candidates from --solutions, or sampled first from --policy (kzcore.evaluate.policy_eval), evaluated
into a results file that the same command resumes; a score table ends the run."""

from __future__ import annotations

from pathlib import Path

from kzcore.cli.options import (
    INCLUDE_DEGENERATE_HELP,
    KERNELBENCH_HELP,
    UsageError,
    _add_eval_args,
    _add_only,
    _add_policy_args,
    _add_workers,
    _config_from,
    _load_problems,
    _only,
    ranged,
)
from kzcore.cli.report import _print_scores
from kzcore.errors import KzError
from kzcore.types import Command


def _cmd_eval(args) -> int:
    from rich.console import Console

    from kzcore.plugins import require_language

    console = Console(stderr=True)
    if bool(args.solutions) == bool(args.policy):  # sampling a whole suite must never start by default
        raise UsageError(
            "kz eval needs --solutions (candidates to evaluate) or --policy (a model to sample them from)"
            if not args.solutions
            else "kz eval takes --solutions or --policy, not both"
        )
    config = _config_from(args)
    _note_gpu_only(require_language(args.language), config.device, console)
    problems = _only(_load_problems(args.problems, args.kernelbench), args.only, args.problems)
    out = Path(args.out)
    display = _EvaluationDisplay(out, console)
    if args.solutions:
        candidates, results = _evaluate_solutions(args, problems, config, out, display, console)
    else:
        candidates, results = _sample_and_evaluate(args, problems, config, out, display, console)
    covered = {(c.level, c.problem) for c in candidates}
    k = min([args.k] + [sum(1 for c in candidates if (c.level, c.problem) == key) for key in covered])
    _print_scores(results, max(1, k), [(p.level, p.name) for p in problems], args.include_degenerate, Console())
    Console().print(f"results: {out}")
    return 0


def _evaluate_solutions(args, problems, config, out: Path, display, console):
    """`kz eval --solutions`: (the candidates of --solutions, their results)."""
    from kzcore.evaluate.runner import evaluate
    from kzcore.problems import load_solutions

    candidates = load_solutions(args.solutions, problems, args.language)
    _check_candidates(candidates, problems, args.solutions, console)
    args.saved = f"results so far are in {out}; run the same command again to resume"
    with display.progress:
        results = evaluate(
            problems, candidates, config, out, executor=args.executor, workers=args.workers,
            on_result=display.on_result, on_start=display.on_start, on_stale=display.on_stale,
            on_unchecked=display.on_unchecked,
        )  # fmt: skip
    return candidates, results


def _sample_and_evaluate(args, problems, config, out: Path, display, console):
    """`kz eval --policy`: (the candidates sampled into --completions, their results), by `evaluate_policy`;
    the policy is closed before the candidates run."""
    from kzcore.cli.sample import _sampling_params, _sampling_progress
    from kzcore.evaluate.policy_eval import cost_line, evaluate_policy
    from kzcore.policy import load_policy

    completions = Path(args.completions or out.with_suffix(".completions.jsonl"))
    args.saved = f"completions so far are in {completions}; run the same command again to resume"

    def on_sampled(candidates) -> None:
        console.print(f"completions: {completions}")
        _check_candidates(candidates, problems, None, console)
        args.saved = f"results so far are in {out}; run the same command again to resume"

    params, sampling = _sampling_params(args), _sampling_progress(args.policy, console)
    evaluation = evaluate_policy(
        load_policy(args.policy), problems, args.language, params, config, completions, out,
        template=args.template, batch_size=args.batch_size, executor=args.executor, workers=args.workers,
        close_policy=True, sampling=sampling, on_sampled=on_sampled, evaluating=display.progress,
        on_start=display.on_start, on_result=display.on_result, on_stale=display.on_stale,
        on_unchecked=display.on_unchecked,
    )  # fmt: skip
    console.print(cost_line(evaluation.cost, completions))
    return evaluation.candidates, evaluation.results


def _check_candidates(candidates, problems, source: str | None, console) -> None:
    """Name the problems without a candidate (they score 0); none at all is an error."""
    covered = {(c.level, c.problem) for c in candidates}
    missing = [p.key for p in problems if (p.level, p.name) not in covered]
    if missing:
        console.print(
            f"[yellow]{len(missing)} problem(s) have no candidate and score 0:[/yellow] {_first(missing)}",
            soft_wrap=True,
        )
    if not candidates:
        raise KzError(f"no candidates found in {source or 'the policy output'} for {len(problems)} problem(s)")


class _EvaluationDisplay:
    """What `kz eval` shows while it evaluates: a progress bar (``progress``, the context evaluation runs in),
    the count of results reused from ``out``, and the candidates evaluated again because their code changed."""

    def __init__(self, out: Path, console):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.out, self.console = out, console
        self.progress = Progress(
            TextColumn("[bold]evaluating"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
            console=console,
        )
        self.task = None
        self.on_stale = _report_retracted(out, console)

    def on_start(self, already: int, todo: int) -> None:
        if already:
            self.console.print(f"{already} result(s) already in {self.out}; evaluating the remaining {todo}")
        self.task = self.progress.add_task("", total=todo)

    def on_result(self, result) -> None:
        self.progress.update(self.task, advance=1, description=f"{result.problem}: {result.status.value}")

    def on_unchecked(self, unchecked: dict[tuple[int, str], str]) -> None:
        from kzcore.evaluate.runner import unchecked_line

        self.console.print(f"[yellow]{unchecked_line(unchecked)}[/yellow]", soft_wrap=True)


def _first(names: list[str], limit: int = 10) -> str:
    """``names`` joined with commas, the first ``limit`` of them and how many more."""
    more = len(names) - limit
    return ", ".join(names[:limit]) + (f", … and {more} more" if more > 0 else "")


def _report_retracted(out: Path, console):
    """What `kz eval` says when the runner retracted saved results whose code changed since."""

    def on_stale(stale) -> None:
        changed = [r.key for r in stale if r.code_hash]
        unknown = len(stale) - len(changed)
        if changed:
            console.print(
                f"{len(changed)} candidate(s) changed since their result in {out} was saved (their code or their "
                f"problem's source); evaluating them again: {_first(changed)}",
                soft_wrap=True,
            )
        if unknown:
            console.print(
                f"{unknown} result(s) in {out} do not say which code they judged (an older kz); evaluating them again",
                soft_wrap=True,
            )

    return on_stale


def _note_gpu_only(language, device: str, console) -> None:
    """A ``needs_gpu`` language evaluated on a CPU: its candidates are checked and compiled, and none can
    run, which the user should hear before the results say it candidate by candidate."""
    from kzcore.executors.devices import resolve_device

    if language.needs_gpu and device != "cuda" and resolve_device(device) == "cpu":
        console.print(
            f"[yellow]note: {language.name} candidates need a GPU; on this CPU they are checked and compiled, "
            "and every one that gets as far as running is a runtime_error[/yellow]"
        )


def _configure(parser) -> None:
    parser.description = (
        "Evaluate candidate kernels on problems: each candidate runs in a sandboxed worker, is "
        "checked against the reference over several trials (and a second shape) and, on a GPU, timed. "
        "Candidates come from --solutions, or are first sampled from a model with --policy. Results are "
        "appended to --out and the same command resumes where it stopped; a score table ends the run."
    )
    parser.add_argument("--problems", required=True, help="builtin[:levels], a directory, a .py file or a .jsonl")
    parser.add_argument("--solutions", default=None, help="a directory, a .jsonl, or a suite name (its own solutions)")
    parser.add_argument(
        "--completions", default=None, help="with --policy: where completions go (default: next to --out)"
    )
    parser.add_argument("--language", default="triton", help="kernel language of the candidates (see kz plugins)")
    parser.add_argument("--out", default="runs/results.jsonl", help="results JSONL (appended; re-running resumes)")
    parser.add_argument("--executor", default="local", help="where candidates run: local, or a plugin's (e.g. ray)")
    _add_workers(parser)
    _add_eval_args(parser)
    parser.add_argument("-k", type=ranged(int, 1), default=1, help="k for pass@k / fast_p@k")
    parser.add_argument("--kernelbench", default=None, metavar="PATH", help=KERNELBENCH_HELP)
    parser.add_argument("--include-degenerate", action="store_true", help=INCLUDE_DEGENERATE_HELP)
    _add_only(parser, "evaluate", ", each keeping its level")
    _add_policy_args(
        parser, "sample candidates from this policy first, e.g. smollm2 (instead of --solutions)", default=None
    )


def commands() -> list[Command]:
    """`kz eval`, as kzcore.builtins.commands registers it."""
    return [Command(name="eval", run=_cmd_eval, help="evaluate solutions on problems", configure=_configure)]

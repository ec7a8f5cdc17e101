"""`kz report`: the score table, failure reasons and plots of a results file. `_print_scores` is also the
table that ends `kz eval`."""

from __future__ import annotations

from pathlib import Path

from kzcore.cli.options import INCLUDE_DEGENERATE_HELP, ranged
from kzcore.errors import KzError
from kzcore.types import Command


def _print_scores(results, k: int, problems, include_degenerate: bool, console) -> None:
    """The score table, without the problems that failed the problem check unless ``include_degenerate``,
    a line saying which were left out (or counted), and for each one left out why and what to do."""
    import attrs

    from kzcore.metrics import degenerate_note
    from kzcore.report import degenerate_lines, print_report

    note = degenerate_note(results, include_degenerate)
    left_out = [] if include_degenerate else degenerate_lines(results)
    if include_degenerate:
        results = [attrs.evolve(r, problem_degenerate="") for r in results]
    print_report(results, k=k, problems=problems, console=console)
    if note:
        console.print(f"[yellow]{note}[/yellow]")
    for line in left_out:  # one line each: why, and what would count it
        console.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)


def _print_unvouched(path: Path, results, console) -> None:
    """One line naming the problems whose results were filed without a problem-check verdict (the results file's
    run headers say which): they are in the scores, and nothing says those problems tell a kernel from none."""
    from kzcore.evaluate.runner import unvouched_problems

    scored = {(r.level, r.problem) for r in results}
    names = [f"level{lv}/{name}" for lv, name in sorted(unvouched_problems(path) & scored)]
    if names:
        console.print(
            f"[yellow]{len(names)} problem(s) counted without a problem-check verdict (kz eval run again checks "
            f"them): {', '.join(names[:10])}{', …' if len(names) > 10 else ''}[/yellow]",
            soft_wrap=True,
        )


def _cmd_report(args) -> int:
    from rich.console import Console

    from kzcore.report import report_plots
    from kzcore.results import read_results

    path = Path(args.results)
    if not path.exists():
        raise KzError(f"{path}: no such results file")
    results = read_results(path)  # skipped lines are reported as warnings on stderr (main)
    if not results:
        raise KzError(f"{path}: holds no results")
    console = Console()
    _print_scores(results, args.k, (), args.include_degenerate, console)
    _print_unvouched(path, results, console)
    png = report_plots(results, Path(args.plot) if args.plot else path.with_suffix(".plots.png"))
    timed = any(r.correct and r.speedup for r in results)
    console.print(f"plots: {png} (verdicts per level{', speedup histogram' if timed else ''})")
    return 0


def _configure(parser) -> None:
    parser.description = (
        "The score table (pass@k, fast_p@k, per level) of a results file from kz eval, the reasons "
        "of the failures, and a PNG with the verdict breakdown per level, plus a histogram of the speedups "
        "when the results hold timings (GPU runs)."
    )
    parser.add_argument("results", help="results JSONL (from kz eval)")
    parser.add_argument("-k", type=ranged(int, 1), default=1, help="k for pass@k / fast_p@k")
    parser.add_argument("--include-degenerate", action="store_true", help=INCLUDE_DEGENERATE_HELP)
    parser.add_argument(
        "--plot", default=None, help="PNG path for the plots (default: next to the results file, .plots.png)"
    )


def commands() -> list[Command]:
    """`kz report`, as kzcore.builtins.commands registers it."""
    return [
        Command(
            name="report", run=_cmd_report,
            help="score table, verdicts per level and (when timed) speedup histogram of a results file",
            configure=_configure,
        )
    ]  # fmt: skip

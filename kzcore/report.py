"""Human-facing summaries of results: the score table (rich) and a speedup histogram (PNG)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.table import Table

from kzcore.metrics import FAST_P, FAST_P_RULE, degenerate_problems, summarize
from kzcore.types import EvalResult, Status


def _fmt(value, pct: bool = True) -> str:
    if value is None:
        return "—"
    return f"{100 * value:.1f}%" if pct else f"{value:.2f}x"


def score_table(results: list[EvalResult], k: int = 1, problems=()) -> Table:
    summary = summarize(results, k=k, problems=problems)
    table = Table(title=f"kzcore scores (pass@{k}, fast_p@{k})", caption=FAST_P_RULE)
    for col in ["level", "problems", "samples", "correct", f"pass@{k}", *[f"fast_{p:g}" for p in FAST_P], "geomean"]:
        table.add_column(col, justify="right")
    for level, row in summary.items():
        table.add_row(
            str(level),
            str(row["problems"]),
            str(row["samples"]),
            str(row["correct"]),
            _fmt(row["pass@k"]),
            *[_fmt(row[f"fast_{p:g}"]) for p in FAST_P],
            _fmt(row["geomean_speedup"], pct=False),
        )
    return table


def status_table(results: list[EvalResult]) -> Table:
    counts = Counter(r.status for r in results)
    table = Table(title="verdicts")
    table.add_column("status")
    table.add_column("count", justify="right")
    for status in Status:
        if counts[status]:
            table.add_row(status.value, str(counts[status]))
    return table


def one_line(message: str, width: int = 160) -> str:
    """A multi-line message on one line: ``"static check failed:\n- a\n- b"`` → ``"static check failed: a; b"``,
    cut at ``width`` characters with an ellipsis."""
    parts = [line.strip().removeprefix("- ") for line in message.splitlines() if line.strip()]
    if not parts:
        return ""
    text = parts[0] + (" " + "; ".join(parts[1:]) if len(parts) > 1 else "")
    return text if len(text) <= width else text[: width - 1] + "…"


def failures_table(results: list[EvalResult], limit: int = 20) -> Table | None:
    bad = [r for r in results if not r.correct]
    if not bad:
        return None
    more = len(bad) - limit
    table = Table(
        title=f"not correct ({len(bad)})",
        caption=f"{more} more not shown (every message is in the results file)" if more > 0 else None,
    )
    for col in ("problem", "sample", "status", "message"):
        table.add_column(col)
    for r in sorted(bad, key=lambda r: (r.level, r.problem, r.sample))[:limit]:
        table.add_row(f"level{r.level}/{r.problem}", str(r.sample), r.status.value, one_line(r.message or ""))
    return table


def degenerate_lines(results: list[EvalResult]) -> list[str]:
    """One line per problem left out of the scores for failing the problem check: why, at which size and
    where it ran, and what would count it. On a CPU a problem runs at a shrunk size, where an output can be
    degenerate that is not at full size (a softmax over a dimension shrunk to one element is constant)."""
    lines = []
    for (level, name), reason in sorted(degenerate_problems(results).items()):
        ran = [r for r in results if (r.level, r.problem) == (level, name)]
        size = next((r.size for r in ran if r.size), "")
        device = next((r.device for r in ran if r.device), "")
        where = f" at size {size}" * bool(size) + f" on {device}" * bool(device)
        if size and size != "full":
            todo = "run it at full size on a GPU" if device == "cpu" else "run it at full size (--size full)"
            todo += ", or pass --include-degenerate to count it"
        else:
            todo = "pass --include-degenerate to count it"
        lines.append(f"level{level}/{name}: left out of the scores, the problem check failed{where}: {reason}; {todo}")
    return lines


def print_report(results: list[EvalResult], k: int = 1, problems=(), console: Console | None = None) -> None:
    console = console or Console()
    if not console.is_terminal:
        console = Console(width=160, file=console.file)
    console.print(score_table(results, k=k, problems=problems))
    console.print(status_table(results))
    failures = failures_table(results)
    if failures is not None:
        console.print(failures)
    timed = [r for r in results if r.correct and r.speedup]
    if results and not timed:
        notes = {r.timing_note for r in results if r.timing_note}
        console.print(f"[dim]no speedups: {'; '.join(sorted(notes)) or 'no correct result was timed'}[/dim]")


STATUS_COLORS = {
    Status.CORRECT: "#2e7d32",
    Status.INCORRECT: "#c62828",
    Status.HACK_SUSPECTED: "#6a1b9a",
    Status.RUNTIME_ERROR: "#ef6c00",
    Status.TIMEOUT: "#f9a825",
    Status.COMPILE_ERROR: "#1565c0",
    Status.STATIC_CHECK_FAILED: "#00838f",
    Status.FORMAT_ERROR: "#757575",
}


def report_plots(results: list[EvalResult], path: Path) -> Path:
    """One PNG: the verdicts per level as stacked bars (drawn whenever there are results), and beside it a
    histogram of log2 speedups of correct, timed results when there are any (a GPU run)."""
    import math

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    speedups = [r.speedup for r in results if r.correct and r.speedup]
    fig, axes = plt.subplots(1, 2 if speedups else 1, figsize=(11 if speedups else 6, 3.8), squeeze=False)
    _verdict_bars(axes[0][0], results)
    if speedups:
        ax = axes[0][1]
        ax.hist([math.log2(s) for s in speedups], bins=min(30, max(5, len(speedups))), color="#4472c4")
        ax.axvline(0.0, color="k", lw=1)
        ax.set_xlabel("log2(speedup over eager PyTorch)")
        ax.set_ylabel("correct candidates")
        ax.set_title(f"speedups of {len(speedups)} correct, timed candidates")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def verdict_counts(results: list[EvalResult]) -> dict[int, Counter]:
    """Level → how many results had each status."""
    by_level: dict[int, Counter] = {}
    for r in results:
        by_level.setdefault(r.level, Counter())[r.status] += 1
    return dict(sorted(by_level.items()))


def _verdict_bars(ax, results: list[EvalResult]) -> None:
    counts = verdict_counts(results)
    labels = [f"level {level}" for level in counts]
    bottom = [0] * len(counts)
    for status in Status:
        heights = [c[status] for c in counts.values()]
        if any(heights):
            color = STATUS_COLORS.get(status)
            ax.bar(labels, heights, bottom=bottom, label=status.value, color=color)
            bottom = [b + h for b, h in zip(bottom, heights)]
    ax.set_ylabel("candidates")
    ax.set_title(f"verdicts of {len(results)} candidates")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))

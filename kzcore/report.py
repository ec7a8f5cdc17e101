"""Human-facing summaries of results: the score table (rich) and a speedup histogram (PNG)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.table import Table

from kzcore.metrics import FAST_P, summarize
from kzcore.types import EvalResult, Status


def _fmt(value, pct: bool = True) -> str:
    if value is None:
        return "—"
    return f"{100 * value:.1f}%" if pct else f"{value:.2f}x"


def score_table(results: list[EvalResult], k: int = 1, problems=()) -> Table:
    summary = summarize(results, k=k, problems=problems)
    table = Table(title=f"kzcore scores (pass@{k}, fast_p@{k})")
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


def failures_table(results: list[EvalResult], limit: int = 20) -> Table | None:
    bad = [r for r in results if not r.correct]
    if not bad:
        return None
    table = Table(title=f"not correct ({len(bad)})")
    for col in ("problem", "sample", "status", "message"):
        table.add_column(col)
    for r in sorted(bad, key=lambda r: (r.level, r.problem, r.sample))[:limit]:
        table.add_row(
            f"level{r.level}/{r.problem}",
            str(r.sample),
            r.status.value,
            r.message.splitlines()[0][:100] if r.message else "",
        )
    return table


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


def speedup_histogram(results: list[EvalResult], path: Path) -> Path | None:
    """A histogram of log2 speedups of correct, timed results; None when there are none."""
    speedups = [r.speedup for r in results if r.correct and r.speedup]
    if not speedups:
        return None
    import math

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.hist([math.log2(s) for s in speedups], bins=min(30, max(5, len(speedups))), color="#4472c4")
    ax.axvline(0.0, color="k", lw=1)
    ax.set_xlabel("log2(speedup over eager PyTorch)")
    ax.set_ylabel("correct candidates")
    ax.set_title(f"{len(speedups)} correct candidates")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path

"""bench/results/INDEX.md, made from the result files themselves: one row per run (the files' date-machine-session
prefix, such as ``2026-12-03-h200-s15``, or date-machine where a file has no session tag), with the benches its
JSON reports hold and one headline figure per report. ``--check`` exits 1 when the index is out of date, so a test
keeps it in step. Neighbours: `bench.summarize` (a report in full); the result files are never renamed or moved
(docs cite them by name)."""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
from pathlib import Path

import attrs

RESULTS = Path(__file__).resolve().parent / "results"
INDEX_NAME = "INDEX.md"
NAME = re.compile(r"(?P<date>\d{4}-\d{2}-\d{2})-(?P<machine>[a-z]+\d*(?:x\d+)?)(?:-(?P<session>s\d+))?-(?P<rest>.+)")
# a report's headline: the first of these fields (dotted paths into its JSON) that it has, by its "bench" field, or
# by the file's name after the run prefix where the report has no "bench" field (the early cuda-compile reports)
HEADLINES = {
    "cuda-compile": ("median_of_medians_s",),
    "faults": ("lost_results",),
    "harness": ("summary.all.evals_per_min",),
    "harness-scaling": ("ratio",),
    "host_speed": ("static_check_ms",),
    "phase_seconds": ("seconds",),
    "placement-probe": ("summary.kept.cand_cv",),
    "sampling": ("speedup_tokens_per_s",),
    "schedule": ("wall_ratio_fifo_over_longest_first",),
    "side_by_side": ("locked_max", "unlocked_max"),
    "throughput": ("speedup_vs_first.4",),
    "timing": ("summary.max_speedup_cv",),
    "timing-ground-truth": ("summary.worst.4w.max_dev_vs_truth", "summary.worst.4w.max_dev_vs_do_bench"),
    "train_step": ("rollouts_per_min",),
}
HEADER = """# Bench results

Made by `python -m bench index` from the files in this folder; `python -m bench index --check` says whether it is
up to date. One row per run: the files named `DATE-MACHINE[-SESSION]-...`. Each JSON report is listed with one
headline figure where it has one (`python -m bench summarize --brief FILE` for the rest); logs, CSVs and JSONL
records are counted under "other files".

| run | date | machine | benches | reports | other files |
| --- | --- | --- | --- | --- | --- |
"""


@attrs.frozen
class Report:
    """One JSON report of a run: its name after the run prefix, its bench and its headline ("" for none)."""

    label: str
    bench: str
    headline: str = ""
    unreadable: bool = False

    def cell(self) -> str:
        if self.unreadable:
            return f"`{self.label}` (unreadable)"
        return f"`{self.label}`" + (f": {self.headline}" if self.headline else "")


@attrs.define
class Run:
    """The files of one run: its prefix, date, machine and session ("" where the files have none)."""

    prefix: str
    date: str
    machine: str
    session: str
    reports: list[Report] = attrs.Factory(list)
    others: collections.Counter = attrs.Factory(collections.Counter)

    def sort_key(self) -> tuple:
        return (self.date or "9999", self.machine, int(self.session[1:]) if self.session else -1, self.prefix)

    def row(self) -> str:
        benches = ", ".join(sorted({r.bench for r in self.reports if not r.unreadable}))
        reports = "<br>".join(r.cell() for r in self.reports)
        others = ", ".join(f"{n} {ext}" for ext, n in sorted(self.others.items()))
        return f"| {self.prefix} | {self.date} | {self.machine} | {benches} | {reports} | {others} |"


def _figure(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def headline(data: dict, bench: str) -> str:
    """``path=value`` for the first headline field of ``bench`` the report has ("" for none); "(partial)" after it
    when the run was cut short."""
    text = ""
    for path in HEADLINES.get(bench, ()):
        value = data
        for key in path.split("."):
            value = value.get(key) if isinstance(value, dict) else None
        if value is not None and not isinstance(value, (dict, list)):
            text = f"{path.removeprefix('summary.')}={_figure(value)}"
            break
    if data.get("partial") is True:
        text = f"{text} (partial)".strip()
    return text


def read_report(path: Path, label: str) -> Report:
    """The report at ``path``; one that cannot be read or is not a JSON object is marked unreadable."""
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            raise ValueError(f"a JSON {type(data).__name__}, not an object")
        bench = str(data.get("bench") or label.removesuffix(".json"))
        return Report(label, bench, headline(data, bench))
    except Exception:  # one bad file is a line in the index, never a failed index
        return Report(label, "", unreadable=True)


def collect(results: Path) -> list[Run]:
    """The runs whose files lie in ``results`` (its subfolders, such as gpu-check's latest/, are not read), in
    date, machine and session order; files not named for a run go to a last row, "(undated)"."""
    runs: dict[str, Run] = {}
    for path in sorted(p for p in results.iterdir() if p.is_file()):
        if path.name == INDEX_NAME or path.name.startswith("."):
            continue
        match = NAME.fullmatch(path.name)
        if match:
            prefix = path.name[: match.start("rest") - 1]
            run = runs.setdefault(prefix, Run(prefix, match["date"], match["machine"], match["session"] or ""))
            label = match["rest"]
        else:
            run = runs.setdefault("(undated)", Run("(undated)", "", "", ""))
            label = path.name
        if path.suffix == ".json":
            run.reports.append(read_report(path, label))
        else:
            run.others[path.suffix or "(no extension)"] += 1
    return sorted(runs.values(), key=Run.sort_key)


def render(runs: list[Run]) -> str:
    return HEADER + "".join(run.row() + "\n" for run in runs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench index", description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=RESULTS, help="the results folder (default: bench/results)")
    parser.add_argument("--check", action="store_true", help="exit 1 when INDEX.md is not what would be written")
    args = parser.parse_args(argv)
    index = args.results / INDEX_NAME
    runs = collect(args.results)
    text = render(runs)
    if args.check:
        if not index.is_file() or index.read_text() != text:
            print(f"{index} is out of date: run python -m bench index", file=sys.stderr)
            return 1
        return 0
    index.write_text(text)
    print(f"wrote {index} ({len(runs)} runs)")
    return 0

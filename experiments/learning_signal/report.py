"""The learning run's report from finished run directories: per phase and run, held-out pass@1 / pass@k /
fast_1 per language with the verdict mix, the Coder's training-problem pass@1 and reward, the share of GRPO
groups with no reward spread, and where the time went; across runs, the seed spread and the gain over SFT.
Writes REPORT.json and REPORT.png; prints a Markdown table.

    python experiments/learning_signal/report.py --out results/2026-12-01-h200 \\
        full-s0=runs/gpu-small full-s1=runs/gpu-small-seed1 frozen-s0=runs/gpu-small-frozen
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
from pathlib import Path

from kzcore.jsonl import read_jsonl

PHASE_KEYS = ("seconds", "train_seconds", "eval_seconds", "steps", "reward_mean", "reward_std", "correct_rate",
              "frac_reward_zero_std", "frac_groups_zero_std", "accepted", "proposed", "kept", "examples",
              "loss_first", "loss_last", "task_sources", "tasks_measured", "variants", "between_calls_seconds",
              "generation_seconds", "update_seconds", "calibration_seconds",
              # the Coder phase's method and the compute it trained with (controls: docs/training.md)
              "method", "sequences", "tokens", "samples", "correct", "sample_seconds", "source_rows")  # fmt: skip


def run_summary(run_dir: Path) -> dict:
    state = json.loads((run_dir / "state.json").read_text())
    phases = {pid: {k: m[k] for k in PHASE_KEYS if k in m} for pid, m in state["metrics"].items()}
    heldout = {row.pop("phase"): {k: v for k, v in row.items() if k not in ("round", "time")}
               for row in read_jsonl(run_dir / "heldout.jsonl")}  # fmt: skip
    coder_calls = {}
    phase_dirs = sorted(p.name for p in (run_dir / "phases").iterdir()) if (run_dir / "phases").exists() else []
    for pid in phase_dirs:  # an unfinished phase's steps too (a run cut short still shows what it did)
        rows = read_jsonl(run_dir / "phases" / pid / "model" / "rewards.jsonl")
        if pid.endswith("coder") and rows:
            coder_calls[pid] = [
                {k: r[k] for k in ("correct_rate", "reward_mean", "reward_std", "frac_groups_zero_std", "statuses")}
                for r in rows
            ]
    train_statuses = {  # the verdicts of every training rollout of each Coder phase
        pid: dict(sum((collections.Counter(r["statuses"]) for r in rows), collections.Counter()))
        for pid, rows in coder_calls.items()
    }
    return {"done": state["done"], "phases": phases, "heldout": heldout, "coder_calls": coder_calls,
            "train_statuses": train_statuses, "forked_from": state.get("forked_from")}  # fmt: skip


def spread(values: list[float]) -> dict:
    values = [v for v in values if v is not None]
    if not values:
        return {"mean": None, "min": None, "max": None, "n": 0}
    return {"mean": statistics.fmean(values), "min": min(values), "max": max(values), "n": len(values)}


def aggregate(runs: dict[str, dict], metric: str) -> dict:
    """Per held-out phase: the metric over the runs of each variant (the name's part before "-s")."""
    out: dict[str, dict[str, dict]] = {}
    for name, run in runs.items():
        variant = name.split("-s")[0]
        for phase, row in run["heldout"].items():
            out.setdefault(variant, {}).setdefault(phase, []).append(row.get(metric))
    return {v: {p: spread(vals) for p, vals in phases.items()} for v, phases in out.items()}


def markdown(runs: dict[str, dict], languages: list[str]) -> str:
    lines = ["| run | phase | " + " | ".join(f"{lang} pass@1 / pass@10 / fast_1" for lang in languages)
             + " | verdicts (first language) | probe pass@1 | train pass@1 | reward | frac_reward_zero_std | seconds |",
             "|" + " --- |" * (len(languages) + 8)]  # fmt: skip
    for name, run in runs.items():
        for phase, row in run["heldout"].items():
            cells = []
            for lang in languages:
                vals = [row.get(f"heldout_{lang}_pass@1"), row.get(f"heldout_{lang}_pass@10"),
                        row.get(f"heldout_{lang}_fast_1@1")]  # fmt: skip
                cells.append(" / ".join("–" if v is None else f"{v:.3f}" for v in vals))
            verdicts = row.get(f"heldout_{languages[0]}_statuses", {})
            m = run["phases"].get(phase, {})
            fmt = lambda v: "–" if v is None else f"{v:.3f}"  # noqa: E731
            lines.append(f"| {name} | {phase} | " + " | ".join(cells)
                         + f" | {', '.join(f'{k} {v}' for k, v in sorted(verdicts.items()))}"
                         + f" | {fmt(row.get(f'probe_{languages[0]}_pass@1'))} | {fmt(m.get('correct_rate'))}"
                         + f" | {fmt(m.get('reward_mean'))} | {fmt(m.get('frac_reward_zero_std'))} | {m.get('seconds', '–')} |")  # fmt: skip
    return "\n".join(lines)


def plot(runs: dict[str, dict], languages: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    probe = f"probe_{languages[0]}_pass@1"  # [heldout] probe: fixed training problems, scored like held-out ones
    panels = [f"heldout_{lang}_pass@1" for lang in languages]
    if any(probe in row for run in runs.values() for row in run["heldout"].values()):
        panels.append(probe)
    fig, axes = plt.subplots(1, len(panels) + 1, figsize=(5 * (len(panels) + 1), 3.8))
    markers = "osD^v"
    # one x position per phase name over all runs (a run that skipped a phase, e.g. the base model's
    # evaluation in a forked seed, leaves a gap instead of shifting its points)
    order = list(dict.fromkeys(p for run in runs.values() for p in run["heldout"]))
    order.sort(key=lambda p: (p != "00-base", p))
    for j, (name, run) in enumerate(runs.items()):
        for ax, key in zip(axes, panels):
            pts = [(order.index(p), row.get(key)) for p, row in run["heldout"].items()]
            pts = sorted((x, y) for x, y in pts if y is not None)
            if pts:
                ax.plot(*zip(*pts), marker=markers[j % 5], ms=8 - 1.5 * j, alpha=0.85, label=name)
        steps = [(pid, r["correct_rate"]) for pid, rows in run["coder_calls"].items() for r in rows]
        if steps:
            axes[-1].plot(range(1, len(steps) + 1), [v for _, v in steps], marker=markers[j % 5], ms=4, label=name)
            for k in range(1, len(steps)):  # phase boundaries
                if steps[k][0] != steps[k - 1][0]:
                    axes[-1].axvline(k + 0.5, color="grey", lw=0.6, ls=":")
    for ax, key in zip(axes, panels):
        ax.set_xticks(range(len(order)), order, rotation=30, ha="right")
        what, lang = key.split("_")[:2]
        ax.set_title(f"held-out pass@1, {lang}" if what == "heldout" else f"training probe pass@1, {lang}")
        ax.set_ylim(-0.02, max(0.2, ax.get_ylim()[1] * 1.05))
    axes[-1].set_title("training-problem pass@1 per GRPO step")
    axes[-1].set_xlabel("Coder GRPO step (dotted: next phase)")
    for ax in axes:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="NAME=RUN_DIR (NAME like full-s0, frozen-s0)")
    parser.add_argument("--out", required=True, help="output prefix: writes PREFIX.json and PREFIX.png")
    parser.add_argument("--languages", default="triton,cuda")
    args = parser.parse_args()
    runs = {}
    for spec in args.runs:
        name, _, path = spec.partition("=")
        runs[name] = run_summary(Path(path))
    languages = args.languages.split(",")
    report = {
        "runs": runs,
        "heldout_pass@1": {lang: aggregate(runs, f"heldout_{lang}_pass@1") for lang in languages},
        "heldout_pass@10": {lang: aggregate(runs, f"heldout_{lang}_pass@10") for lang in languages},
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1))
    plot(runs, languages, out.with_suffix(".png"))
    print(markdown(runs, languages))
    return 0


if __name__ == "__main__":
    sys.exit(main())

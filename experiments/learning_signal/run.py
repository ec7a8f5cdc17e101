"""Does the loop teach? Held-out pass@1 / pass@4 of the base model, after SFT, and after each round of
CA-GRPO, over several seeds, with the Proposer trained every round ("full") or frozen after round 1
("frozen", the paper's ablation). Writes RUNS/report.json, RUNS/curves.png and a Markdown table.

    python experiments/learning_signal/run.py                       # the experiment (CPU: hours)
    python experiments/learning_signal/run.py --model tiny --quick  # the machinery on a tiny model (minutes)

The split is fixed: HELDOUT problems never appear in distillation data or in RL tasks (exclude_heldout)."""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parents[2]
HELDOUT = ("1_ReLU", "3_Sigmoid", "8_MeanReduction", "11_Softmax", "25_MaxPool2d", "2_Gemm_Scale_Sigmoid")
VARIANTS = {"full": None, "frozen": 1}  # freeze_proposer_after


def experiment_config(base, run_dir: Path, seed: int, freeze, args):
    from kzcore.train.config import HeldoutSection, ModelsSection, ProblemsSection, RunSection
    from kzcore.train.schedule import Schedule

    return attrs.evolve(
        base,
        run=RunSection(dir=str(run_dir), seed=seed),
        models=ModelsSection(coder=args.model),
        problems=ProblemsSection(coldstart="builtin", tasks="builtin", heldout="builtin", heldout_names=HELDOUT),
        schedule=Schedule(rounds=args.rounds, proposer_steps=args.proposer_steps, coder_steps=args.coder_steps,
                          freeze_proposer_after=freeze),
        sft=attrs.evolve(base.sft, seed=seed, max_steps=args.sft_steps),
        coder=attrs.evolve(base.coder, seed=seed),
        proposer_grpo=attrs.evolve(base.proposer_grpo, seed=seed),
        heldout=HeldoutSection(n=args.n, k=(1, args.n), max_new_tokens=args.max_new_tokens),
    )  # fmt: skip


def curve(run_dir: Path, k: int) -> list[tuple[str, float]]:
    """(phase, held-out pass@k) in training order: base, sft, then each coder phase."""
    rows = [json.loads(x) for x in (run_dir / "heldout.jsonl").read_text().splitlines()]
    return [(r["phase"], r[f"heldout_pass@{k}"]) for r in rows]


def aggregate(runs: dict[str, dict[int, Path]], ks: tuple[int, ...]) -> dict:
    """Per variant and k: per-phase mean and std over seeds, and whether final - base exceeds the spread."""
    report = {}
    for variant, seeds in runs.items():
        for k in ks:
            curves = {seed: curve(path, k) for seed, path in seeds.items()}
            phases = [p for p, _ in next(iter(curves.values()))]
            table = []
            for i, phase in enumerate(phases):
                values = [c[i][1] for c in curves.values() if len(c) > i]
                table.append({"phase": phase, "mean": statistics.fmean(values),
                              "std": statistics.pstdev(values) if len(values) > 1 else 0.0, "values": values})  # fmt: skip
            gains = [c[-1][1] - c[0][1] for c in curves.values()]
            spread = max(row["std"] for row in table)
            report[f"{variant}/pass@{k}"] = {
                "phases": table,
                "gain_mean": statistics.fmean(gains),
                "gain_std": statistics.pstdev(gains) if len(gains) > 1 else 0.0,
                "spread": spread,
                "gain_exceeds_spread": statistics.fmean(gains) > spread,
            }
    return report


def markdown(report: dict) -> str:
    lines = [
        "| variant / metric | "
        + " | ".join(r["phase"] for r in next(iter(report.values()))["phases"])
        + " | gain | beats spread |"
    ]
    lines.append("|" + " --- |" * (len(next(iter(report.values()))["phases"]) + 3))
    for name, r in report.items():
        cells = [f"{row['mean']:.3f} ± {row['std']:.3f}" for row in r["phases"]]
        lines.append(
            f"| {name} | "
            + " | ".join(cells)
            + f" | {r['gain_mean']:+.3f} ± {r['gain_std']:.3f} | {r['gain_exceeds_spread']} |"
        )
    return "\n".join(lines)


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    for name, r in report.items():
        if name.endswith("pass@1"):
            xs = range(len(r["phases"]))
            ax.errorbar(
                xs,
                [p["mean"] for p in r["phases"]],
                yerr=[p["std"] for p in r["phases"]],
                marker="o",
                capsize=3,
                label=name,
            )
            ax.set_xticks(list(xs), [p["phase"] for p in r["phases"]], rotation=30)
    ax.set_ylabel("held-out pass@1")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2", help="smollm2, a checkpoint directory, or 'tiny'")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--proposer-steps", type=int, default=2)
    parser.add_argument("--coder-steps", type=int, default=8)
    parser.add_argument("--sft-steps", type=int, default=8)
    parser.add_argument("-n", type=int, default=4, help="held-out samples per problem (pass@1 and pass@n)")
    parser.add_argument("--max-new-tokens", type=int, default=384)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS))
    parser.add_argument("--quick", action="store_true", help="1 round, 1 step each: checks the machinery only")
    parser.add_argument("--runs", default=str(ROOT / "experiments" / "learning_signal" / "runs"))
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.proposer_steps, args.coder_steps, args.sft_steps, args.n, args.max_new_tokens = (
            1,
            1,
            1,
            1,
            2,
            16,
        )

    from kzcore.train.config import load_config
    from kzcore.train.trainer import Trainer

    if args.model == "tiny":
        sys.path.insert(0, str(ROOT))
        from tests.tinymodel import build_tiny_checkpoint

        args.model = str(build_tiny_checkpoint(Path(args.runs) / "tiny-model"))
    base = load_config(ROOT / "configs" / "smoke.toml")
    t0 = time.perf_counter()
    runs: dict[str, dict[int, Path]] = {}
    for variant in args.variants:
        for seed in args.seeds:
            run_dir = Path(args.runs) / f"{variant}-seed{seed}"
            Trainer(experiment_config(base, run_dir, seed, VARIANTS[variant], args), log=print).run()
            runs.setdefault(variant, {})[seed] = run_dir
    report = aggregate(runs, (1, args.n))
    out = Path(args.runs)
    meta = {"command": " ".join(sys.argv), "machine": platform.platform(), "wall_s": round(time.perf_counter() - t0, 1),
            "heldout": HELDOUT, "seeds": args.seeds, "model": args.model}  # fmt: skip
    (out / "report.json").write_text(json.dumps({"meta": meta, "report": report}, indent=2))
    plot(report, out / "curves.png")
    print(markdown(report))
    print(json.dumps(meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())

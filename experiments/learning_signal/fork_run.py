"""Start a run from another run's cold start: copy its finished phases up to and including ``--after``
(``distill``: the verified SFT set; ``sft``, the default: the SFT checkpoint too) with the held-out rows of
those phases into a new run directory. A seed replicate forks after distill (its own SFT); an ablation of the
RL phases (the frozen Proposer) forks after SFT and differs only from the first Proposer phase on.

    python experiments/learning_signal/fork_run.py runs/gpu-small runs/gpu-small-seed1 --after distill
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

PHASES = {"distill": ("00-distill",), "sft": ("00-distill", "00-sft")}
HELDOUT = {"00-distill": (), "00-sft": ("00-base", "00-sft")}
RUN_RECORDS = ("heldout-problems.json", "decontamination.json")


def fork(src: Path, dst: Path, after: str = "sft") -> None:
    cold = PHASES[after]
    state = json.loads((src / "state.json").read_text())
    missing = [p for p in cold if p not in state["done"]]
    if missing:
        raise SystemExit(f"fork_run: {src} has not finished {', '.join(missing)}")
    # a model the source has pruned since (keep_checkpoints = "last-best": the cold start's Proposer goes once
    # the source's first Proposer phase has trained one) would leave the fork starting from the base model
    pruned = sorted(str(p.parent.relative_to(src)) for pid in cold for p in (src / "phases" / pid).glob("*/config.json.pruned"))  # fmt: skip
    if pruned:
        raise SystemExit(f'fork_run: {src} has pruned {", ".join(pruned)}: fork sooner, or keep_checkpoints = "all"')
    dst.mkdir(parents=True, exist_ok=False)
    for pid in cold:
        shutil.copytree(src / "phases" / pid, dst / "phases" / pid)
    heldout = HELDOUT[cold[-1]] if (src / "heldout.jsonl").exists() else ()
    for pid in heldout:
        if (src / "heldout" / pid).exists():
            shutil.copytree(src / "heldout" / pid, dst / "heldout" / pid)
    if heldout:
        rows = [json.loads(x) for x in (src / "heldout.jsonl").read_text().splitlines() if x.strip()]
        kept = [r for r in rows if r["phase"] in heldout]
        (dst / "heldout.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    for name in RUN_RECORDS:  # the held-out problems the problem check kept, decontamination: the same set
        if (src / name).exists():
            shutil.copy2(src / name, dst / name)
    forked = {"done": list(cold), "metrics": {p: state["metrics"][p] for p in cold}, "forked_from": str(src)}
    (dst / "state.json").write_text(json.dumps(forked, indent=2))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src", type=Path)
    parser.add_argument("dst", type=Path)
    parser.add_argument("--after", choices=sorted(PHASES), default="sft")
    args = parser.parse_args()
    fork(args.src, args.dst, args.after)

"""Start a run from another run's cold start: copy its finished distill and SFT phases (checkpoint, data,
held-out rows of the base and SFT models) into a new run directory, so several RL runs (other seeds, the
frozen-Proposer variant) share one cold start and differ only from the first Proposer phase on.

    python experiments/learning_signal/fork_run.py runs/gpu-small runs/gpu-small-s1
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

COLD = ("00-distill", "00-sft")


def fork(src: Path, dst: Path) -> None:
    state = json.loads((src / "state.json").read_text())
    missing = [p for p in COLD if p not in state["done"]]
    if missing:
        raise SystemExit(f"fork_run: {src} has not finished {', '.join(missing)}")
    dst.mkdir(parents=True, exist_ok=False)
    for pid in COLD:
        shutil.copytree(src / "phases" / pid, dst / "phases" / pid)
    if (src / "heldout").exists():
        for pid in ("00-base", "00-sft"):
            if (src / "heldout" / pid).exists():
                shutil.copytree(src / "heldout" / pid, dst / "heldout" / pid)
    rows = [json.loads(x) for x in (src / "heldout.jsonl").read_text().splitlines() if x.strip()]
    kept = [r for r in rows if r["phase"] in ("00-base", "00-sft")]
    (dst / "heldout.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    forked = {"done": list(COLD), "metrics": {p: state["metrics"][p] for p in COLD}, "forked_from": str(src)}
    (dst / "state.json").write_text(json.dumps(forked, indent=2))


if __name__ == "__main__":
    fork(Path(sys.argv[1]), Path(sys.argv[2]))

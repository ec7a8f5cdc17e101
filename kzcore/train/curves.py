"""The run's curves (RUN/curves.png): per-phase training reward and correctness, held-out pass@k, and the
held-out verdict mix after each phase, drawn from RUN/state.json and RUN/heldout.jsonl."""

from __future__ import annotations

from pathlib import Path

from kzcore.jsonl import read_jsonl
from kzcore.train.schedule import read_state


def plot_curves(run_dir: Path) -> Path | None:
    """RUN/curves.png (see ``curves_figure``); None before any phase has finished."""
    import matplotlib.pyplot as plt

    fig = curves_figure(run_dir)
    if fig is None:
        return None
    path = run_dir / "curves.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def curves_figure(run_dir: Path):
    """Three panels, phases by name: per-phase training reward / correctness, held-out pass@k, and the
    held-out verdict mix after each phase."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    state = read_state(run_dir)
    metrics = state.get("metrics", {})
    if not metrics:
        return None
    heldout = read_jsonl(run_dir / "heldout.jsonl")
    phases = list(metrics)
    fig, axes = plt.subplots(1, 3, figsize=(16, 3.8))
    styles = {"coder": ("o", "-"), "proposer": ("s", "--")}
    for role, (marker, ls) in styles.items():
        for key, label in (("reward_mean", "reward"), ("correct_rate", "train pass@1")):
            pts = [(i, m.get(key)) for i, (pid, m) in enumerate(metrics.items()) if pid.endswith(role)]
            pts = [(i, v) for i, v in pts if isinstance(v, (int, float))]
            if pts:
                axes[0].plot(*zip(*pts), marker=marker, ls=ls if key == "reward_mean" else ":", label=f"{role} {label}")
    axes[0].set_xticks(range(len(phases)), phases, rotation=30, ha="right")
    axes[0].set_xlim(-0.5, len(phases) - 0.5)
    axes[0].set_title("training (per phase)")
    if axes[0].lines:
        axes[0].legend(fontsize=8)
    keys = sorted({k for h in heldout for k in h if is_curve_key(k)})
    for j, key in enumerate(keys):  # markers and offsets keep overlapping lines distinguishable
        pts = [(i, h[key]) for i, h in enumerate(heldout) if h.get(key) is not None]  # "ends": some phases unscored
        axes[1].plot(*zip(*pts), marker="os^Dv"[j % 5], ms=7 - j, label=key.removeprefix("heldout_"))
    axes[1].set_xticks(range(len(heldout)), [h["phase"] for h in heldout], rotation=30, ha="right")
    axes[1].set_ylim(-0.05, 1.05)
    axes[1].set_title("held-out and validation (after phase)")
    if heldout and keys:
        axes[1].legend(fontsize=8)
    plot_verdicts(axes[2], heldout)
    fig.tight_layout()
    return fig


def is_curve_key(key: str) -> bool:
    """The overall pass@k lines of the second panel: held-out (first language) and validation."""
    if "_l" in key.split("_pass@")[0].removeprefix("validation"):  # per-level figures stay in the records
        return False
    return key.startswith("heldout_pass@") or (key.startswith("validation_") and "_pass@" in key)


def plot_verdicts(ax, heldout: list[dict]) -> None:
    """Stacked bars: the held-out verdict mix after each phase (first language), so a run whose pass@k is 0
    still shows what changed (format errors turning into compile errors, then wrong answers, ...)."""
    rows = []
    for h in heldout:
        key = next((k for k in h if k.startswith("heldout_") and k.endswith("_statuses")), None)
        rows.append((h["phase"], h.get(key) or {}))
    statuses = sorted({s for _, counts in rows for s in counts})
    bottoms = [0] * len(rows)
    for status in statuses:
        heights = [counts.get(status, 0) for _, counts in rows]
        ax.bar(range(len(rows)), heights, bottom=bottoms, label=status)
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    ax.set_xticks(range(len(rows)), [pid for pid, _ in rows], rotation=30, ha="right")
    ax.set_title("held-out verdicts (after phase)")
    if statuses:
        ax.legend(fontsize=7)

"""Does a pool with several workers per GPU finish a batch faster than one worker? One batch of short kernels (9
built-in level-1 Triton solutions x 8 samples: 72 candidates, each compiling anew as a rollout's new source would)
through a warm pool of each worker count in turn, in one process, side by side (harness's batch throughput pass,
once per count): the wall time from the first job sent to the last result (pool start-up not counted), evaluations
per minute, and each count's speedup over the first. On a CPU the counts do not apply (a CPU pool has its own
default): a smoke run of the machinery, not a figure.

    python -m bench run throughput --workers 1,4 --out bench/results/throughput.json
    python -m bench run throughput --device cpu --size small --problems 1_ReLU --samples 2 --workers 1,2   # smoke

Target (one GPU, full size): 4 workers at least 1.5x faster than 1. Timing holds the GPU alone (the per-GPU lock),
so the ratio is bounded by how much of a candidate's evaluation is not its timed phase. ``--rounds 2`` measures
each count twice, in mirrored order (1, 4, 4, 1), so a drift of the machine over the run does not favour one."""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.report import Terminated, complete, cut_short, sigterm_raises, write_json_atomic  # noqa: E402
from bench.settings import eval_overrides  # noqa: E402

# short kernels (well under 1 ms at full size on an H200): elementwise, reductions, normalisations
PROBLEMS = (
    "1_ReLU", "3_Sigmoid", "6_MulAdd", "7_SumReduction", "11_Softmax", "12_LogSoftmax", "13_LayerNorm",
    "14_RMSNorm", "18_L1NormRows",
)  # fmt: skip
TARGET = 1.5


def order(counts: list[int], rounds: int) -> list[int]:
    """The worker counts in the order measured: ``counts`` then mirrored, ``rounds`` passes in all."""
    passes = [counts if r % 2 == 0 else list(reversed(counts)) for r in range(rounds)]
    return [w for p in passes for w in p]


def batch(problems: list[str], level: int = 1):
    """(problems, candidates): the built-in Triton solution of each of ``problems`` (harness's throughput pass
    sends ``--samples`` copies of each)."""
    from kzcore.problems import load_problems, load_solutions

    chosen = [p for p in load_problems(f"builtin:{level}") if p.name in problems]
    missing = sorted(set(problems) - {p.name for p in chosen})
    if missing:
        raise SystemExit(f"throughput: no built-in level-{level} problem {', '.join(missing)}")
    return chosen, load_solutions("builtin", chosen, "triton")


def measure(workers: int, problems, candidates, args, pm) -> dict:
    """The batch through a pool of ``workers`` workers per GPU: harness's batch throughput pass (pool start-up
    not counted, Triton's cache empty, every copy compiling anew), on this one level."""
    from bench.harness import throughput_pass

    by_key = {(p.level, p.name): p for p in problems}
    options = argparse.Namespace(
        device=args.device, size=args.size, workers_per_gpu=workers, repeat=args.samples, window=None,
        eval_overrides=args.eval_overrides,
    )  # fmt: skip
    (level,) = {p.level for p in problems}
    figures = throughput_pass(problems, candidates, by_key, options, pm)[f"level{level}"]
    print(f"{workers} worker(s) per GPU: {figures['wall_s']} s, {figures['correct']} correct", file=sys.stderr)
    for bad in figures.get("not_correct", []):
        print(
            f"  not correct: {bad['problem']} sample {bad['sample']}: {bad['status']}: {bad['message']}",
            file=sys.stderr,
        )
    return {"workers": workers, **figures}


def report(state: dict, args, partial: bool) -> dict:
    """The runs so far and, for each worker count, its mean wall time and speedup over the first count's."""
    runs = state["runs"]
    walls: dict[int, list[float]] = {}
    for run in runs:
        walls.setdefault(run["workers"], []).append(run["wall_s"])
    mean = {w: statistics.fmean(v) for w, v in walls.items()}
    first = args.counts[0]
    speedup = {str(w): round(mean[first] / m, 3) for w, m in mean.items() if first in mean and m > 0}
    return {
        "bench": "throughput",
        "partial": partial,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": platform.node(),
        "host_speed": state.get("host_speed"),  # bench.host_speed: compare wall times across hosts only with it
        "problems": list(args.problems),
        "samples": args.samples,
        "size": args.size,
        "eval_overrides": getattr(args, "eval_overrides", {}),
        "order": state["order"],
        "runs": runs,
        "mean_wall_s": {str(w): round(m, 3) for w, m in mean.items()},
        "speedup_vs_first": speedup,
        "target": {"workers": max(args.counts), "over": first, "speedup": TARGET},
        "meets_target": (speedup.get(str(max(args.counts)), 0) >= TARGET) if len(mean) > 1 and not partial else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", default=",".join(PROBLEMS), help="built-in level-1 problems, comma-separated")
    parser.add_argument("--samples", type=int, default=8, help="copies of each solution (each compiles anew)")
    parser.add_argument("--workers", default="1,4", help="worker counts per GPU (CPU: workers), the first the base")
    parser.add_argument("--rounds", type=int, default=1, help="passes over the counts, every other one mirrored")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--size", default="auto")
    parser.add_argument("--eval", default="", help="EvalConfig settings instead of their defaults: KEY=VALUE,...")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    args.problems = [p for p in args.problems.split(",") if p]
    try:
        args.eval_overrides = eval_overrides(args.eval)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        args.counts = [int(w) for w in args.workers.split(",")]
    except ValueError:
        parser.error(f"--workers: comma-separated counts, got {args.workers!r}")
    if not args.counts or min(args.counts) < 1 or args.samples < 1 or args.rounds < 1:
        parser.error("--workers counts, --samples and --rounds must be at least 1")
    if args.device == "auto":
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    from kzcore.plugins import get_plugin_manager

    pm = get_plugin_manager()
    problems, candidates = batch(args.problems)
    from bench.host_speed import probe

    state: dict = {"runs": [], "order": order(args.counts, args.rounds), "host_speed": probe(pm=pm)}
    try:
        with sigterm_raises():
            for workers in state["order"]:
                state["runs"].append(measure(workers, problems, candidates, args, pm))
                if args.out:
                    write_json_atomic(args.out, report(state, args, partial=True))
    except (Terminated, KeyboardInterrupt) as exc:
        return cut_short("throughput.py", args.out, exc, lambda: report(state, args, partial=True))
    return complete(report(state, args, partial=False), args.out)


if __name__ == "__main__":
    sys.exit(main())

"""Does a pool with several workers per GPU finish a batch faster than one worker? One batch of short kernels (9
built-in level-1 Triton solutions x 8 samples: 72 candidates, each compiling anew as a rollout's new source would)
through a warm pool of each worker count in turn, in one process, side by side: the wall time from the first job
sent to the last result (pool start-up not counted), evaluations per minute, the per-candidate stage medians, and
each count's speedup over the first.

    python -m bench run throughput --workers 1,4 --out bench/results/throughput.json
    python -m bench run throughput --device cpu --size small --problems 1_ReLU --samples 2 --workers 1,2   # smoke

Target (one GPU, full size): 4 workers at least 1.5x faster than 1. Timing holds the GPU alone (the per-GPU lock),
so the ratio is bounded by how much of a candidate's evaluation is not its timed phase. ``--rounds 2`` measures
each count twice, in mirrored order (1, 4, 4, 1), so a drift of the machine over the run does not favour one."""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.report import Terminated, complete, cut_short, sigterm_raises, write_json_atomic  # noqa: E402

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


def batch(problems: list[str], samples: int, level: int = 1):
    """(problems, candidates): ``samples`` copies of the built-in Triton solution of each of ``problems``."""
    import attrs

    from kzcore.problems import load_problems, load_solutions

    chosen = [p for p in load_problems(f"builtin:{level}") if p.name in problems]
    missing = sorted(set(problems) - {p.name for p in chosen})
    if missing:
        raise SystemExit(f"throughput: no built-in level-{level} problem {', '.join(missing)}")
    solutions = load_solutions("builtin", chosen, "triton")
    return chosen, [attrs.evolve(c, sample=s) for s in range(samples) for c in solutions]


def measure(workers: int, problems, candidates, args, pm) -> dict:
    """One pool of ``workers`` workers per GPU (or CPU workers), started before the clock; the batch through it."""
    from kzcore.executors.local import LocalPool
    from kzcore.plugins import plugin_specs
    from kzcore.types import EvalConfig, EvalJob

    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="kz-bench-triton-cache-")  # every count compiles anew
    config = EvalConfig(device=args.device, size=args.size, workers_per_gpu=workers)
    by_name = {p.name: p for p in problems}
    jobs = [EvalJob(problem=by_name[c.problem], candidate=c, config=config) for c in candidates]
    pool = LocalPool(workers=workers if args.device == "cpu" else None, config=config, plugins=plugin_specs(pm))
    results = []
    try:
        t = time.perf_counter()
        pool.start()
        startup = time.perf_counter() - t
        t = time.perf_counter()
        for result in pool.map(jobs):
            results.append(result)
        wall = time.perf_counter() - t
    finally:
        pool.close()
    stages = sorted({s for r in results for s in r.stages})
    figures = {
        "workers": workers,
        "device": pool.device,
        "pool_startup_s": round(startup, 3),
        "candidates": len(results),
        "correct": sum(r.correct for r in results),
        "statuses": {s: sum(r.status.value == s for r in results) for s in sorted({r.status.value for r in results})},
        "wall_s": round(wall, 3),
        "evals_per_min": round(60 * len(results) / wall, 2) if wall > 0 else None,
        "stage_median_s": {s: round(statistics.median(r.stages.get(s, 0.0) for r in results), 4) for s in stages},
        "evaluation_median_s": round(statistics.median(sum(r.stages.values()) for r in results), 4)
        if results
        else None,
    }
    print(
        f"{workers} worker(s): {len(results)} candidates in {wall:.2f} s ({figures['evals_per_min']} evals/min), "
        f"{figures['correct']} correct",
        file=sys.stderr,
    )
    return figures


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
        "problems": list(args.problems),
        "samples": args.samples,
        "size": args.size,
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
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    args.problems = [p for p in args.problems.split(",") if p]
    try:
        args.counts = [int(w) for w in args.workers.split(",")]
    except ValueError:
        parser.error(f"--workers: comma-separated counts, got {args.workers!r}")
    if not args.counts or min(args.counts) < 1 or args.samples < 1 or args.rounds < 1:
        parser.error("--workers counts, --samples and --rounds must be at least 1")
    if args.device == "auto":
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    os.environ["TRITON_ALWAYS_COMPILE"] = "1"  # each copy compiles its kernels, as a rollout's new source would

    from kzcore.plugins import get_plugin_manager

    pm = get_plugin_manager()
    problems, candidates = batch(args.problems, args.samples)
    state: dict = {"runs": [], "order": order(args.counts, args.rounds)}
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

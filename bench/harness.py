"""Evaluator throughput and latency: the built-in Triton reference solutions through a warm worker pool.

Prints one JSON object (and writes it to --out): per-candidate end-to-end latency and per-stage seconds,
evaluations per minute, and each problem's verdict and speedup. Triton's cache starts empty, so every
candidate pays its own kernel compilation, as a new RL rollout would.

    python bench/harness.py --levels 1,2 --out bench/results/harness.json
    python bench/harness.py --levels 1,2 --scaling --repeat 3 --out scaling.json   # 1 GPU vs all GPUs, batch
    python bench/harness.py --levels 1,2 --scaling --window 45 --out scaling.json  # ... saturated
Targets (one H200, level 1): median end-to-end <= 1.0 s per candidate, >= 100 evaluations/min; all GPUs
(two) >= 1.8x the throughput of one.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path


def throughput_pass(problems, candidates, by_key, args, pm) -> dict:
    """All candidates submitted at once to a pool with several workers per GPU (timing stays exclusive
    through the per-GPU lock), Triton cache empty again: evaluations per minute, per level.

    Two measures. Batch (default): ``--repeat`` copies of every candidate, timed until the last result, so
    the figure includes the drain at the end, when the slowest jobs run and other workers idle. Saturated
    (``--window S``): far more jobs than S seconds can finish, and only results arriving within S seconds of
    the first dispatch count: the rate with the queue never empty, as in a long RL run; the pool is closed
    at the end of the window (the jobs still running are killed, not counted). The saturated measure sends
    jobs first-in-first-out (copy after copy of the whole level): the pool's longest-expected-first order
    would fill the window with the costliest problems, the more so the more workers there are, and a count
    of results would then compare different work (measured on two H200s: level 1 1.53x that way)."""
    import attrs
    from schedule import FifoQueue  # bench/schedule.py, beside this file

    from kzcore.executors.local import LocalPool
    from kzcore.plugins import plugin_specs
    from kzcore.types import EvalConfig, EvalJob

    config = EvalConfig(device=args.device, size=args.size, workers_per_gpu=args.workers_per_gpu)
    if args.repeat > 1 or args.window:  # each copy compiles its kernels again, as a rollout's new source would
        os.environ["TRITON_ALWAYS_COMPILE"] = "1"
    out = {"workers_per_gpu": args.workers_per_gpu, "repeat": args.repeat, "window_s": args.window,
           "measure": "saturated" if args.window else "batch",
           "dispatch": "first-in-first-out" if args.window else "longest-first",
           "triton_always_compile": os.environ.get("TRITON_ALWAYS_COMPILE") == "1"}  # fmt: skip
    for level in sorted({c.level for c in candidates}):
        os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="kz-bench-triton-cache-")
        pool = LocalPool(config=config, plugins=plugin_specs(pm))
        if args.window:
            pool.queue_class = FifoQueue
        pool.start()
        out["gpus"] = len(set(pool.slots))
        mine = [c for c in candidates if c.level == level]
        copies = (
            args.repeat if not args.window else max(args.repeat, int(args.window * 2 * len(pool.slots)) // len(mine))
        )
        jobs = [
            EvalJob(problem=by_key[(c.level, c.problem)], candidate=attrs.evolve(c, sample=r), config=config)
            for r in range(copies)
            for c in mine
        ]
        results = []
        t = time.perf_counter()
        stream = pool.map(jobs)
        for result in stream:
            if args.window and time.perf_counter() - t > args.window:
                break
            results.append(result)
        stream.close()
        wall = args.window if args.window and len(results) < len(jobs) else time.perf_counter() - t
        pool.close()
        if args.window and len(results) == len(jobs):
            print(f"level{level}: every job finished inside the window: this is a batch figure", file=sys.stderr)
        speedups = {f"level{r.level}/{r.problem}": r.speedup for r in results}
        out[f"level{level}"] = {
            "candidates": len(results),
            "submitted": len(jobs),
            "correct": sum(r.correct for r in results),
            "wall_s": round(wall, 3),
            "evals_per_min": round(60 * len(results) / wall, 2),
            "speedups": speedups,
        }
        print(f"throughput level{level}: {out[f'level{level}']['evals_per_min']} evals/min", file=sys.stderr)
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--levels", default="1,2")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--size", default="auto")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--workers-per-gpu", type=int, default=4, help="for the throughput pass")
    parser.add_argument(
        "--repeat", type=int, default=3,
        help="throughput pass: each candidate this many times (each compiling anew: TRITON_ALWAYS_COMPILE=1)",
    )  # fmt: skip
    parser.add_argument(
        "--window", type=float, default=None,
        help="throughput pass: saturated rate over this many seconds per level (default: batch of --repeat)",
    )  # fmt: skip
    parser.add_argument("--throughput-only", action="store_true", help="skip the one-at-a-time latency pass")
    parser.add_argument("--latency-only", action="store_true", help="skip the throughput pass")
    parser.add_argument("--scaling", action="store_true", help="throughput on 1 GPU vs all GPUs (subprocesses)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.scaling:
        return scaling(args)

    from kzcore.executors.local import LocalPool
    from kzcore.plugins import get_plugin_manager, plugin_specs
    from kzcore.problems import load_problems, load_solutions
    from kzcore.results import package_versions
    from kzcore.types import EvalConfig, EvalJob

    pm = get_plugin_manager()
    problems = load_problems(f"builtin:{args.levels}")
    candidates = load_solutions("builtin", problems, "triton")
    by_key = {(p.level, p.name): p for p in problems}
    if args.throughput_only:
        report = {"bench": "harness-throughput", "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                  "throughput": throughput_pass(problems, candidates, by_key, args, pm)}  # fmt: skip
        return _write(report, args.out)
    config = EvalConfig(device=args.device, size=args.size)
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="kz-bench-triton-cache-")  # empty cache
    pool = LocalPool(workers=args.workers, config=config, plugins=plugin_specs(pm))
    t_start = time.perf_counter()
    pool.start()
    startup_s = time.perf_counter() - t_start

    rows = []
    t0 = time.perf_counter()
    for cand in candidates:  # one at a time: per-candidate latency with everything included
        job = EvalJob(problem=by_key[(cand.level, cand.problem)], candidate=cand, config=config)
        t = time.perf_counter()
        (result,) = list(pool.map([job]))
        rows.append(
            {
                "problem": f"level{result.level}/{result.problem}",
                "status": result.status.value,
                "message": result.message[:300],
                "e2e_s": round(time.perf_counter() - t, 4),
                "stages": result.stages,
                "ref_ms": result.ref_ms,
                "cand_ms": result.cand_ms,
                "speedup": result.speedup,
                "ref_spread": result.ref_spread,
                "cand_spread": result.cand_spread,
                "timing_reps": result.timing_reps,
                "size": result.size,
            }
        )
        print(
            f"{rows[-1]['problem']:40s} {result.status.value:18s} e2e {rows[-1]['e2e_s']:.3f}s speedup {result.speedup}",
            file=sys.stderr,
        )
    total_s = time.perf_counter() - t0
    pool.close()
    throughput = None
    if pool.device == "cuda" and not args.latency_only:
        throughput = throughput_pass(problems, candidates, by_key, args, pm)

    def summary(level: int | None) -> dict:
        sel = [r for r in rows if level is None or r["problem"].startswith(f"level{level}/")]
        e2e = [r["e2e_s"] for r in sel]
        stages = sorted({s for r in sel for s in r["stages"]})
        return {
            "candidates": len(sel),
            "correct": sum(r["status"] == "correct" for r in sel),
            "e2e_median_s": statistics.median(e2e) if e2e else None,
            "e2e_p90_s": statistics.quantiles(e2e, n=10)[-1] if len(e2e) >= 2 else None,
            "evals_per_min": 60 * len(sel) / sum(e2e) if e2e else None,
            "stage_median_s": {s: statistics.median(r["stages"].get(s, 0.0) for r in sel) for s in stages},
        }

    report = {
        "bench": "harness",
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": platform.node(),
        "device": pool.info.get("device_name"),
        "executor": pool.info,
        "workers": len(pool.slots),
        "python": sys.version.split()[0],
        "packages": package_versions(),
        "pool_startup_s": round(startup_s, 3),
        "total_s": round(total_s, 3),
        "summary": {"level1": summary(1), "level2": summary(2), "all": summary(None)},
        "throughput": throughput,
        "targets": {"e2e_median_s_max": 1.0, "evals_per_min_min": 100},
        "results": rows,
    }
    return _write(report, args.out)


def _write(report: dict, out: str | None) -> int:
    text = json.dumps(report, indent=2)
    print(text)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text)
    return 0


def scaling(args) -> int:
    """The throughput pass in a subprocess that sees 1 GPU, then one that sees all of them (same workload,
    each with an empty Triton cache): evaluations per minute and their ratio."""
    import subprocess

    import torch

    from kzcore.results import package_versions

    n = torch.cuda.device_count()
    if n < 2:
        print(f"--scaling needs at least 2 GPUs; this machine has {n}", file=sys.stderr)
        return 1
    runs = {}
    for gpus in (1, n):
        with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
            env = dict(os.environ, CUDA_VISIBLE_DEVICES=",".join(str(i) for i in range(gpus)))
            cmd = [sys.executable, __file__, "--throughput-only", "--levels", args.levels, "--repeat",
                   str(args.repeat), "--workers-per-gpu", str(args.workers_per_gpu), "--out", tmp.name]  # fmt: skip
            if args.window:
                cmd += ["--window", str(args.window)]
            subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
            runs[gpus] = json.loads(Path(tmp.name).read_text())["throughput"]
    total = {g: sum(v["candidates"] for k, v in r.items() if k.startswith("level")) for g, r in runs.items()}
    wall = {g: sum(v["wall_s"] for k, v in r.items() if k.startswith("level")) for g, r in runs.items()}
    per_min = {g: round(60 * total[g] / wall[g], 2) for g in runs}
    report = {
        "bench": "harness-scaling",
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": platform.node(),
        "device": torch.cuda.get_device_name(0),
        "gpus": n,
        "packages": package_versions(),
        "evals_per_min": {f"{g}gpu": v for g, v in per_min.items()},
        "ratio": round(per_min[n] / per_min[1], 3),
        "measure": runs[1]["measure"],
        "ratio_per_level": {
            k: round(runs[n][k]["evals_per_min"] / runs[1][k]["evals_per_min"], 3)
            for k in runs[1]
            if k.startswith("level")
        },
        "target_ratio_min": 1.8,
        "runs": {f"{g}gpu": r for g, r in runs.items()},
    }
    return _write(report, args.out)


if __name__ == "__main__":
    sys.exit(main())

"""Evaluator throughput and latency: the built-in Triton reference solutions through a warm worker pool.

Prints one JSON object (and writes it to --out): per-candidate end-to-end latency and per-stage seconds,
evaluations per minute, and each problem's verdict and speedup. Triton's cache starts empty, so every
candidate pays its own kernel compilation, as a new RL rollout would.

    python -m bench run harness --levels 1,2 --out bench/results/harness.json
    python -m bench run harness --levels 1,2 --scaling --repeat 3 --out scaling.json   # 1 GPU vs all GPUs, batch
    python -m bench run harness --levels 1,2 --scaling --window 45 --out scaling.json  # ... saturated
Targets (one H200, level 1): median end-to-end <= 1.0 s per candidate, >= 100 evaluations/min; all GPUs
(two) >= 1.8x the throughput of one.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.report import Terminated, complete, cut_short, scratch_dir, sigterm_raises, write_json_atomic  # noqa: E402


def throughput_pass(problems, candidates, by_key, args, pm, out: dict | None = None, on_level=None) -> dict:
    """All candidates submitted at once to a pool with several workers per GPU (timing stays exclusive
    through the per-GPU lock), Triton cache empty again: evaluations per minute, per level.

    Two measures. Batch (default): ``--repeat`` copies of every candidate, timed until the last result, so
    the figure includes the drain at the end, when the slowest jobs run and other workers idle. Saturated
    (``--window S``): far more jobs than S seconds can finish, and only results arriving within S seconds of
    the first dispatch count: the rate with the queue never empty, as in a long RL run; the pool is closed
    at the end of the window (the jobs still running are killed, not counted). The saturated measure sends
    jobs first-in-first-out (copy after copy of the whole level): the pool's longest-expected-first order
    would fill the window with the costliest problems, the more so the more workers there are, and a count
    of results would then compare different work (measured on two H200s: level 1 1.53x that way).

    The figures go into ``out`` (returned) level by level, ``on_level()`` called after each; a level cut short
    (SIGTERM, Ctrl-C, an error) is filed with the results it had and ``"cut_short": true``."""
    import attrs

    from bench.schedule import FifoQueue
    from kzcore.executors.local import LocalPool
    from kzcore.plugins import plugin_specs
    from kzcore.types import EvalConfig, EvalJob

    config = EvalConfig(device=args.device, size=args.size, workers_per_gpu=args.workers_per_gpu)
    config = attrs.evolve(config, **getattr(args, "eval_overrides", {}))
    if args.repeat > 1 or args.window:  # each copy compiles its kernels again, as a rollout's new source would
        os.environ["TRITON_ALWAYS_COMPILE"] = "1"
    out = {} if out is None else out
    out.update({"workers_per_gpu": args.workers_per_gpu, "repeat": args.repeat, "window_s": args.window,
                "measure": "saturated" if args.window else "batch",
                "dispatch": "first-in-first-out" if args.window else "longest-first",
                "triton_always_compile": os.environ.get("TRITON_ALWAYS_COMPILE") == "1"})  # fmt: skip
    for level in sorted({c.level for c in candidates}):
        os.environ["TRITON_CACHE_DIR"] = scratch_dir("kz-bench-triton-cache-")
        pool = LocalPool(config=config, plugins=plugin_specs(pm))
        if args.window:
            pool.queue_class = FifoQueue
        jobs, results, t = [], [], time.perf_counter()
        try:
            pool.start()
            out["gpus"] = len(set(pool.slots))
            mine = [c for c in candidates if c.level == level]
            copies = (
                args.repeat
                if not args.window
                else max(args.repeat, int(args.window * 2 * len(pool.slots)) // len(mine))
            )
            jobs = [
                EvalJob(problem=by_key[(c.level, c.problem)], candidate=attrs.evolve(c, sample=r), config=config)
                for r in range(copies)
                for c in mine
            ]
            for lock in pool.locks.values():
                lock.occupancy(reset=True)
            t = time.perf_counter()
            stream = pool.map(jobs)
            for result in stream:
                if args.window and time.perf_counter() - t > args.window:
                    break
                results.append(result)
            stream.close()
            wall = args.window if args.window and len(results) < len(jobs) else time.perf_counter() - t
            occupancy = {str(gpu): lock.occupancy() for gpu, lock in pool.locks.items()}
            drained_by = {str(gpu): lock.drained_by() for gpu, lock in pool.locks.items()}
        except BaseException:  # cut short: the results it had, marked
            out[f"level{level}"] = {**_level_figures(results, jobs, time.perf_counter() - t), "cut_short": True}
            raise
        finally:
            pool.close()
        if args.window and len(results) == len(jobs):
            print(f"level{level}: every job finished inside the window: this is a batch figure", file=sys.stderr)
        out[f"level{level}"] = _level_figures(results, jobs, wall)
        if occupancy:  # several workers per GPU: where the GPU's time went, by what held its lock
            out[f"level{level}"]["gpu_occupancy_s"] = occupancy
            out[f"level{level}"]["gpu_draining_by_s"] = drained_by  # which holds the timings waited for
        print(f"throughput level{level}: {out[f'level{level}']['evals_per_min']} evals/min", file=sys.stderr)
        if on_level is not None:
            on_level()
    return out


def _level_figures(results, jobs, wall: float) -> dict:
    """One level's throughput figures from its results (all of them, or those a run cut short had): with every
    result that is not ``correct`` (its status and message: a correct solution judged otherwise under load is the
    evaluator's fault) and each stage's summed seconds (how much of the work is the timed phase, which the
    per-GPU lock serialises)."""
    stages: dict[str, float] = {}
    for r in results:
        for name, seconds in (r.stages or {}).items():  # a stage's `_max` figure: the longest, not a sum
            stages[name] = (
                max(stages.get(name, 0.0), seconds) if name.endswith("_max") else stages.get(name, 0.0) + seconds
            )
    return {
        "candidates": len(results),
        "submitted": len(jobs),
        "correct": sum(r.correct for r in results),
        "wall_s": round(wall, 3),
        "evals_per_min": round(60 * len(results) / wall, 2) if wall > 0 else None,
        "speedups": {f"level{r.level}/{r.problem}": r.speedup for r in results},
        "not_correct": [
            {
                "problem": f"level{r.level}/{r.problem}",
                "sample": r.sample,
                "status": r.status.value,
                "message": r.message[:400],
            }
            for r in results
            if not r.correct
        ],  # fmt: skip
        "stage_total_s": {name: round(seconds, 3) for name, seconds in sorted(stages.items())},
    }


def latency_pass(candidates, by_key, args, pm, state: dict) -> None:
    """One candidate at a time through a warm pool, Triton cache empty: per-candidate latency with everything
    included. Fills ``state`` as it goes: ``pool``, ``pool_startup_s``, ``rows`` (one per result), ``t0`` and,
    once every candidate ran, ``total_s``; the pool is closed however it ends."""
    from kzcore.executors.local import LocalPool
    from kzcore.plugins import plugin_specs
    from kzcore.types import EvalConfig, EvalJob

    config = EvalConfig(device=args.device, size=args.size)
    os.environ["TRITON_CACHE_DIR"] = scratch_dir("kz-bench-triton-cache-")  # empty cache
    pool = state["pool"] = LocalPool(workers=args.workers, config=config, plugins=plugin_specs(pm))
    rows = state["rows"]
    try:
        t_start = time.perf_counter()
        pool.start()
        state["pool_startup_s"] = round(time.perf_counter() - t_start, 3)
        t0 = state["t0"] = time.perf_counter()
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
        state["total_s"] = round(time.perf_counter() - t0, 3)
    finally:
        pool.close()


def _summary(rows: list[dict], level: int | None) -> dict:
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


def latency_report(state: dict, partial: bool) -> dict:
    """The report of a latency run (and its throughput pass) from ``state`` (`latency_pass`): complete, or what
    a run cut short had (fewer rows; no pool, no total or no throughput yet: None)."""
    from kzcore.results import package_versions

    pool, rows = state.get("pool"), state.get("rows", [])
    info = pool.info if pool is not None else {}
    total_s = state.get("total_s")
    if total_s is None and "t0" in state:  # cut short during the latency pass: its seconds so far
        total_s = round(time.perf_counter() - state["t0"], 3)
    return {
        "bench": "harness",
        "partial": partial,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": platform.node(),
        "device": info.get("device_name"),
        "executor": info,
        "workers": len(pool.slots) if pool is not None else None,
        "python": sys.version.split()[0],
        "packages": package_versions(),
        "pool_startup_s": state.get("pool_startup_s"),
        "total_s": total_s,
        "summary": {"level1": _summary(rows, 1), "level2": _summary(rows, 2), "all": _summary(rows, None)},
        "throughput": state.get("throughput"),
        "targets": {"e2e_median_s_max": 1.0, "evals_per_min_min": 100},
        "results": rows,
    }


def throughput_report(state: dict, partial: bool) -> dict:
    """The report of ``--throughput-only``: the throughput pass's levels so far."""
    return {"bench": "harness-throughput", "partial": partial, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "throughput": state.get("throughput")}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
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
    args = parser.parse_args(argv)
    if args.scaling:
        return scaling(args)

    from kzcore.plugins import get_plugin_manager
    from kzcore.problems import load_problems, load_solutions

    pm = get_plugin_manager()
    problems = load_problems(f"builtin:{args.levels}")
    candidates = load_solutions("builtin", problems, "triton")
    by_key = {(p.level, p.name): p for p in problems}
    state: dict = {"rows": [], "throughput": {} if args.throughput_only else None}
    assemble = throughput_report if args.throughput_only else latency_report

    def checkpoint() -> None:  # the report so far, on disk: a kill that no handler sees still leaves it
        if args.out:
            write_json_atomic(args.out, assemble(state, partial=True))

    try:
        with sigterm_raises():
            if args.throughput_only:
                throughput_pass(problems, candidates, by_key, args, pm, state["throughput"], on_level=checkpoint)
            else:
                latency_pass(candidates, by_key, args, pm, state)
                if state["pool"].device == "cuda" and not args.latency_only:
                    checkpoint()
                    state["throughput"] = {}
                    throughput_pass(problems, candidates, by_key, args, pm, state["throughput"], on_level=checkpoint)
    except (Terminated, KeyboardInterrupt) as exc:
        return cut_short("harness.py", args.out, exc, lambda: assemble(state, partial=True))
    return complete(assemble(state, partial=False), args.out)


def scaling(args) -> int:
    """The throughput pass in a subprocess that sees 1 GPU, then one that sees all of them (same workload,
    each with an empty Triton cache): evaluations per minute and their ratio. Cut short, the report has the
    runs done and what the running one had written (``"partial": true`` in that run)."""
    import torch

    n = torch.cuda.device_count()
    if n < 2:
        print(f"--scaling needs at least 2 GPUs; this machine has {n}", file=sys.stderr)
        return 1
    runs: dict = {}
    device = torch.cuda.get_device_name(0)
    try:
        with sigterm_raises(), tempfile.TemporaryDirectory(prefix="kz-bench-scaling-") as tmp:
            for gpus in (1, n):
                path = Path(tmp) / f"{gpus}gpu.json"
                env = dict(os.environ, CUDA_VISIBLE_DEVICES=",".join(str(i) for i in range(gpus)))
                cmd = [sys.executable, __file__, "--throughput-only", "--levels", args.levels, "--repeat",
                       str(args.repeat), "--workers-per-gpu", str(args.workers_per_gpu), "--out", str(path)]  # fmt: skip
                if args.window:
                    cmd += ["--window", str(args.window)]
                proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)
                try:
                    rc = proc.wait()
                except BaseException:  # cut short: the run's partial report, once it has written it
                    _stop(proc)
                    if path.exists():
                        runs[gpus] = {**json.loads(path.read_text())["throughput"], "partial": True}
                    raise
                if rc:
                    raise subprocess.CalledProcessError(rc, cmd)
                runs[gpus] = json.loads(path.read_text())["throughput"]
    except (Terminated, KeyboardInterrupt) as exc:
        return cut_short("harness.py --scaling", args.out, exc, lambda: scaling_report(runs, n, device, partial=True))
    return complete(scaling_report(runs, n, device, partial=False), args.out)


def _stop(proc: subprocess.Popen) -> None:
    """A throughput subprocess, this process being cut short: it had the same signal (``timeout`` and Ctrl-C
    signal the whole process group) and writes what it measured; one still running after 30 s is sent SIGTERM,
    after 30 s more killed."""
    for action in (None, proc.terminate, proc.kill):
        if action is not None:
            action()
        try:
            proc.wait(30)
            return
        except subprocess.TimeoutExpired:
            continue


def scaling_report(runs: dict, n: int, device: str, partial: bool) -> dict:
    """The ``--scaling`` report from the throughput runs keyed by GPU count (1 and ``n``; a run cut short has
    only its finished levels): evaluations per minute of each, and the ratios where both runs have them."""
    from kzcore.results import package_versions

    levels = {
        g: {k: v for k, v in r.items() if k.startswith("level") and not v.get("cut_short")} for g, r in runs.items()
    }
    total = {g: sum(v["candidates"] for v in ls.values()) for g, ls in levels.items()}
    wall = {g: sum(v["wall_s"] for v in ls.values()) for g, ls in levels.items()}
    per_min = {g: round(60 * total[g] / wall[g], 2) for g in runs if wall[g] > 0}
    both = 1 in per_min and n in per_min
    return {
        "bench": "harness-scaling",
        "partial": partial,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": platform.node(),
        "device": device,
        "gpus": n,
        "packages": package_versions(),
        "evals_per_min": {f"{g}gpu": v for g, v in per_min.items()},
        "ratio": round(per_min[n] / per_min[1], 3) if both else None,
        "measure": runs[1]["measure"] if 1 in runs else None,
        "ratio_per_level": {
            k: round(levels[n][k]["evals_per_min"] / levels[1][k]["evals_per_min"], 3)
            for k in levels.get(1, {})
            if k in levels.get(n, {}) and levels[n][k]["evals_per_min"] and levels[1][k]["evals_per_min"]
        },
        "target_ratio_min": 1.8,
        "runs": {f"{g}gpu": r for g, r in runs.items()},
    }


if __name__ == "__main__":
    sys.exit(main())

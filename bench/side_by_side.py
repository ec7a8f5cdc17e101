"""Do two runs on one GPU time each other's work? The same batch (the built-in level-1 Triton solutions of
``--problems``) evaluated by `kz eval` alone, then by ``--runs`` `kz eval` processes started together on the same
GPU, first with the host-wide GPU lock (the default) and then with it off (``KZ_GPU_LOCKS=off``). Each candidate's
speedup side by side is compared with its speedup alone: with the lock, a timing never overlaps another run's
work, so the two should agree to within the timer's own run-to-run spread (measured by a second run alone); with
it off they need not. Every run reports its wall time too (with the lock, the runs' timings take turns).

    python -m bench run side_by_side --out bench/results/side-by-side.json
    python -m bench run side_by_side --device cpu --size small --problems 1_ReLU,3_Sigmoid   # smoke (no lock on a CPU)

Target (one GPU, full size): side by side with the lock, every candidate's |speedup / alone - 1| within twice the
largest alone-vs-alone deviation, or 2 %, whichever is larger."""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.report import Terminated, complete, cut_short, scratch_dir, sigterm_raises, write_json_atomic  # noqa: E402

PROBLEMS = "1_ReLU,3_Sigmoid,6_MulAdd,7_SumReduction,11_Softmax,12_LogSoftmax,13_LayerNorm,14_RMSNorm,18_L1NormRows"
FLOOR = 0.02  # the smallest deviation the target allows: the timer's documented run-to-run CV bound


def kz_eval(problems: str, out: Path, args, env: dict) -> subprocess.Popen:
    """A `kz eval` of the built-in Triton solutions of ``problems`` into ``out``, started (not waited for)."""
    cmd = [sys.executable, "-m", "kzcore.cli", "eval", "--problems", "builtin", "--only", problems,
           "--solutions", "builtin", "--language", "triton", "--device", args.device, "--size", args.size,
           "--workers", "1", "--out", str(out)]  # fmt: skip
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def speedups(path: Path) -> dict[str, float | None]:
    """Problem name -> the speedup its result records (None where the candidate was not timed)."""
    from kzcore.results import read_results

    return {r.problem: (r.speedup if r.correct and r.speedup else None) for r in read_results(path)}


def phase(name: str, runs: int, args, work: Path, lock: bool) -> dict:
    """``runs`` `kz eval` processes started together (each its own results file); their speedups and wall times."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    if not lock:
        env["KZ_GPU_LOCKS"] = "off"
    outs = [work / f"{name}-{i}.jsonl" for i in range(runs)]
    t0 = time.perf_counter()
    procs = [kz_eval(args.problems, out, args, env) for out in outs]
    walls, errors = [], []
    for proc in procs:
        _, err = proc.communicate()
        walls.append(round(time.perf_counter() - t0, 2))
        if proc.returncode != 0:
            errors.append(f"exit {proc.returncode}: {err.strip().splitlines()[-1] if err.strip() else ''}")
    if errors:
        raise RuntimeError(f"side_by_side: phase {name}: " + "; ".join(errors))
    return {"lock": lock, "runs": runs, "wall_s": walls, "speedups": [speedups(out) for out in outs]}


def deviations(runs: list[dict[str, float | None]], alone: dict[str, float | None]) -> dict[str, float]:
    """Per problem, the largest |speedup / alone - 1| over ``runs`` (problems timed in each)."""
    out = {}
    for name, base in alone.items():
        values = [run.get(name) for run in runs]
        if base and all(values):
            out[name] = round(max(abs(v / base - 1) for v in values if v), 4)
    return out


def report(state: dict, args, partial: bool) -> dict:
    phases = state["phases"]
    out: dict = {
        "bench": "side_by_side",
        "partial": partial,
        "machine": platform.node(),
        "device": args.device,
        "size": args.size,
        "problems": args.problems.split(","),
        "runs_side_by_side": args.runs,
        "phases": phases,
        "target": "every |side by side with the lock / alone - 1| <= max(2 x alone-vs-alone, 2 %)",
    }
    if "alone" not in phases:
        return out
    alone = phases["alone"]["speedups"][0]
    if "again" in phases:
        noise = deviations(phases["again"]["speedups"], alone)
        out["alone_vs_alone"] = noise
        bound = max(FLOOR, 2 * max(noise.values(), default=0.0))
        out["bound"] = round(bound, 4)
        for name in ("locked", "unlocked"):
            if name in phases:
                dev = deviations(phases[name]["speedups"], alone)
                out[f"{name}_vs_alone"] = dev
                out[f"{name}_max"] = max(dev.values(), default=None)
                out[f"{name}_median"] = round(statistics.median(dev.values()), 4) if dev else None
        if "locked" in phases and not partial:
            out["meets_target"] = (
                args.device == "cuda" and bool(out["locked_vs_alone"]) and (out["locked_max"] <= bound)
            )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", default=PROBLEMS, help="comma-separated built-in level-1 problems")
    parser.add_argument("--runs", type=int, default=2, help="kz eval processes side by side (default 2)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--size", default="full")
    parser.add_argument("--out", help="write the JSON report here (also after each phase)")
    args = parser.parse_args(argv)
    if args.runs < 2:
        parser.error("--runs: at least 2 (side by side)")
    work = Path(scratch_dir("kz-side-by-side-"))
    state: dict = {"phases": {}}
    plan = (("alone", 1, True), ("again", 1, True), ("locked", args.runs, True), ("unlocked", args.runs, False))
    try:
        with sigterm_raises():
            for name, runs, lock in plan:
                state["phases"][name] = phase(name, runs, args, work, lock)
                if args.out:
                    write_json_atomic(args.out, report(state, args, partial=True))
    except (Terminated, KeyboardInterrupt) as exc:
        return cut_short("side_by_side.py", args.out, exc, lambda: report(state, args, partial=True))
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        if args.out:
            write_json_atomic(args.out, report(state, args, partial=True))
        return 1
    return complete(report(state, args, partial=False), args.out)


if __name__ == "__main__":
    raise SystemExit(main())

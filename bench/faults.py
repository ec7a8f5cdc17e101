"""Fault tolerance of the evaluator: a stream of candidates mixing faults, cheats and good kernels through
one worker pool. Prints JSON (and writes --out): counts per expected/actual status, lost results, harness
crashes, good kernels misfiled. Targets: 0 lost, 0 harness crashes, 0 good kernels misfiled.

    python bench/faults.py --n 200 --out bench/results/faults.json     (CPU: Triton interpreter, small sizes)
"""

from __future__ import annotations

import argparse
import collections
import json
import platform
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ADVERSARIAL = ROOT / "tests" / "adversarial"

# candidate file (on built-in 1_ReLU unless noted) -> the statuses that are right for it
EXPECTED = {
    "crash_segv": {"runtime_error"},
    "infinite_loop": {"timeout"},
    "zeros_output": {"incorrect"},
    "half_output": {"incorrect"},
    "inplace_input": {"hack_suspected"},
    "hidden_torch_op": {"hack_suspected"},
    "no_launch": {"hack_suspected"},
    "thread_offload": {"static_check_failed", "hack_suspected"},
    "tamper_guard": {"static_check_failed", "hack_suspected"},
    "try_fallback": {"static_check_failed"},
    "syntax_error": {"compile_error"},
    "oob_write": {"runtime_error", "incorrect", "correct"},  # CPU interpreter: may not fault; GPU: runtime_error
}
GOOD = "good"


def candidates(n: int, seed: int):
    from kzcore.problems import load_problems, load_solutions

    problems = load_problems("builtin:1")
    relu = next(p for p in problems if p.name == "1_ReLU")
    good = {c.problem: c for c in load_solutions("builtin", problems, "triton")}
    rng = random.Random(seed)
    kinds = list(EXPECTED) + [GOOD] * len(EXPECTED)  # half good kernels
    out = []
    for i in range(n):
        kind = rng.choice(kinds)
        if kind == GOOD:
            problem = rng.choice(problems)
            out.append((kind, problem, good[problem.name].source))
        else:
            out.append((kind, relu, (ADVERSARIAL / f"{kind}.py").read_text()))
        out[-1] = (*out[-1], i)
    return problems, out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=20.0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    from kzcore.executors.local import LocalPool
    from kzcore.plugins import get_plugin_manager, plugin_specs
    from kzcore.results import package_versions
    from kzcore.types import Candidate, EvalConfig, EvalJob

    problems, items = candidates(args.n, args.seed)
    config = EvalConfig(trials=2, timeout_s=args.timeout)
    jobs, kind_of = [], {}
    for kind, problem, source, i in items:
        cand = Candidate(
            problem=problem.name, language="triton", level=problem.level, sample=i, source=source, origin=kind
        )
        jobs.append(EvalJob(problem=problem, candidate=cand, config=config))
        kind_of[i] = kind
    pool = LocalPool(workers=args.workers, config=config, plugins=plugin_specs(get_plugin_manager()))
    t0 = time.perf_counter()
    results, harness_error = [], None
    try:
        for r in pool.map(jobs):
            results.append(r)
    except Exception as exc:  # the number we want to be zero
        harness_error = f"{type(exc).__name__}: {exc}"
    finally:
        pool.close()
    wall = time.perf_counter() - t0

    by_sample = {r.sample: r for r in results}
    table = collections.defaultdict(collections.Counter)
    misfiled_good, wrong = [], []
    for i, kind in kind_of.items():
        r = by_sample.get(i)
        if r is None:
            continue
        table[kind][r.status.value] += 1
        if kind == GOOD and not r.correct:
            misfiled_good.append(
                {"sample": i, "problem": r.problem, "status": r.status.value, "message": r.message[:200]}
            )
        elif kind != GOOD and r.status.value not in EXPECTED[kind]:
            wrong.append({"sample": i, "kind": kind, "status": r.status.value, "message": r.message[:200]})
    report = {
        "bench": "faults",
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": platform.node(),
        "device": pool.info.get("device_name"),
        "packages": package_versions(),
        "candidates": len(jobs),
        "results": len(results),
        "lost_results": len(jobs) - len(by_sample),
        "harness_crashes": int(harness_error is not None),
        "harness_error": harness_error,
        "good_misfiled": len(misfiled_good),
        "faults_with_unexpected_status": len(wrong),
        "workers_replaced": pool.replaced,
        "wall_s": round(wall, 2),
        "per_kind": {k: dict(v) for k, v in sorted(table.items())},
        "misfiled_good": misfiled_good,
        "unexpected": wrong,
        "targets": {"lost_results": 0, "harness_crashes": 0, "good_misfiled": 0},
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    ok = report["lost_results"] == 0 and report["harness_crashes"] == 0 and report["good_misfiled"] == 0
    return 0 if ok and not wrong else 1


if __name__ == "__main__":
    sys.exit(main())

"""Dispatch order and the end of a batch: the same batch through a fresh pool twice, jobs sent first-in-
first-out and then longest expected first (the pool's JobQueue), wall time to the last result and how long
the workers sat idle while the batch drained.

    python bench/schedule.py --levels 2 --repeat 3 --workers 2 --out schedule.json

On a CPU machine the candidates run under Triton's interpreter: the figures compare two orders of the same
work on this machine, they are not kernel performance figures.
"""

from __future__ import annotations

import argparse
import collections
import json
import platform
import sys
import time
from pathlib import Path


class FifoQueue:
    """Jobs in submission order (the pool's order before JobQueue)."""

    def __init__(self, jobs, costs):
        self.jobs = collections.deque(jobs)

    def __len__(self):
        return len(self.jobs)

    def pop(self, now):
        return self.jobs.popleft()

    def push_front(self, job):
        self.jobs.appendleft(job)

    def finished(self, job, seconds):
        """First-in-first-out learns nothing from how long a job took."""


def run_batch(queue_class, jobs, args) -> dict:
    from kzcore.executors.local import LocalPool
    from kzcore.plugins import get_plugin_manager, plugin_specs

    pool = LocalPool(workers=args.workers, config=jobs[0].config, plugins=plugin_specs(get_plugin_manager()))
    pool.queue_class = queue_class
    pool.start()
    t0 = time.perf_counter()
    ends = []
    statuses = collections.Counter()
    for result in pool.map(jobs):
        ends.append(time.perf_counter() - t0)
        statuses[result.status.value] += 1
    pool.close()
    wall = ends[-1]
    n = len(pool.slots)
    # the last n results: after the first of them, fewer than n jobs were left running
    drain = wall - ends[-n] if len(ends) >= n else wall
    return {"wall_s": round(wall, 2), "drain_s": round(drain, 2), "statuses": dict(statuses)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--levels", default="2")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    import attrs

    from kzcore.executors.local import JobQueue
    from kzcore.problems import load_problems, load_solutions
    from kzcore.results import package_versions
    from kzcore.types import EvalConfig, EvalJob

    problems = load_problems(f"builtin:{args.levels}")
    by_key = {(p.level, p.name): p for p in problems}
    config = EvalConfig(device=args.device)
    candidates = load_solutions("builtin", problems, "triton")
    jobs = [
        EvalJob(problem=by_key[(c.level, c.problem)], candidate=attrs.evolve(c, sample=r), config=config)
        for r in range(args.repeat)
        for c in candidates
    ]
    runs = {}
    for name, queue_class in (("fifo", FifoQueue), ("longest_first", JobQueue)):
        runs[name] = run_batch(queue_class, jobs, args)
        print(f"{name}: {runs[name]}", file=sys.stderr)
    report = {
        "bench": "schedule",
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": platform.node(),
        "packages": package_versions(),
        "jobs": len(jobs),
        "workers": args.workers,
        "device": args.device,
        "runs": runs,
        "wall_ratio_fifo_over_longest_first": round(runs["fifo"]["wall_s"] / runs["longest_first"]["wall_s"], 3),
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

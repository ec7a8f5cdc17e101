"""Dispatch order and the end of a batch: the same batch through a fresh pool twice, jobs sent first-in-
first-out and then longest expected first (the pool's JobQueue), wall time to the last result and how long
the workers sat idle while the batch drained.

    python -m bench run schedule --levels 2 --repeat 3 --workers 2 --out schedule.json

On a CPU machine the candidates run under Triton's interpreter: the figures compare two orders of the same
work on this machine, they are not kernel performance figures.
"""

from __future__ import annotations

import argparse
import collections
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.report import Terminated, complete, cut_short, sigterm_raises, write_json_atomic  # noqa: E402


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


def run_batch(queue_class, jobs, args, progress: dict | None = None) -> dict:
    """The batch through a fresh pool sending jobs in ``queue_class``'s order: wall time to the last result and
    the drain. ``progress`` (when given) holds the results so far while it runs (what a run cut short keeps)."""
    from kzcore.executors.local import LocalPool
    from kzcore.plugins import get_plugin_manager, plugin_specs

    progress = {} if progress is None else progress
    pool = LocalPool(workers=args.workers, config=jobs[0].config, plugins=plugin_specs(get_plugin_manager()))
    pool.queue_class = queue_class
    ends = []
    statuses = collections.Counter()
    try:
        pool.start()
        t0 = time.perf_counter()
        for result in pool.map(jobs):
            ends.append(time.perf_counter() - t0)
            statuses[result.status.value] += 1
            progress.update(results=len(ends), elapsed_s=round(ends[-1], 2), statuses=dict(statuses))
    finally:
        pool.close()
    wall = ends[-1]
    n = len(pool.slots)
    # the last n results: after the first of them, fewer than n jobs were left running
    drain = wall - ends[-n] if len(ends) >= n else wall
    return {"wall_s": round(wall, 2), "drain_s": round(drain, 2), "statuses": dict(statuses)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--levels", default="2")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    import attrs

    from kzcore.executors.local import JobQueue
    from kzcore.problems import load_problems, load_solutions
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
    state: dict = {"jobs": len(jobs), "runs": {}}
    try:
        with sigterm_raises():
            for name, queue_class in (("fifo", FifoQueue), ("longest_first", JobQueue)):
                state["running"] = {"order": name, "results": 0}
                state["runs"][name] = run_batch(queue_class, jobs, args, progress=state["running"])
                del state["running"]
                print(f"{name}: {state['runs'][name]}", file=sys.stderr)
                if args.out:  # the batches so far, on disk: a kill that no handler sees still leaves them
                    write_json_atomic(args.out, schedule_report(state, args, partial=True))
    except (Terminated, KeyboardInterrupt) as exc:
        return cut_short("schedule.py", args.out, exc, lambda: schedule_report(state, args, partial=True))
    return complete(schedule_report(state, args, partial=False), args.out)


def schedule_report(state: dict, args, partial: bool) -> dict:
    """The report from ``state``: the batches done (``runs``), the ratio once both are, and for a run cut short
    the batch it was in (``cut_short_in``: its order and its results so far)."""
    from kzcore.results import package_versions

    runs = state["runs"]
    both = "fifo" in runs and "longest_first" in runs
    return {
        "bench": "schedule",
        "partial": partial,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": platform.node(),
        "packages": package_versions(),
        "jobs": state["jobs"],
        "workers": args.workers,
        "device": args.device,
        "runs": runs,
        "wall_ratio_fifo_over_longest_first": (
            round(runs["fifo"]["wall_s"] / runs["longest_first"]["wall_s"], 3) if both else None
        ),
        **({"cut_short_in": state["running"]} if "running" in state else {}),
    }


if __name__ == "__main__":
    sys.exit(main())

"""The order the local pool sends jobs in: longest expected first, with each problem's cost learned from its
finished jobs. Neighbour: `executors.local` (the pool) pops from it; bench/schedule.py compares it with FIFO."""

from __future__ import annotations

import collections
from collections.abc import Iterable


def _cost_key(job) -> tuple:
    """Jobs with the same key are expected to cost about the same: one problem in one language."""
    problem = getattr(job, "problem", None)
    candidate = getattr(job, "candidate", None)
    return (getattr(problem, "level", None), getattr(problem, "name", None), getattr(candidate, "language", None))


class JobQueue:
    """Jobs waiting for a worker, longest expected first, so a batch does not end with its slowest jobs
    running alone (the longest-processing-time rule). A problem's cost is learned from its finished jobs
    (seconds from dispatch to result, averaged with weight 1/2 on the newest) and kept across maps. Order:
    first one job of every problem not yet seen (in submission order: its cost is then learned early), then
    the highest cost, where a problem whose only jobs so far are still running counts the time they have run."""

    def __init__(self, jobs: Iterable, costs: dict):
        self.costs = costs
        self.buckets: dict[tuple, collections.deque] = {}
        self.running_since: dict[tuple, float] = {}  # first dispatch of a problem with no known cost yet
        self.n = 0
        for job in jobs:
            self.buckets.setdefault(_cost_key(job), collections.deque()).append(job)
            self.n += 1

    def __len__(self) -> int:
        return self.n

    def pop(self, now: float):
        waiting = [k for k, b in self.buckets.items() if b]
        unseen = next((k for k in waiting if k not in self.costs and k not in self.running_since), None)
        if unseen is not None:
            key = unseen
            self.running_since[key] = now
        else:
            key = max(waiting, key=lambda k: self.costs.get(k, now - self.running_since.get(k, now)))
        self.n -= 1
        return self.buckets[key].popleft()

    def push_front(self, job) -> None:
        self.buckets.setdefault(_cost_key(job), collections.deque()).appendleft(job)
        self.n += 1

    def finished(self, job, seconds: float) -> None:
        key = _cost_key(job)
        self.costs[key] = seconds if key not in self.costs else (self.costs[key] + seconds) / 2
        self.running_since.pop(key, None)

"""The reference's time as a cross-check between jobs. Every job on one problem (its source, at one size, on one
kind of device, with TF32 on or off) times the same reference on fresh draws of the same inputs, so its time is a
known quantity within a pool: on a GPU, where timing holds the device alone, it differs from worker to worker by
a few per cent (bench/results' ground-truth runs). A candidate can slow the reference it is compared with in ways
no watch lists (a C library's state, memory pressure, a hook planted by code run later), and its speedup then
grows with the slowdown. So when a correct result's reference ran ``EvalConfig.reference_drift`` times slower
than the median of the same problem's earlier correct results in this pool, its speedup is taken against that
median instead (``cand_ms`` against the usual reference time), and the result says so in its ``timing_note``:
whatever slowed the reference, the candidate gains nothing by it. The verdict stays the kernel's own, since
another process on the same GPU (a trainer, a second run beside this one) can slow a timing too, and an honest
kernel must not be judged a cheat for that.

The first ``MIN_SEEN`` correct results of a problem in a pool set its baseline unchecked; results of other
statuses neither count nor are checked (no speed is paid for them); CPU results are not checked (there timing
shares the cores with the other workers, and its figures are not performance figures).

Neighbours: `kzcore.evaluate.runner` passes every pool's results through `ReferenceTimes.checked`."""

from __future__ import annotations

import collections
import hashlib
import statistics
import weakref

import attrs

from kzcore.types import EvalConfig, EvalJob, EvalResult, Status

MIN_SEEN = 3  # correct results of a problem before its later ones are checked
WINDOW = 32  # the most recent reference times of a problem that make its baseline (a long run's GPU drifts)

_by_pool: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class ReferenceTimes:
    """One pool's reference times per (problem source, size, device, tf32), as results come back."""

    def __init__(self) -> None:
        self.seen: dict[tuple, collections.deque] = {}

    @classmethod
    def of(cls, pool) -> ReferenceTimes:
        """The pool's own (kept as long as the pool lives; a fresh one for a pool that cannot be weakly
        referenced, so such a pool's results are checked within one call only)."""
        try:
            return _by_pool.setdefault(pool, cls())
        except TypeError:
            return cls()

    def check(self, result: EvalResult, config: EvalConfig, problem: str) -> EvalResult:
        """``result``, or, when its reference ran slow, the same result with its speedup taken against the
        problem's usual reference time (see the module doc). ``problem`` names the problem's source (two problems
        of one name, a variant and its original, are two)."""
        if not config.reference_drift or result.status is not Status.CORRECT or not result.ref_ms:
            return result
        if result.device != "cuda":  # CPU timing shares the cores with the other workers
            return result
        key = (problem, result.size, result.device, result.tf32)
        seen = self.seen.setdefault(key, collections.deque(maxlen=WINDOW))
        if len(seen) >= MIN_SEEN:
            baseline = statistics.median(seen)
            ratio = result.ref_ms / baseline
            if ratio >= config.reference_drift and result.cand_ms:
                speedup = baseline / result.cand_ms
                note = (
                    f"the reference ran {ratio:.2f}x slower here ({result.ref_ms:.4g} ms) than the median of the last "
                    f"{len(seen)} correct results on this problem in this pool ({baseline:.4g} ms): speedup taken "
                    f"against that median, {result.speedup or 0:.3g}x -> {speedup:.3g}x "
                    f"(reference_drift={config.reference_drift:g})"
                )
                return attrs.evolve(
                    result,
                    speedup=min(speedup, result.speedup or speedup),
                    timing_note="; ".join(x for x in (result.timing_note, note) if x),
                )
        seen.append(result.ref_ms)
        return result

    def checked(self, results, jobs: list[EvalJob]):
        """Each of ``results`` (the answers to ``jobs``) through `check`, as they come."""
        by_ident = {job.ident: job for job in jobs}
        for result in results:
            job = by_ident.get(result.ident)
            yield self.check(result, job.config, problem_key(job)) if job is not None else result


def problem_key(job: EvalJob) -> str:
    """What makes two jobs time the same reference: the problem's source."""
    return hashlib.sha256(job.problem.source.encode()).hexdigest()[:16]

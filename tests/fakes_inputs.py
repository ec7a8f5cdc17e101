"""Fake timing plugins for tests/test_inputs.py. Module-level instances, so evaluator workers can rebuild
them from importable specs ("tests.fakes_inputs:NAME")."""

from __future__ import annotations

from kzcore import hookimpl
from kzcore.types import Timing


def pairs_through(rounds, reference, candidate, n: int) -> None:
    """``n`` pairs through the timed rounds as a timer runs them (the last flagged last, so checked)."""
    for i in range(n):
        rounds.begin(last=i == n - 1)
        rounds.took("reference", reference())
        rounds.took("candidate", candidate())
        rounds.end()


class ImplausibleTimer:
    """Calls each side ``calls`` times, as warm-up plus repetitions would, then reports every candidate
    20x faster than the reference: on a CPU this sends each correct candidate into re-verification."""

    calls = 12

    @hookimpl
    def kz_time_candidate(self, device, reference, candidate, config, rounds):
        pairs_through(rounds, reference, candidate, self.calls)
        return Timing(ref_ms=2.0, cand_ms=0.1, reps=self.calls, note="fake timer: 20x")


IMPLAUSIBLE_TIMER = ImplausibleTimer()


class FadingTimer:
    """20x on its first measurement in a process, 2.5x on every later one (a first timing that was a fluke)."""

    def __init__(self):
        self.measured = 0

    @hookimpl
    def kz_time_candidate(self, device, reference, candidate, config, rounds):
        pairs_through(rounds, reference, candidate, 1)
        self.measured += 1
        cand_ms = 0.1 if self.measured == 1 else 0.8
        return Timing(ref_ms=2.0, cand_ms=cand_ms, reps=1, note=f"fake timer: measurement {self.measured}")


FADING_TIMER = FadingTimer()

"""The timing loop's early stop (kzcore.builtins.timing.interleaved), driven by a fake timer on the CPU."""

from __future__ import annotations

import random

from kzcore.builtins.timing import interleaved, median_rel_error
from kzcore.types import EvalConfig


def fake_timer(noise: float, seed: int = 0):
    rng = random.Random(seed)
    calls = []

    def timed(fn) -> float:
        calls.append(fn)
        return fn() * (1 + rng.uniform(-noise, noise))

    return timed, calls


def ref():
    return 2.0


def cand():
    return 1.0


def test_steady_timings_stop_at_the_minimum_with_a_note():
    timed, calls = fake_timer(noise=0.001)
    ref_ms, cand_ms, note = interleaved(timed, ref, cand, 100, EvalConfig(min_reps=30, timing_precision=0.004))
    assert len(ref_ms) == len(cand_ms) == 30
    assert note == "stopped at 30 reps: medians within 0.4%"
    # order alternates: reference first on even pairs, candidate first on odd ones
    assert calls[:4] == [ref, cand, cand, ref]


def test_noisy_timings_run_every_rep():
    timed, _ = fake_timer(noise=0.5)
    ref_ms, cand_ms, note = interleaved(timed, ref, cand, 100, EvalConfig(min_reps=30, timing_precision=0.004))
    assert len(ref_ms) == 100 and note == ""
    assert median_rel_error(ref_ms) > 0.004


def test_precision_zero_always_runs_all_reps():
    timed, _ = fake_timer(noise=0.0)
    ref_ms, _, note = interleaved(timed, ref, cand, 100, EvalConfig(timing_precision=0.0))
    assert len(ref_ms) == 100 and note == ""


def test_fewer_reps_than_the_minimum_are_all_run():
    timed, _ = fake_timer(noise=0.0)
    ref_ms, _, _ = interleaved(timed, ref, cand, 12, EvalConfig(min_reps=30))
    assert len(ref_ms) == 12


def test_median_rel_error_shrinks_with_more_samples_and_is_infinite_for_few():
    rng = random.Random(1)
    few = [1 + rng.gauss(0, 0.01) for _ in range(20)]
    many = few + [1 + rng.gauss(0, 0.01) for _ in range(380)]
    assert median_rel_error(many) < median_rel_error(few)
    assert median_rel_error([1.0, 2.0]) == float("inf")

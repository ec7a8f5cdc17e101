"""The reference's time as a cross-check between jobs (kzcore/evaluate/reftimes.py): a correct GPU result whose
reference ran `reference_drift` times slower than the same problem's earlier ones has its speedup taken against
their median, and the pool's results reach every caller through the check (runner.map_prepared,
runner.evaluate)."""

from __future__ import annotations

import gc

import attrs
import pytest

from kzcore.evaluate import reftimes
from kzcore.evaluate.reftimes import MIN_SEEN, ReferenceTimes
from kzcore.evaluate.runner import map_prepared
from kzcore.types import Candidate, EvalConfig, EvalJob, EvalResult, Problem, Status

CONFIG = EvalConfig()
RELU = "the source of 1_ReLU"  # what ReferenceTimes keys a problem by (reftimes.problem_key: its source's hash)


def result(ref_ms: float, problem: str = "1_ReLU", status=Status.CORRECT, device: str = "cuda", **kw) -> EvalResult:
    return EvalResult(
        problem=problem, level=1, language="triton", sample=0, status=status, ref_ms=ref_ms, cand_ms=ref_ms / 2,
        speedup=2.0, device=device, size="full", **kw,
    )  # fmt: skip


def test_a_slowed_reference_pays_no_speedup_once_the_problem_has_a_baseline():
    times = ReferenceTimes()
    for ms in (1.00, 1.02, 0.99):  # the baseline: unchecked
        assert times.check(result(ms), CONFIG, RELU).speedup == 2.0
    steady = times.check(result(1.2), CONFIG, RELU)  # within 1.25x of the median: as measured
    assert steady.speedup == 2.0 and steady.timing_note == ""
    slowed = times.check(result(3.1, timing_note="stopped at 16 reps"), CONFIG, RELU)
    assert slowed.status is Status.CORRECT  # the verdict is the kernel's own
    assert slowed.speedup == pytest.approx(1.01 / 1.55)  # against the median reference time, not 3.1 ms
    assert slowed.ref_ms == 3.1 and slowed.cand_ms == 1.55  # the figures stay as measured
    assert slowed.timing_note == (
        "stopped at 16 reps; the reference ran 3.07x slower here (3.1 ms) than the median of the last 4 correct "
        "results on this problem in this pool (1.01 ms): speedup taken against that median, 2x -> 0.652x "
        "(reference_drift=1.25)"
    )
    assert times.check(result(1.01), CONFIG, RELU).speedup == 2.0
    assert len(times.seen[(RELU, "full", "cuda", False)]) == 5  # the slowed one never joins the baseline


def test_a_rebased_speedup_is_never_raised():
    """A candidate slower than its own slowed reference keeps the lower of the two figures."""
    times = ReferenceTimes()
    for ms in (1.0,) * MIN_SEEN:
        times.check(result(ms), CONFIG, RELU)
    odd = attrs.evolve(result(2.0), cand_ms=0.5, speedup=1.5)  # a re-verified result keeps its lower speedup
    assert times.check(odd, CONFIG, RELU).speedup == 1.5


def test_what_is_not_checked():
    times = ReferenceTimes()
    for ms in (1.0,) * MIN_SEEN:
        times.check(result(ms), CONFIG, RELU)
    assert times.check(result(9.0), attrs.evolve(CONFIG, reference_drift=0), RELU).speedup == 2.0  # off
    assert times.check(result(9.0, device="cpu"), CONFIG, RELU).speedup == 2.0  # CPU timing shares the cores
    assert times.check(result(9.0), CONFIG, "another source").speedup == 2.0  # another problem: no baseline yet
    assert times.check(result(9.0, tf32=True), CONFIG, RELU).speedup == 2.0  # TF32 on: another reference
    wrong = result(9.0, status=Status.INCORRECT)
    assert times.check(wrong, CONFIG, RELU) is wrong  # no speed is paid for it


def test_reference_drift_is_zero_or_above_one():
    with pytest.raises(ValueError, match="reference_drift must be 0 \\(off\\) or above 1"):
        EvalConfig(reference_drift=1.0)


class ListPool:
    """An executor that answers each job with a result it was given (the pool's side is tested elsewhere)."""

    def __init__(self, answers):
        self.answers = list(answers)

    def map(self, jobs):
        for job, answer in zip(jobs, self.answers):
            yield attrs.evolve(
                answer, problem=job.problem.name, sample=job.candidate.sample, language=job.candidate.language
            )


def test_map_prepared_checks_every_result_and_the_pool_keeps_its_baseline_across_calls():
    problem = Problem(name="1_ReLU", source="", level=1)
    jobs = [
        EvalJob(problem, Candidate(problem="1_ReLU", language="python", level=1, sample=i, source=""), CONFIG)
        for i in range(4)
    ]
    pool = ListPool([result(1.0)] * 3 + [result(2.0)])
    got = list(map_prepared(pool, jobs))
    assert [r.speedup for r in got] == [2.0, 2.0, 2.0, 1.0]
    pool.answers = [result(4.0)]
    (later,) = map_prepared(pool, jobs[:1])  # the next step's batch: the same pool remembers
    assert later.speedup == 0.5
    variant = Problem(name="1_ReLU", source="a variant's source", level=1)  # the same name, another reference
    (other,) = map_prepared(pool, [attrs.evolve(jobs[0], problem=variant)])
    assert other.speedup == 2.0
    assert list(map_prepared(pool, [])) == []
    gc.collect()  # other tests' pools may be alive in this process too, or garbage not yet collected
    held = len(reftimes._by_pool)
    del pool
    gc.collect()
    assert len(reftimes._by_pool) == held - 1  # a closed pool's record goes with it

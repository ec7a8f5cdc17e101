"""The reference's time as a cross-check between jobs (kzcore/evaluate/reftimes.py): a correct GPU result whose
reference ran `reference_drift` times slower than the same problem's earlier ones is hack_suspected, and the
pool's results reach every caller through the check (runner.map_prepared, runner.evaluate)."""

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


def test_a_slowed_reference_is_hack_suspected_once_the_problem_has_a_baseline():
    times = ReferenceTimes()
    for ms in (1.00, 1.02, 0.99):  # the baseline: unchecked
        assert times.check(result(ms), CONFIG, RELU).correct
    assert times.check(result(1.4), CONFIG, RELU).correct  # within 1.5x of the median
    slowed = times.check(result(3.1), CONFIG, RELU)
    assert slowed.status is Status.HACK_SUSPECTED
    assert slowed.message.startswith(
        "the reference ran 3.07x slower in this job (3.1 ms) than the median of the last 4 correct results on this "
        "problem in this pool (1.01 ms)"
    )
    assert slowed.speedup == 2.0  # the figures stay as measured
    assert times.check(result(1.01), CONFIG, RELU).correct
    assert len(times.seen[(RELU, "full", "cuda", False)]) == 5  # the suspect one never joins the baseline


def test_what_is_not_checked():
    times = ReferenceTimes()
    for ms in (1.0,) * MIN_SEEN:
        times.check(result(ms), CONFIG, RELU)
    assert times.check(result(9.0), attrs.evolve(CONFIG, reference_drift=0), RELU).correct  # off
    assert times.check(result(9.0, device="cpu"), CONFIG, RELU).correct  # CPU timing shares the cores
    assert times.check(result(9.0), CONFIG, "another source").correct  # another problem: no baseline yet
    assert times.check(result(9.0, tf32=True), CONFIG, RELU).correct  # TF32 on: another reference
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
    assert [r.status for r in got] == [Status.CORRECT] * 3 + [Status.HACK_SUSPECTED]
    pool.answers = [result(4.0)]
    (later,) = map_prepared(pool, jobs[:1])  # the next step's batch: the same pool remembers
    assert later.status is Status.HACK_SUSPECTED
    variant = Problem(name="1_ReLU", source="a variant's source", level=1)  # the same name, another reference
    (other,) = map_prepared(pool, [attrs.evolve(jobs[0], problem=variant)])
    assert other.correct
    assert list(map_prepared(pool, [])) == []
    held = len(reftimes._by_pool)  # other tests' pools may be alive in this process too
    del pool
    gc.collect()
    assert len(reftimes._by_pool) == held - 1  # a closed pool's record goes with it

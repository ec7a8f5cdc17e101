"""The executor protocol (kzcore.executors): ``open_executor`` is the one place that builds and starts one;
``evaluate`` takes a name (opened and closed by the call) or a started executor (used, left open); every job
fails itself and names itself, so executors need not tell the two job kinds apart."""

from __future__ import annotations

import pytest

from kzcore.evaluate.runner import evaluate
from kzcore.executors import Executor, open_executor
from kzcore.executors.local import LocalPool
from kzcore.problems import load_problems
from kzcore.types import Candidate, EvalConfig, EvalJob, EvalResult, ProblemCheckJob, ProblemReport, Status
from tests import fakes_hooks

CFG = EvalConfig(trials=1, timeout_s=60)


class Started(fakes_hooks.InlineExecutor):
    starts = 0

    def start(self):
        Started.starts += 1


class FailsToStart(fakes_hooks.InlineExecutor):
    def start(self):
        raise RuntimeError("no cluster")


class Executors:
    from kzcore import hookimpl

    @hookimpl
    def kz_register_executors(self, register):
        register("started", Started)
        register("broken", FailsToStart)


EXECUTORS = Executors()


@pytest.fixture(autouse=True)
def own_problem_cache(monkeypatch, tmp_path):
    """The fake executors answer problem checks with made-up reports: keep them out of the session's cache."""
    monkeypatch.setenv("KZ_CACHE", str(tmp_path / "cache"))


@pytest.fixture
def relu():
    return next(p for p in load_problems("builtin:1") if p.name == "1_ReLU")


def _candidates(n):
    return [Candidate(problem="1_ReLU", language="python", level=1, sample=i, source="x") for i in range(n)]


def test_a_started_executor_is_used_and_left_open(plugins, relu, tmp_path):
    pm = plugins("kz_pylang", "tests.test_executor_protocol:EXECUTORS")
    fakes_hooks.InlineExecutor.instances.clear()
    Started.starts = 0
    executor = open_executor("started", workers=2, config=CFG, pm=pm)
    assert Started.starts == 1 and implements_executor(executor)
    for out in ("a.jsonl", "b.jsonl"):  # two evaluations, one executor
        evaluate([relu], _candidates(2), CFG, tmp_path / out, executor=executor, pm=pm)
    assert fakes_hooks.InlineExecutor.instances == [executor] and not executor.closed
    assert Started.starts == 1 and len([j for j in executor.jobs if isinstance(j, EvalJob)]) == 4
    executor.close()
    # by name: the call opens it (start) and closes it
    evaluate([relu], _candidates(1), CFG, tmp_path / "c.jsonl", executor="started", pm=pm)
    assert Started.starts == 2 and fakes_hooks.InlineExecutor.instances[-1].closed


def test_an_executor_that_fails_to_start_is_closed(plugins):
    pm = plugins("kz_pylang", "tests.test_executor_protocol:EXECUTORS")
    fakes_hooks.InlineExecutor.instances.clear()
    with pytest.raises(RuntimeError, match="no cluster"):
        open_executor("broken", config=CFG, pm=pm)
    (executor,) = fakes_hooks.InlineExecutor.instances
    assert executor.closed


def test_jobs_fail_and_name_themselves(relu):
    cand = _candidates(1)[0]
    job = EvalJob(problem=relu, candidate=cand, config=CFG)
    failed = job.failure(Status.TIMEOUT, "no result")
    assert isinstance(failed, EvalResult) and failed.status is Status.TIMEOUT and failed.ident == job.ident
    check = ProblemCheckJob(problem=relu, config=CFG)
    report = check.failure(Status.RUNTIME_ERROR, "worker died")
    assert isinstance(report, ProblemReport) and not report.ok and report.reason == "runtime_error: worker died"
    assert report.ident == check.ident == ("1_ReLU",)


def test_the_step_after_a_job_takes_either_kind_of_answer(relu):
    # On a GPU a worker gives its cached memory back after every job and files the seconds in the result's
    # stages. A problem check's report has no stages: annotating it raised in the worker, which exited, so every
    # full-size problem check whose memory went back was filed as a crash (and the problem left unflagged).
    from kzcore.executors.worker import after_job

    released = []

    def release():
        released.append(True)
        return 0.25

    report = ProblemReport(problem="1_ReLU", level=1, ok_runs=True, seconds=0.5)
    assert after_job(report, False, "cuda", [], release=release) == report and released == [True]
    result = EvalJob(problem=relu, candidate=_candidates(1)[0], config=CFG).failure(Status.INCORRECT, "off")
    annotated = after_job(result, False, "cuda", [], release=release)
    assert annotated.stages == {**(result.stages or {}), "release_cache": 0.25} and annotated.status is Status.INCORRECT
    # nothing given back: the answer unchanged; a poisoned context or a CPU worker gives nothing back at all
    assert after_job(result, False, "cuda", [], release=lambda: None) == result
    assert after_job(report, True, "cuda", [], release=release) == report and len(released) == 2
    assert after_job(report, False, "cpu", [], release=release) == report and len(released) == 2
    # a candidate that left processes behind is hack_suspected; a problem check's report has no such verdict
    left = after_job(result, False, "cpu", ["pid 7 (sleep)"])
    assert left.status is Status.HACK_SUSPECTED and "left 1 process(es)" in left.message
    assert after_job(report, False, "cpu", ["pid 7 (sleep)"]) == report


def implements_executor(obj) -> bool:
    """What the Executor protocol asks for (a structural type: checked here by its methods)."""
    names = [n for n in vars(Executor) if not n.startswith("_")]
    return sorted(names) == ["close", "map", "start"] and all(callable(getattr(obj, n, None)) for n in names)


def test_the_local_pool_is_an_executor():
    pool = LocalPool(workers=1, config=CFG, plugins=[])
    assert implements_executor(pool) and hasattr(pool, "__enter__") and hasattr(pool, "__exit__")


def test_one_executors_cached_problem_checks_never_answer_anothers(relu):
    """The problem-check cache is keyed by the executor kind too: a plugin executor's reports (here made up)
    are reused by that executor only; another kind checks the problem itself."""
    from kzcore.evaluate.problem_check import checked_problems

    class Other(fakes_hooks.InlineExecutor):
        """Another executor kind, answering the same way."""

    first = fakes_hooks.InlineExecutor()
    assert checked_problems([relu], CFG, first, "cpu")[relu.key].ok and len(first.jobs) == 1
    again = fakes_hooks.InlineExecutor()
    checked_problems([relu], CFG, again, "cpu")
    assert again.jobs == []  # the same kind: served from the cache
    other = Other()
    checked_problems([relu], CFG, other, "cpu")
    assert [j.problem.key for j in other.jobs] == [relu.key]  # another kind: checked again


class Judging(fakes_hooks.InlineExecutor):
    """Files each job's own result (with its code hash): correct when the candidate's source says so."""

    def map(self, jobs):
        for job in jobs:
            self.jobs.append(job)
            if isinstance(job, ProblemCheckJob):
                yield from super().map([job])
                continue
            status = Status.CORRECT if "fixed" in job.candidate.source else Status.INCORRECT
            yield job.result(status, "judged by its source")


def test_a_resumed_evaluation_judges_changed_code_again(plugins, relu, tmp_path):
    """What the trainer and distillation call: a saved verdict is reused only for the code it judged; one on
    code that changed since (a resampled completion, a fixed solution) is retracted and evaluated again."""
    pm = plugins("kz_pylang")
    out, heard = tmp_path / "r.jsonl", []

    def run(sources):
        executor = Judging(config=CFG)
        cands = [
            Candidate(problem="1_ReLU", language="python", level=1, sample=i, source=s) for i, s in enumerate(sources)
        ]
        results = evaluate([relu], cands, CFG, out, executor=executor, on_stale=heard.append, pm=pm)
        return {r.sample: r.status for r in results}, [
            j.candidate.sample for j in executor.jobs if isinstance(j, EvalJob)
        ]

    assert run(["broken", "fixed"]) == ({0: Status.INCORRECT, 1: Status.CORRECT}, [0, 1])
    assert heard == []
    assert run(["broken", "fixed"]) == ({0: Status.INCORRECT, 1: Status.CORRECT}, [])  # same code: reused
    assert run(["fixed now", "fixed"]) == ({0: Status.CORRECT, 1: Status.CORRECT}, [0])  # only the changed one
    assert [[r.sample for r in stale] for stale in heard] == [[0]] and heard[0][0].status is Status.INCORRECT

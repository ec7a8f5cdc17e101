"""The pool's dispatch order (kzcore.executors.local.JobQueue): longest expected first, costs learned."""

from types import SimpleNamespace as NS

from kzcore.executors.local import JobQueue


def job(name: str, sample: int = 0, language: str = "triton"):
    return NS(problem=NS(level=1, name=name), candidate=NS(language=language, sample=sample))


def names(jobs) -> list[str]:
    return [j.problem.name for j in jobs]


def test_one_job_of_each_new_problem_first_then_the_costliest():
    queue = JobQueue([job(n, i) for i in range(3) for n in "abc"], {})
    first = [queue.pop(0.0) for _ in range(3)]
    assert names(first) == ["a", "b", "c"]  # each new problem once, in submission order: costs get learned
    for j, seconds in zip(first, (1.0, 10.0, 5.0)):
        queue.finished(j, seconds)
    assert names(queue.pop(1.0) for _ in range(6)) == ["b", "b", "c", "c", "a", "a"]
    assert len(queue) == 0


def test_a_problem_still_running_counts_the_time_it_has_run():
    costs = {}
    queue = JobQueue([job("a", 0), job("b", 0), job("a", 1), job("b", 1)], costs)
    a0, b0 = queue.pop(0.0), queue.pop(0.0)
    queue.finished(a0, 2.0)  # a: 2 s; b's first job is still running
    assert names([queue.pop(1.0)]) == ["a"]  # b has run 1 s so far: a looks costlier
    queue.push_front(job("a", 1))
    assert names([queue.pop(5.0)]) == ["b"]  # b has run 5 s: at least that costly
    queue.finished(b0, 6.0)
    assert costs[(1, "b", "triton")] == 6.0 and len(queue) == 1


def test_costs_are_averaged_and_kept_across_queues():
    costs = {}
    queue = JobQueue([job("a", 0), job("a", 1)], costs)
    queue.finished(queue.pop(0.0), 4.0)
    queue.finished(queue.pop(0.0), 2.0)
    assert costs == {(1, "a", "triton"): 3.0}
    later = JobQueue([job("b"), job("a", 2), job("a", 3)], costs)  # a is known: b is new and goes first
    assert names(later.pop(0.0) for _ in range(3)) == ["b", "a", "a"]


def test_languages_are_separate_problems_and_a_job_put_back_goes_first():
    queue = JobQueue([job("a", 0, "cuda"), job("a", 1, "triton")], {})
    assert [j.candidate.language for j in (queue.pop(0.0), queue.pop(0.0))] == ["cuda", "triton"]
    again = job("a", 0, "cuda")
    queue.push_front(again)
    assert queue.pop(0.0) is again and len(queue) == 0

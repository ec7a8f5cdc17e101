"""Where candidates run. An executor is anything with the ``Executor`` protocol below; the core's is the
local worker pool (``kzcore.executors.local.LocalPool``), others register as plugins
(``kz_register_executors``: ``kz_ray``). ``open_executor`` is the one place that builds and starts one.

Every job says how to fail itself (``job.failure(status, message)``) and what identifies it
(``job.ident``, matching its answer's ``ident``), so executors handle both job kinds — ``EvalJob`` (a
candidate) and ``ProblemCheckJob`` (a problem module alone) — without telling them apart."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol

from kzcore.types import EvalConfig, EvalJob, EvalResult, ProblemCheckJob, ProblemReport

Job = EvalJob | ProblemCheckJob
Answer = EvalResult | ProblemReport


class Executor(Protocol):
    """``start()`` once (warm workers up; before a results file's run header is written), then any number
    of ``map(jobs)`` calls, each yielding one answer per job in any order, then ``close()``. Executors are
    context managers: ``with open_executor(...) as ex:`` closes on the way out. A structural type for type
    checkers only (not runtime_checkable: an isinstance check would add ``__annotations__`` to this class,
    which the workers' tamper watch reports as a change to kzcore)."""

    def start(self) -> None: ...

    def map(self, jobs: Iterable[Job]) -> Iterator[Answer]: ...

    def close(self) -> None: ...


def open_executor(name: str, *, workers: int | None = None, config: EvalConfig | None = None, pm=None) -> Executor:
    """The executor registered as ``name``, built for this plugin set and started. Its factory is called as
    ``factory(workers=, config=, plugins=)`` (kz_register_executors); an executor without ``start`` (written
    against the older contract, where it was optional) is used as it is."""
    from kzcore.plugins import executors, get_plugin_manager, plugin_specs

    pm = pm or get_plugin_manager()
    executor = executors(pm).get(name)(workers=workers, config=config or EvalConfig(), plugins=plugin_specs(pm))
    start = getattr(executor, "start", None)
    if start is not None:
        try:
            start()
        except BaseException:
            executor.close()
            raise
    return executor

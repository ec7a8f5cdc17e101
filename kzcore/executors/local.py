"""The default executor: a pool of persistent, spawned worker processes on this machine (one per GPU, or N
on a CPU). Each job has a wall-clock deadline; a worker that dies, hangs or poisons its CUDA context is
replaced and its candidate gets the matching status. Results stream back as they finish.

Neighbours: the pool holds a `lifecycle.WorkerLifecycle`, which starts and replaces the workers; `jobqueue`
orders the jobs, `channel` reads their messages, `devices` picks the GPUs; the names tests and callers import
from here are re-exported."""

from __future__ import annotations

import functools
import multiprocessing as mp
import os
import time
from collections.abc import Iterable, Iterator
from multiprocessing.connection import wait

import attrs

from kzcore.errors import KzError
from kzcore.executors.channel import (  # noqa: F401 (re-exported)
    MAX_MESSAGE_BYTES,
    READ_TIMEOUT_S,
    ChannelError,
    _bound_reads,
    receive,
)
from kzcore.executors.devicelock import DeviceLock, host_lock
from kzcore.executors.devices import gpu_count, physical_gpu, pool_gpus, resolve_device  # noqa: F401 (re-exported)
from kzcore.executors.jobqueue import JobQueue
from kzcore.executors.lifecycle import (  # noqa: F401 (re-exported)
    EXIT_TIMEOUT_S,
    MAX_START_FAILURES,
    WorkerLifecycle,
    _exit_description,
    _Worker,
)
from kzcore.executors.sandbox import memory_limit_for
from kzcore.language import Language, worker_environment, writable_caches
from kzcore.plugins import get_plugin_manager, plugin_specs
from kzcore.types import EvalConfig, EvalJob, EvalResult, Status

START_TIMEOUT_S = 300.0  # read by LocalPool() at construction (tests shorten it here)
MAX_REQUEUES = 3  # a job whose worker was found dead before the job reached it is sent again this often
ALONE_NOTE = "evaluated again alone: it ran out of device memory beside other jobs on its GPU"


def out_of_device_memory(result) -> bool:
    """An evaluation that failed because the GPU's memory ran out (what the other jobs on it held counts)."""
    if not isinstance(result, EvalResult) or result.status is not Status.RUNTIME_ERROR:
        return False
    text = result.message.lower()
    return "outofmemoryerror" in text or "cuda out of memory" in text or "cudaerrormemoryallocation" in text


class LocalPool:
    """``LocalPool(workers=None, config=EvalConfig(), plugins=None)``; use ``map(jobs)`` then ``close()``. The pool
    schedules jobs and says how a worker process is started (``_launch``); its ``lifecycle`` keeps the workers."""

    queue_class = JobQueue  # the order jobs are sent in (bench/schedule.py compares it with first-in-first-out)

    def __init__(self, workers: int | None = None, config: EvalConfig | None = None, plugins: list[str] | None = None):
        self.config = config or EvalConfig()
        self.device = resolve_device(self.config.device)
        self.specs = plugins if plugins is not None else plugin_specs(get_plugin_manager())
        self.ctx = mp.get_context("spawn")
        self.locks: dict[str | None, DeviceLock] = {}  # by GPU (slot)
        if self.device == "cuda":
            gpus = pool_gpus(gpu_count())
            per_gpu = self.config.workers_per_gpu
            n = workers or len(gpus) * per_gpu
            self.slots: list[str | None] = [gpus[i % len(gpus)] for i in range(n)]  # a GPU, or None on the CPU
            spares: dict[str | None, int] = {gpu: self.config.standby_workers for gpu in gpus}
        else:
            self.slots = [None] * (workers or max(1, (os.cpu_count() or 2) // 2))
            spares = {None: self.config.standby_workers}
        # each worker of a GPU, spares included, holds its own index into that GPU's lock while it lives
        free_locks = {gpu: list(range(self.slots.count(gpu) + n)) for gpu, n in spares.items()}
        self.shares_gpus = self.device == "cuda" and len(self.slots) > len(spares)  # several workers on a GPU
        self.host_locks: dict[str, str] = {}  # by GPU: its host-wide lock's file, or why it has none
        if self.device == "cuda":
            # timing must hold the GPU alone: from this pool's other workers, and from other runs' (HostLock)
            for gpu, free in free_locks.items():
                host, self.host_locks[str(gpu)] = host_lock(str(gpu))
                self.locks[gpu] = DeviceLock(self.ctx, len(free), host)
        self.memory_limit = memory_limit_for(len(self.slots) + sum(spares.values()))
        self.costs: dict[tuple, float] = {}  # seconds per job of each problem, learned (JobQueue)
        # START_TIMEOUT_S is read here, so a test that shortens it affects the pools it then makes
        self.lifecycle = WorkerLifecycle(self.slots, spares, free_locks, START_TIMEOUT_S, self._launch)

    # -- workers ------------------------------------------------------------------------------------
    @functools.cached_property
    def languages(self) -> list[Language]:
        """The languages of the workers' plugin set, asked here, where workers start: their environment must
        be set before torch loads and their writable caches before the filesystem turns read-only, both
        before a worker has loaded any plugin."""
        from kzcore.plugins import languages_of

        return languages_of(self.specs)

    def _env(self, slot) -> dict:
        env = {"PYTHONUNBUFFERED": "1", **worker_environment(self.languages, self.device)}
        if slot is not None:
            env["CUDA_VISIBLE_DEVICES"] = physical_gpu(slot)
        return env

    def _launch(self, worker_id: int, gpu: str | None, lock_index: int, start_timeout_s: float) -> _Worker:
        """Start worker process ``worker_id`` on ``gpu`` holding ``lock_index`` of its lock: the lifecycle's
        recipe, which reads ``ctx`` and ``_env`` when called, so a subclass may replace either."""
        return _Worker(
            self.ctx,
            worker_id,
            self.device,
            self._env(gpu),
            self.specs,
            self.config.tf32,
            self.locks.get(gpu),
            lock_index,
            self.memory_limit,
            start_timeout_s,
            [str(path) for path in writable_caches(self.languages)],
        )

    @property
    def workers(self) -> dict[int, _Worker]:
        """Slot index -> its worker."""
        return self.lifecycle.workers

    @property
    def spares(self) -> list[_Worker]:
        return self.lifecycle.spares

    @property
    def info(self) -> dict:
        """What the first worker to start reported (torch, device name, sandbox fences, start-up phases), and on
        a GPU where each GPU's host-wide lock lives (``gpu_locks``), or why there is none."""
        info = self.lifecycle.info
        return {**info, "gpu_locks": dict(self.host_locks)} if info and self.host_locks else info

    @property
    def replaced(self) -> int:
        """Workers replaced so far (crashed, hung, poisoned, or found dead)."""
        return self.lifecycle.replaced

    @property
    def restart_seconds(self) -> list[float]:
        """Spawn to ready, for each replacement worker."""
        return self.lifecycle.restart_seconds

    def start(self) -> LocalPool:
        """Start every worker and wait until each is ready (replacements still starting included)."""
        self.lifecycle.start()
        return self

    def close(self) -> None:
        self.lifecycle.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()

    # -- scheduling -------------------------------------------------------------------------------
    def map(self, jobs: Iterable[EvalJob]) -> Iterator[EvalResult]:
        """Evaluate ``jobs``; yield each result as soon as it is ready (not in submission order; jobs are sent
        longest expected first, see JobQueue). Where several workers share a GPU, a candidate that ran out of
        device memory is evaluated again once the rest are done, alone on the GPUs, so its verdict is its own
        and not what its neighbours held (`ALONE_NOTE`)."""
        self.start()
        self._requeued = 0
        again = []
        for job, result in self._run(self.queue_class(jobs, self.costs)):
            if self._shares_device() and out_of_device_memory(result):
                again.append(job)
                continue
            yield result
        for job in again:  # one at a time: the other workers idle, their cached memory given back
            for _job, result in self._run(self.queue_class([job], self.costs)):
                yield attrs.evolve(result, timing_note="; ".join(x for x in (ALONE_NOTE, result.timing_note) if x))

    def _shares_device(self) -> bool:
        """Whether jobs run beside other jobs of this pool on one GPU (several workers per GPU)."""
        return self.shares_gpus

    def _run(self, queue: JobQueue) -> Iterator[tuple]:
        """(job, result) for every job of ``queue``, as each finishes."""
        self._queue = queue
        while queue or any(w.job for w in self.lifecycle.workers.values()):
            now = time.monotonic()
            for w in list(self.lifecycle.workers.values()):
                if w.ready and w.job is None and queue:
                    self._dispatch(w, queue, now)
            busy = [w for w in self.lifecycle.workers.values() if w.job is not None]
            # starting, or killed and exiting (spares too: a spare that failed to start is started again)
            pending = [w for w in list(self.lifecycle.workers.values()) + self.lifecycle.spares if not w.ready]
            if not busy and not pending:  # every job sent went back to the queue (its worker was found dead)
                continue
            for w in busy:  # time spent only waiting for the GPU lock does not count against the job
                if w.lock is not None and w.lock.is_waiting(w.lock_index):
                    w.deadline += now - w.tick
                w.tick = now
            until = [w.deadline for w in busy] + [w.exit_by if w.killed else w.start_by for w in pending]
            timeout = max(0.0, min(until) - now)
            if self.locks:
                timeout = min(timeout, 0.5)
            watched = [w.conn for w in busy + pending if not w.killed] + [w.proc.sentinel for w in busy + pending]
            ready = wait(watched, timeout=timeout)
            for w in pending:
                self.lifecycle.tend(w, ready)
            for w in busy:
                job, sent = w.job, w.sent_at
                result = self._collect(w, ready)
                if result is not None:
                    queue.finished(job, time.monotonic() - sent)
                    yield job, result

    def _dispatch(self, w: _Worker, queue: JobQueue, now: float) -> None:
        job = queue.pop(now)
        try:
            w.conn.send(job)
        except OSError:  # the worker died while idle: not this job's doing, so it goes to a fresh worker
            self.lifecycle.replace(w)
            self._requeue(job)
            return
        w.job, w.started, w.sent_at = job, False, now
        w.deadline, w.tick = now + job.config.timeout_s, now

    def _requeue(self, job) -> None:
        self._requeued += 1
        if self._requeued > MAX_REQUEUES * max(1, len(self.lifecycle.workers)):
            raise KzError("evaluator workers keep dying before their jobs start; results so far are saved")
        self._queue.push_front(job)

    def _collect(self, w: _Worker, ready: list) -> EvalResult | None:
        job = w.job
        assert job is not None  # called for busy workers only
        if w.conn in ready:
            try:
                message = receive(w.conn)
            except EOFError:  # its end closed: it died, or a candidate closed the pipe
                return self._lost(w)
            except ChannelError as exc:
                return self._junk(w, exc)
            if message == ("started",):  # the worker has the job: from now on what happens to it is the job's
                w.started = True
                return None
            if len(message) != 3 or message[0] != "result" or _result_of(message[1]) != _job_of(job):
                return self._junk(w, f"a {message[0]!r} message that is not {_job_of(job)}'s result")
            w.job = None
            if message[2]:  # poisoned
                self.lifecycle.replace(w)
            return message[1]
        if w.proc.sentinel in ready or not w.proc.is_alive():
            return self._lost(w)
        if time.monotonic() >= w.deadline and not w.conn.poll(0):  # a result already sent is still read
            w.job = None
            self.lifecycle.replace(w)
            return _failure(job, Status.TIMEOUT, f"no result within {job.config.timeout_s:g} s; the worker was killed")
        return None

    def _lost(self, w: _Worker) -> EvalResult | None:
        """The worker died or closed its pipe. Before it took the job, the job goes back to the queue."""
        job, w.job = w.job, None
        w.proc.join(timeout=1)  # the pipe can close just before the process is reaped: wait for its exit code
        how, ends = _exit_description(w.proc), w.log_ends()
        self.lifecycle.replace(w)
        if not w.started:
            self._requeue(job)
            return None
        if how == "did not exit":
            return _failure(job, Status.RUNTIME_ERROR, "the worker closed its result pipe while running this candidate")
        # the log's last line names what killed it (an uncaught exception's type and message), so a crash in
        # kzcore's own code after a job is told from the candidate's
        said = f"; its log ends: {ends}" if ends else ""
        return _failure(
            job, Status.RUNTIME_ERROR, f"the worker process {how} while running this candidate (crash){said}"
        )

    def _junk(self, w: _Worker, what) -> EvalResult:
        job, w.job = w.job, None
        self.lifecycle.replace(w)
        return _failure(
            job,
            Status.RUNTIME_ERROR,
            f"the worker's result pipe carried something other than this job's result ({what}); the worker was "
            "killed (candidate code must not write to file descriptors it does not own)",
        )


def _job_of(job) -> tuple:
    return job.ident


def _result_of(result) -> tuple:
    return getattr(result, "ident", (getattr(result, "problem", None),))


def _failure(job, status: Status, message: str):
    """The result filed for a job whose worker died or hung: an EvalResult, or a failed ProblemReport."""
    return job.failure(status, message)

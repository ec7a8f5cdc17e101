"""The local pool's workers from spawn to exit: a worker process and its pipe (`_Worker`), start deadlines,
standby spares, replacing a worker that died or was killed, and closing them all. Neighbours: `executors.local`
(the pool, which schedules jobs on these workers), `executors.worker` (what runs in the process),
`executors.channel` (its messages), `executors.devicelock` (the GPU lock each worker holds an index of)."""

from __future__ import annotations

import contextlib
import functools
import shutil
import signal
import tempfile
import time
from multiprocessing.connection import wait
from typing import TYPE_CHECKING

from kzcore.errors import KzError
from kzcore.executors.channel import ChannelError, _bound_reads, receive
from kzcore.executors.devices import physical_gpu
from kzcore.executors.processes import kill_process_tree
from kzcore.executors.worker import worker_main
from kzcore.language import Language, worker_environment, writable_caches
from kzcore.types import EvalJob

if TYPE_CHECKING:
    from kzcore.executors.local import LocalPool

MAX_START_FAILURES = 3
EXIT_TIMEOUT_S = 30.0  # a killed worker that has not exited by then is left to close() and its slot restarted


class _Worker:
    def __init__(
        self,
        ctx,
        worker_id: int,
        device: str,
        env: dict,
        specs: list[str],
        tf32: bool,
        lock,
        lock_index: int,
        memory_limit: int | None,
        start_timeout_s: float,
        caches: list[str],
    ):
        self.id = worker_id
        self.lock, self.lock_index = lock, lock_index
        self.conn, child = ctx.Pipe()
        _bound_reads(self.conn)
        self.scratch = tempfile.mkdtemp(prefix=f"kz-sandbox{worker_id}-")  # deleted by kill()
        self.proc = ctx.Process(
            target=worker_main,
            args=(child, worker_id, device, env, specs, tf32, lock, lock_index, memory_limit, self.scratch, caches),
            name=f"kz-worker-{worker_id}",
            daemon=True,
        )
        self.proc.start()
        child.close()
        self.info: dict | None = None  # set when the worker reports ready; until then it takes no job
        self.spawned_at = time.monotonic()
        self.start_by = self.spawned_at + start_timeout_s
        self.replacement = False  # started in place of a worker that died (its start failures are retried)
        self.start_failures = 0  # failed starts in a row of this slot before this worker
        self.failed_start = False
        self.killed = False
        self.exit_by = 0.0  # killed: by when it should have exited (then its successor starts regardless)
        self.job: EvalJob | None = None
        self.started = False  # the worker confirmed it has self.job
        self.sent_at = 0.0
        self.deadline = 0.0

    @property
    def ready(self) -> bool:
        return self.info is not None and not self.killed

    def kill(self, wait: bool = True) -> None:
        """SIGKILL (a candidate can ignore SIGTERM) the worker and every process it started. With
        ``wait=False`` its exit is not waited for (``reap`` once its sentinel fires): a process killed
        mid-kernel can take seconds to release its GPU context, and the pool must not stall on it."""
        if not self.killed:
            self.killed = True
            self.exit_by = time.monotonic() + EXIT_TIMEOUT_S
            if self.proc.is_alive():
                kill_process_tree(self.proc.pid)
            self.conn.close()
        if wait:
            self.proc.join(timeout=EXIT_TIMEOUT_S)
            self.reap()

    def reap(self) -> bool:
        """Whether the killed worker has exited; once it has, its scratch directory is deleted."""
        if self.proc.is_alive():
            return False
        self.proc.join(timeout=0)
        shutil.rmtree(self.scratch, ignore_errors=True)
        return True


def _exit_description(proc) -> str:
    code = proc.exitcode
    if code is None:
        return "did not exit"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


class WorkerLifecycle:
    """The worker half of ``LocalPool``: starting, replacing and closing its workers. The pool's ``__init__``
    sets the state these methods keep (``slots``, ``workers``, ``spares``, ``locks``, ``_free_locks``, ...) and
    ``start_timeout_s``, how long a new worker has to report ready."""

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

    def _spawn(self, slot_index: int | None, gpu: str | None = None) -> _Worker:
        """A new worker for slot ``slot_index``, or a spare for ``gpu`` (slot_index None)."""
        if slot_index is not None:
            gpu = self.slots[slot_index]
        worker = _Worker(
            self.ctx,
            self._next_id,
            self.device,
            self._env(gpu),
            self.specs,
            self.config.tf32,
            self.locks.get(gpu),
            self._free_locks[gpu].pop(0),
            self.memory_limit,
            self.start_timeout_s,
            [str(path) for path in writable_caches(self.languages)],
        )
        worker.slot_index, worker.gpu = slot_index, gpu
        self._next_id += 1
        return worker

    def _take_ready(self, worker: _Worker) -> str | None:
        """Read a starting worker's first message; None when it is ready, else why its start failed."""
        try:
            msg = receive(worker.conn)
        except (EOFError, ChannelError):
            worker.proc.join(timeout=1)
            return f"evaluator worker {_exit_description(worker.proc)} while starting"
        if msg[0] != "ready" or len(msg) != 2 or not isinstance(msg[1], (dict, str)):
            return f"evaluator worker failed to start: {str(msg[-1]).splitlines()[0]}"
        worker.info = msg[1]
        self.info = self.info or dict(msg[1])
        if worker.replacement:
            self.restart_seconds.append(round(time.monotonic() - worker.spawned_at, 3))
        return None

    def _await_ready(self, worker: _Worker) -> None:
        """Block until ``worker`` is ready, or has failed to start (``_tend``)."""
        self._tend(worker, wait([worker.conn, worker.proc.sentinel], max(0.0, worker.start_by - time.monotonic())))

    def _start_failed(self, worker: _Worker, failure: str) -> None:
        """Kill a worker that failed to start. KzError for a first start (the pool cannot work: the error is
        the answer) and for a replacement's MAX_START_FAILURES-th failure in a row; else its slot tries again."""
        worker.kill(wait=False)
        worker.failed_start = True
        if not worker.replacement:
            raise KzError(failure)
        if worker.start_failures + 1 >= MAX_START_FAILURES:
            raise KzError(f"{failure} ({MAX_START_FAILURES} starts in a row failed); results so far are saved")

    def start(self) -> LocalPool:
        """Start every worker and wait until each has loaded torch and the plugins (replacements that are
        still starting included)."""
        try:
            if not self.workers:
                for w in [self._spawn(i) for i in range(len(self.slots))]:
                    self.workers[w.slot_index] = w
                self.spares = [self._spawn(None, gpu) for gpu, n in self._spare_plan.items() for _ in range(n)]
            for w in list(self.workers.values()) + list(self.spares):
                while not w.ready:
                    if w.killed:
                        w.proc.join(timeout=max(0.0, w.exit_by - time.monotonic()))
                        w = self._succeed(w)
                    else:
                        self._await_ready(w)
        except BaseException:
            self.close()
            raise
        return self

    def _replace(self, worker: _Worker) -> None:
        """Kill ``worker``; its successor starts once it has exited and takes jobs once it reports ready
        (``_tend``): the scheduling loop never waits for either, so a crash stalls no other job."""
        worker.kill(wait=False)
        self.replaced += 1

    def _succeed(self, worker: _Worker) -> _Worker:
        """The successor of a killed worker, once it has exited and what it held on its GPU's lock is freed:
        a ready spare of its GPU if there is one (and a new spare is started), else a new worker."""
        if not worker.reap():
            self._orphans.append(worker)  # did not exit in EXIT_TIMEOUT_S: close() waits for it once more
        if worker.lock is not None and not worker.lock.release_dead(worker.lock_index):
            raise KzError(
                f"the GPU lock of device {worker.gpu} was left held by a dead worker; "
                "results so far are saved, re-run the command to resume"
            )
        self._free_locks[worker.gpu].append(worker.lock_index)
        spare = self._ready_spare(worker.gpu) if worker.slot_index is not None else None
        if spare is not None:
            self.spares.remove(spare)
            spare.slot_index = worker.slot_index
            self.workers[worker.slot_index] = spare
            new = self._spawn(None, worker.gpu)
            new.replacement = True
            self.spares.append(new)
            return spare
        new = self._spawn(worker.slot_index, worker.gpu)
        new.replacement = True
        new.start_failures = worker.start_failures + 1 if worker.failed_start else 0
        if worker.slot_index is None:
            self.spares[self.spares.index(worker)] = new
        else:
            self.workers[worker.slot_index] = new
        return new

    def _ready_spare(self, gpu) -> _Worker | None:
        for spare in self.spares:
            if spare.gpu != gpu or spare.killed:
                continue
            if not spare.ready:  # it may have reported ready (or died) since we last looked
                self._tend(spare, wait([spare.conn, spare.proc.sentinel], timeout=0))
            if spare.ready:
                return spare
        return None

    def _tend(self, worker: _Worker, ready: list) -> None:
        """A worker that is not ready: one that was killed gets its successor once it has exited; one that
        is starting becomes ready, or is killed if it failed."""
        if worker.killed:
            if worker.proc.sentinel in ready or not worker.proc.is_alive() or time.monotonic() >= worker.exit_by:
                self._succeed(worker)
            return
        if worker.conn in ready:
            failure = self._take_ready(worker)
        elif worker.proc.sentinel in ready or not worker.proc.is_alive():
            worker.proc.join(timeout=1)
            failure = f"evaluator worker {_exit_description(worker.proc)} while starting"
        elif time.monotonic() >= worker.start_by:
            failure = f"evaluator worker did not start within {self.start_timeout_s:.0f} s"
        else:
            return
        if failure is not None:
            self._start_failed(worker, failure)

    def close(self) -> None:
        everyone = list(self.workers.values()) + self.spares
        for w in everyone:
            if not w.killed:
                with contextlib.suppress(OSError):  # best effort: a worker that is gone needs no goodbye
                    w.conn.send(None)
        deadline = time.monotonic() + 5  # one grace period for all: busy workers are killed, not waited on
        for w in everyone:
            w.proc.join(timeout=max(0.0, deadline - time.monotonic()))
            w.kill()
        for w in self._orphans:
            w.kill()
        self.workers.clear()
        self.spares.clear()
        self._orphans.clear()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()

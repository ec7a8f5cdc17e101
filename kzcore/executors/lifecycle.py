"""The local pool's workers from spawn to exit: a worker process and its pipe (`_Worker`), and
`WorkerLifecycle`, which the pool holds: start deadlines, standby spares, replacing a worker that died or was
killed, and closing them all. Neighbours: `executors.local` (the pool, which schedules jobs on these workers and
says how a worker process is started), `executors.worker` (what runs in the process), `executors.channel` (its
messages), `executors.devicelock` (the GPU lock each worker holds an index of)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import tempfile
import time
from collections.abc import Callable
from multiprocessing.connection import wait
from pathlib import Path

from kzcore.errors import KzError, sigterm_deferred
from kzcore.executors.channel import ChannelError, _bound_reads, receive
from kzcore.executors.processes import LOG_NAME, kill_process_tree
from kzcore.executors.worker import worker_main, worker_workdir
from kzcore.types import EvalJob

MAX_START_FAILURES = 3
EXIT_TIMEOUT_S = 30.0  # a killed worker that has not exited by then is left to close() and its slot restarted
SCRATCH_PREFIX = "kz-sandbox"


def _pid_namespace() -> str:
    """This process's PID namespace (its inode number), so that a scratch directory's owner PID is only ever
    looked up where it means the same process; "0" where /proc does not say."""
    try:
        return re.sub(r"\D", "", os.readlink("/proc/self/ns/pid")) or "0"
    except OSError:
        return "0"


def make_scratch(worker_id: int) -> str:
    """A new scratch directory for worker ``worker_id``, named after the pool's process (PID and PID namespace),
    so that one left behind by a pool that was killed can be told from one in use (`sweep_scratch`)."""
    return tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{worker_id}-p{os.getpid()}.{_pid_namespace()}-")


def sweep_scratch(folder: str | None = None) -> int:
    """Delete the scratch directories whose pool process is gone: a pool deletes its workers' when they end,
    but one killed outright (SIGKILL, a cluster's time limit, a lost node) leaves them, compiler caches and
    all, in the temporary folder. Only directories of this PID namespace are judged; a PID that is alive, or
    that this process may not signal, keeps its directory. Returns how many were deleted."""
    names = re.compile(rf"{SCRATCH_PREFIX}\d+-p(\d+)\.{_pid_namespace()}-[^/]+")
    deleted = 0
    for path in Path(folder or tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*-p*"):
        match = names.fullmatch(path.name)
        if not match or not path.is_dir() or _alive(int(match.group(1))):
            continue
        shutil.rmtree(path, ignore_errors=True)
        deleted += not path.exists()
    return deleted


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


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
        self.scratch = make_scratch(worker_id)  # deleted by kill(), or by a later pool's sweep_scratch
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
        self.tick = 0.0  # when LocalPool.map last charged the job's deadline (waiting for the GPU lock is not charged)

    def log_ends(self, limit: int = 300) -> str:
        """The last non-empty line of the worker's log (its stdout and stderr: a Python traceback ends with the
        exception), cut to ``limit`` characters; "" when there is none. Read before the worker is replaced, whose
        scratch directory goes with it."""
        path = worker_workdir(self.scratch, self.id) / LOG_NAME
        try:
            with path.open("rb") as f:
                f.seek(max(0, f.seek(0, 2) - 4096))
                lines = [line.strip() for line in f.read().decode("utf-8", "replace").splitlines()]
        except OSError:
            return ""
        last = next((line for line in reversed(lines) if line), "")
        return last if len(last) <= limit else last[: limit - 1] + "…"

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
    """A pool's workers from start to close: one per slot, the standby spares, and their succession when one
    dies or is killed. ``slots``: the GPU of each slot (None on a CPU); ``spare_plan``: spares to keep per GPU;
    ``free_locks``: per GPU, the indices into its lock no living worker holds; ``start_timeout_s``: how long a
    new worker has to report ready; ``launch(worker_id, gpu, lock_index, start_timeout_s)``: the pool's recipe
    for starting a worker process, asked at each start."""

    def __init__(
        self,
        slots: list,
        spare_plan: dict,
        free_locks: dict[str | None, list[int]],
        start_timeout_s: float,
        launch: Callable[[int, str | None, int, float], _Worker],
    ):
        self.slots, self.spare_plan, self.free_locks = slots, spare_plan, free_locks
        self.start_timeout_s = start_timeout_s
        self.launch = launch
        self.workers: dict[int, _Worker] = {}  # slot index -> its worker (starting, ready, busy or killed)
        self.spares: list[_Worker] = []  # started and idle: each takes a dead worker's place on its GPU at once
        self.orphans: list[_Worker] = []  # killed, did not exit in EXIT_TIMEOUT_S: close() waits once more
        self.next_id = 0
        self.info: dict = {}  # what the first worker to start reported (torch, device name, sandbox, ...)
        self.replaced = 0
        self.restart_seconds: list[float] = []  # spawn to ready, for each replacement worker

    def _spawn(self, slot_index: int | None, gpu: str | None = None) -> _Worker:
        """A new worker for slot ``slot_index``, or a spare for ``gpu`` (slot_index None)."""
        if slot_index is not None:
            gpu = self.slots[slot_index]
        worker = self.launch(self.next_id, gpu, self.free_locks[gpu].pop(0), self.start_timeout_s)
        worker.slot_index, worker.gpu = slot_index, gpu
        self.next_id += 1
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
        """Block until ``worker`` is ready, or has failed to start (``tend``)."""
        self.tend(worker, wait([worker.conn, worker.proc.sentinel], max(0.0, worker.start_by - time.monotonic())))

    def _start_failed(self, worker: _Worker, failure: str) -> None:
        """Kill a worker that failed to start. KzError for a first start (the pool cannot work: the error is
        the answer) and for a replacement's MAX_START_FAILURES-th failure in a row; else its slot tries again."""
        worker.kill(wait=False)
        worker.failed_start = True
        if not worker.replacement:
            raise KzError(failure)
        if worker.start_failures + 1 >= MAX_START_FAILURES:
            raise KzError(f"{failure} ({MAX_START_FAILURES} starts in a row failed); results so far are saved")

    def start(self) -> None:
        """Start every worker and wait until each has loaded torch and the plugins (replacements that are
        still starting included); on any failure close them all and raise."""
        try:
            if not self.workers:
                sweep_scratch()  # what pools killed before they could clean up left behind
                with sigterm_deferred():  # every worker started is one the pool knows (`_succeed`)
                    for i in range(len(self.slots)):
                        w = self._spawn(i)
                        self.workers[w.slot_index] = w
                    for gpu, n in self.spare_plan.items():
                        for _ in range(n):
                            self.spares.append(self._spawn(None, gpu))
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

    def replace(self, worker: _Worker) -> None:
        """Kill ``worker``; its successor starts once it has exited and takes jobs once it reports ready
        (``tend``): the scheduling loop never waits for either, so a crash stalls no other job."""
        worker.kill(wait=False)
        self.replaced += 1

    def _succeed(self, worker: _Worker) -> _Worker:
        """The successor of a killed worker, once it has exited and what it held on its GPU's lock is freed:
        a ready spare of its GPU if there is one (and a new spare is started), else a new worker."""
        if not worker.reap():
            self.orphans.append(worker)  # did not exit in EXIT_TIMEOUT_S: close() waits for it once more
        if worker.lock is not None and not worker.lock.release_dead(worker.lock_index):
            raise KzError(
                f"the GPU lock of device {worker.gpu} was left held by a dead worker; "
                "results so far are saved, re-run the command to resume"
            )
        self.free_locks[worker.gpu].append(worker.lock_index)
        spare = self._ready_spare(worker.gpu) if worker.slot_index is not None else None
        # a SIGTERM (sigterm_raises) waits until the new worker has its start-up data and the pool knows it: cut
        # inside Process.start(), the child dies on a half-written pickle and prints a traceback after the run's
        # last words; cut before the pool knows it, close() would not reap it
        with sigterm_deferred():
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
                self.tend(spare, wait([spare.conn, spare.proc.sentinel], timeout=0))
            if spare.ready:
                return spare
        return None

    def tend(self, worker: _Worker, ready: list) -> None:
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
        """Ask every worker to exit, give them one grace period together, then kill what is left."""
        everyone = list(self.workers.values()) + self.spares
        for w in everyone:
            if not w.killed:
                with contextlib.suppress(OSError):  # best effort: a worker that is gone needs no goodbye
                    w.conn.send(None)
        deadline = time.monotonic() + 5  # one grace period for all: busy workers are killed, not waited on
        for w in everyone:
            w.proc.join(timeout=max(0.0, deadline - time.monotonic()))
            w.kill()
        for w in self.orphans:
            w.kill()
        self.workers.clear()
        self.spares.clear()
        self.orphans.clear()

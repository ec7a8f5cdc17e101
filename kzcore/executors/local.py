"""The default executor: a pool of persistent, spawned worker processes on this machine (one per GPU, or N
on a CPU). Each job has a wall-clock deadline; a worker that dies, hangs or poisons its CUDA context is
replaced and its candidate gets the matching status. Results stream back as they finish."""

from __future__ import annotations

import collections
import contextlib
import io
import multiprocessing as mp
import os
import pickle
import shutil
import signal
import socket
import struct
import tempfile
import time
from collections.abc import Iterable, Iterator
from multiprocessing.connection import wait

from kzcore.errors import KzError
from kzcore.executors.devicelock import DeviceLock
from kzcore.executors.sandbox import kill_process_tree, memory_limit_for
from kzcore.executors.worker import worker_main
from kzcore.plugins import get_plugin_manager, plugin_specs
from kzcore.types import EvalConfig, EvalJob, EvalResult, Status

START_TIMEOUT_S = 300.0
MAX_START_FAILURES = 3
MAX_MESSAGE_BYTES = 64 << 20  # a result is a few KB; anything longer is not one of ours
READ_TIMEOUT_S = 5.0  # a message that has begun must arrive whole within this
EXIT_TIMEOUT_S = 30.0  # a killed worker that has not exited by then is left to close() and its slot restarted
MAX_REQUEUES = 3  # a job whose worker was found dead before the job reached it is sent again this often


def resolve_device(device: str) -> str:
    if device != "auto":
        if device == "cuda":
            import torch

            if not torch.cuda.is_available():
                raise KzError("--device cuda was asked for, but no CUDA GPU is visible")
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def physical_gpu(index: str) -> str:
    """The CUDA_VISIBLE_DEVICES entry for this process's visible GPU number ``index``: with
    ``CUDA_VISIBLE_DEVICES=2,3`` set for kz, visible GPU 1 is the machine's GPU 3 (or a UUID)."""
    visible = [x.strip() for x in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if x.strip()]
    if visible and int(index) < len(visible):
        return visible[int(index)]
    return index


def gpu_count() -> int:
    import torch

    return torch.cuda.device_count()


def pool_gpus(count: int, environ=os.environ) -> list[str]:
    """The visible GPUs (indices as strings) this process's pool puts workers on: all ``count`` of them, but
    under a launcher that starts one process per GPU (``accelerate launch``, ``torchrun``: ``LOCAL_RANK`` and
    ``LOCAL_WORLD_SIZE`` > 1 in the environment) only the process's own, ``LOCAL_RANK`` — otherwise every
    training process would spread its evaluator workers over every GPU, and their timings would collide."""
    local_world = int(environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    rank = environ.get("LOCAL_RANK")
    if local_world > 1 and rank is not None and count > 0:
        if count == 1:  # the launcher already narrowed CUDA_VISIBLE_DEVICES to this process's GPU
            return ["0"]
        if int(rank) >= count:
            raise KzError(f"LOCAL_RANK={rank} but this process sees only {count} GPU(s)")
        return [str(int(rank))]
    return [str(i) for i in range(count)]


class ChannelError(Exception):
    """What came over a worker's pipe is not a message of ours (a candidate wrote into it or closed it)."""


class _MessageUnpickler(pickle.Unpickler):
    """Builds only kzcore's own value types: the pipe is reachable from candidate code, and unpickling
    arbitrary classes would run a candidate's code in this process."""

    ALLOWED = {
        ("builtins", "set"),
        ("builtins", "frozenset"),
        ("builtins", "complex"),
        ("torch.torch_version", "TorchVersion"),  # a str
        ("numpy", "dtype"),  # numpy scalars that slip into a result's numbers
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
    }

    def find_class(self, module, name):
        if module == "kzcore.types" or (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a worker message")


def _bound_reads(conn) -> None:
    """A read that has begun gives up after READ_TIMEOUT_S (a message header with no body, written by a
    candidate, must not hang the pool)."""
    try:
        sock = socket.socket(fileno=os.dup(conn.fileno()))
    except OSError:  # not a socket (another platform): reads stay unbounded
        return
    try:
        seconds = int(READ_TIMEOUT_S)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", seconds, 0))
    except OSError:
        pass
    finally:
        sock.close()


def receive(conn) -> tuple:
    """One message from a worker. EOFError when the worker's end is closed; ChannelError when what came is
    not a message of ours (too long, cut short, not a tuple, classes it may not hold)."""
    try:
        data = conn.recv_bytes(MAX_MESSAGE_BYTES)
    except (EOFError, ConnectionResetError):  # the worker's end is gone (reset: it died with data unread)
        raise EOFError from None
    except OSError as exc:  # too long ("bad message length"), or cut short past the read timeout
        raise ChannelError(f"{type(exc).__name__}: {exc}") from None
    try:
        message = _MessageUnpickler(io.BytesIO(data)).load()
    except Exception as exc:
        raise ChannelError(f"unreadable message ({type(exc).__name__}: {exc})"[:300]) from None
    if not isinstance(message, tuple) or not message or message[0] not in ("ready", "failed", "started", "result"):
        raise ChannelError(f"unexpected message of type {type(message).__name__}")
    return message


def _cost_key(job) -> tuple:
    """Jobs with the same key are expected to cost about the same: one problem in one language."""
    problem = getattr(job, "problem", None)
    candidate = getattr(job, "candidate", None)
    return (getattr(problem, "level", None), getattr(problem, "name", None), getattr(candidate, "language", None))


class JobQueue:
    """Jobs waiting for a worker, longest expected first, so a batch does not end with its slowest jobs
    running alone (the longest-processing-time rule). A problem's cost is learned from its finished jobs
    (seconds from dispatch to result, averaged with weight 1/2 on the newest) and kept across maps. Order:
    first one job of every problem not yet seen (in submission order: its cost is then learned early), then
    the highest cost, where a problem whose only jobs so far are still running counts the time they have run."""

    def __init__(self, jobs: Iterable, costs: dict):
        self.costs = costs
        self.buckets: dict[tuple, collections.deque] = {}
        self.running_since: dict[tuple, float] = {}  # first dispatch of a problem with no known cost yet
        self.n = 0
        for job in jobs:
            self.buckets.setdefault(_cost_key(job), collections.deque()).append(job)
            self.n += 1

    def __len__(self) -> int:
        return self.n

    def pop(self, now: float):
        waiting = [k for k, b in self.buckets.items() if b]
        unseen = next((k for k in waiting if k not in self.costs and k not in self.running_since), None)
        if unseen is not None:
            key = unseen
            self.running_since[key] = now
        else:
            key = max(waiting, key=lambda k: self.costs.get(k, now - self.running_since.get(k, now)))
        self.n -= 1
        return self.buckets[key].popleft()

    def push_front(self, job) -> None:
        self.buckets.setdefault(_cost_key(job), collections.deque()).appendleft(job)
        self.n += 1

    def finished(self, job, seconds: float) -> None:
        key = _cost_key(job)
        self.costs[key] = seconds if key not in self.costs else (self.costs[key] + seconds) / 2
        self.running_since.pop(key, None)


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
        memory_limit: int | None = None,
    ):
        self.id = worker_id
        self.lock, self.lock_index = lock, lock_index
        self.conn, child = ctx.Pipe()
        _bound_reads(self.conn)
        self.scratch = tempfile.mkdtemp(prefix=f"kz-sandbox{worker_id}-")  # deleted by kill()
        self.proc = ctx.Process(
            target=worker_main,
            args=(child, worker_id, device, env, specs, tf32, lock, lock_index, memory_limit, self.scratch),
            name=f"kz-worker-{worker_id}",
            daemon=True,
        )
        self.proc.start()
        child.close()
        self.info: dict | None = None  # set when the worker reports ready; until then it takes no job
        self.spawned_at = time.monotonic()
        self.start_by = self.spawned_at + START_TIMEOUT_S
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


class LocalPool:
    """``LocalPool(workers=None, config=EvalConfig(), plugins=None)``; use ``map(jobs)`` then ``close()``."""

    queue_class = JobQueue  # the order jobs are sent in (bench/schedule.py compares it with first-in-first-out)

    def __init__(self, workers: int | None = None, config: EvalConfig | None = None, plugins: list[str] | None = None):
        self.config = config or EvalConfig()
        self.device = resolve_device(self.config.device)
        self.specs = plugins if plugins is not None else plugin_specs(get_plugin_manager())
        self.ctx = mp.get_context("spawn")
        self.locks: dict[str, DeviceLock] = {}
        if self.device == "cuda":
            gpus = pool_gpus(gpu_count())
            per_gpu = self.config.workers_per_gpu
            n = workers or len(gpus) * per_gpu
            self.slots = [gpus[i % len(gpus)] for i in range(n)]
            spares = {gpu: self.config.standby_workers for gpu in gpus}
        else:
            self.slots = [None] * (workers or max(1, (os.cpu_count() or 2) // 2))
            spares = {None: self.config.standby_workers}
        # each worker of a GPU, spares included, holds its own index into that GPU's lock while it lives
        self._free_locks = {gpu: list(range(self.slots.count(gpu) + n)) for gpu, n in spares.items()}
        if self.device == "cuda" and len(self.slots) > len(spares):
            # several workers share a GPU: timing must hold it alone
            self.locks = {gpu: DeviceLock(self.ctx, len(free)) for gpu, free in self._free_locks.items()}
        self._spare_plan = spares
        self.spares: list[_Worker] = []  # started and idle: each takes a dead worker's place on its GPU at once
        self.workers: dict[int, _Worker] = {}
        self._orphans: list[_Worker] = []  # killed, did not exit in EXIT_TIMEOUT_S: close() waits once more
        self.memory_limit = memory_limit_for(len(self.slots) + sum(spares.values()))
        self._next_id = 0
        self.info: dict = {}
        self.replaced = 0
        self.restart_seconds: list[float] = []  # spawn to ready, for each replacement worker
        self.costs: dict[tuple, float] = {}  # seconds per job of each problem, learned (JobQueue)

    # -- worker lifecycle -------------------------------------------------------------------------
    def _env(self, slot) -> dict:
        # explicit both ways: a TRITON_INTERPRET=1 left in the parent's environment must not reach GPU workers
        env = {"PYTHONUNBUFFERED": "1", "TRITON_INTERPRET": "1" if self.device == "cpu" else "0"}
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
            failure = f"evaluator worker did not start within {START_TIMEOUT_S:.0f} s"
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

    # -- scheduling -------------------------------------------------------------------------------
    def map(self, jobs: Iterable[EvalJob]) -> Iterator[EvalResult]:
        """Evaluate ``jobs``; yield each result as soon as it is ready (not in submission order; jobs are sent
        longest expected first, see JobQueue)."""
        self.start()
        self._requeued = 0
        queue = self._queue = self.queue_class(jobs, self.costs)
        while queue or any(w.job for w in self.workers.values()):
            now = time.monotonic()
            for w in list(self.workers.values()):
                if w.ready and w.job is None and queue:
                    self._dispatch(w, queue, now)
            busy = [w for w in self.workers.values() if w.job is not None]
            # starting, or killed and exiting (spares too: a spare that failed to start is started again)
            pending = [w for w in list(self.workers.values()) + self.spares if not w.ready]
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
                self._tend(w, ready)
            for w in busy:
                job, sent = w.job, w.sent_at
                result = self._collect(w, ready)
                if result is not None:
                    queue.finished(job, time.monotonic() - sent)
                    yield result

    def _dispatch(self, w: _Worker, queue: JobQueue, now: float) -> None:
        job = queue.pop(now)
        try:
            w.conn.send(job)
        except OSError:  # the worker died while idle: not this job's doing, so it goes to a fresh worker
            self._replace(w)
            self._requeue(job)
            return
        w.job, w.started, w.sent_at = job, False, now
        w.deadline, w.tick = now + job.config.timeout_s, now

    def _requeue(self, job) -> None:
        self._requeued += 1
        if self._requeued > MAX_REQUEUES * max(1, len(self.workers)):
            raise KzError("evaluator workers keep dying before their jobs start; results so far are saved")
        self._queue.push_front(job)

    def _collect(self, w: _Worker, ready: list) -> EvalResult | None:
        job = w.job
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
                self._replace(w)
            return message[1]
        if w.proc.sentinel in ready or not w.proc.is_alive():
            return self._lost(w)
        if time.monotonic() >= w.deadline and not w.conn.poll(0):  # a result already sent is still read
            w.job = None
            self._replace(w)
            return _failure(job, Status.TIMEOUT, f"no result within {job.config.timeout_s:g} s; the worker was killed")
        return None

    def _lost(self, w: _Worker) -> EvalResult | None:
        """The worker died or closed its pipe. Before it took the job, the job goes back to the queue."""
        job, w.job = w.job, None
        w.proc.join(timeout=1)  # the pipe can close just before the process is reaped: wait for its exit code
        how = _exit_description(w.proc)
        self._replace(w)
        if not w.started:
            self._requeue(job)
            return None
        if how == "did not exit":
            return _failure(job, Status.RUNTIME_ERROR, "the worker closed its result pipe while running this candidate")
        return _failure(job, Status.RUNTIME_ERROR, f"the worker process {how} while running this candidate (crash)")

    def _junk(self, w: _Worker, what) -> EvalResult:
        job, w.job = w.job, None
        self._replace(w)
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

"""The default executor: a pool of persistent, spawned worker processes on this machine (one per GPU, or N
on a CPU). Each job has a wall-clock deadline; a worker that dies, hangs or poisons its CUDA context is
replaced and its candidate gets the matching status. Results stream back as they finish."""

from __future__ import annotations

import collections
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
        self.info: dict | None = None
        self.job: EvalJob | None = None
        self.started = False  # the worker confirmed it has self.job
        self.deadline = 0.0

    def kill(self) -> None:
        """SIGKILL (a candidate can ignore SIGTERM) the worker and every process it started."""
        if self.proc.is_alive():
            kill_process_tree(self.proc.pid)
        self.proc.join(timeout=10)
        self.conn.close()
        shutil.rmtree(self.scratch, ignore_errors=True)


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

    def __init__(self, workers: int | None = None, config: EvalConfig | None = None, plugins: list[str] | None = None):
        self.config = config or EvalConfig()
        self.device = resolve_device(self.config.device)
        self.specs = plugins if plugins is not None else plugin_specs(get_plugin_manager())
        self.ctx = mp.get_context("spawn")
        self.locks: dict[str, DeviceLock] = {}
        if self.device == "cuda":
            gpus = [str(i) for i in range(gpu_count())]
            per_gpu = self.config.workers_per_gpu
            n = workers or len(gpus) * per_gpu
            self.slots = [gpus[i % len(gpus)] for i in range(n)]
            if n > len(gpus):  # several workers share a GPU: timing must hold it alone
                self.locks = {gpu: DeviceLock(self.ctx, self.slots.count(gpu)) for gpu in gpus}
        else:
            self.slots = [None] * (workers or max(1, (os.cpu_count() or 2) // 2))
        self.workers: dict[int, _Worker] = {}
        self.memory_limit = memory_limit_for(len(self.slots))
        self._next_id = 0
        self.info: dict = {}
        self.replaced = 0

    # -- worker lifecycle -------------------------------------------------------------------------
    def _env(self, slot) -> dict:
        # explicit both ways: a TRITON_INTERPRET=1 left in the parent's environment must not reach GPU workers
        env = {"PYTHONUNBUFFERED": "1", "TRITON_INTERPRET": "1" if self.device == "cpu" else "0"}
        if slot is not None:
            env["CUDA_VISIBLE_DEVICES"] = physical_gpu(slot)
        return env

    def _spawn(self, slot_index: int) -> _Worker:
        gpu = self.slots[slot_index]
        worker = _Worker(
            self.ctx,
            self._next_id,
            self.device,
            self._env(gpu),
            self.specs,
            self.config.tf32,
            self.locks.get(gpu),
            self.slots[:slot_index].count(gpu),
            self.memory_limit,
        )
        worker.slot_index = slot_index
        self._next_id += 1
        return worker

    def _await_ready(self, worker: _Worker) -> None:
        if not worker.conn.poll(START_TIMEOUT_S):
            worker.kill()
            raise KzError(f"evaluator worker did not start within {START_TIMEOUT_S:.0f} s")
        try:
            msg = receive(worker.conn)
        except (EOFError, ChannelError):
            worker.kill()
            raise KzError(f"evaluator worker {_exit_description(worker.proc)} while starting") from None
        if msg[0] != "ready" or len(msg) != 2 or not isinstance(msg[1], (dict, str)):
            worker.kill()
            raise KzError(f"evaluator worker failed to start: {msg[1].splitlines()[0]}")
        worker.info = msg[1]
        self.info = self.info or dict(msg[1])

    def start(self) -> LocalPool:
        """Start every worker and wait until each has loaded torch and the plugins."""
        if not self.workers:
            fresh = [self._spawn(i) for i in range(len(self.slots))]
            for w in fresh:
                self._await_ready(w)
                self.workers[w.slot_index] = w
        return self

    def _replace(self, worker: _Worker) -> None:
        worker.kill()
        if worker.lock is not None and not worker.lock.release_dead(worker.lock_index):
            raise KzError(
                f"the GPU lock of device {self.slots[worker.slot_index]} was left held by a dead worker; "
                "results so far are saved, re-run the command to resume"
            )
        for attempt in range(MAX_START_FAILURES):
            new = self._spawn(worker.slot_index)
            try:
                self._await_ready(new)
            except KzError:
                if attempt == MAX_START_FAILURES - 1:
                    raise
                continue
            self.workers[worker.slot_index] = new
            self.replaced += 1
            return

    def close(self) -> None:
        for w in self.workers.values():
            try:
                w.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        deadline = time.monotonic() + 5  # one grace period for all: busy workers are killed, not waited on
        for w in self.workers.values():
            w.proc.join(timeout=max(0.0, deadline - time.monotonic()))
            w.kill()
        self.workers.clear()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()

    # -- scheduling -------------------------------------------------------------------------------
    def map(self, jobs: Iterable[EvalJob]) -> Iterator[EvalResult]:
        """Evaluate ``jobs``; yield each result as soon as it is ready (not in submission order)."""
        self.start()
        self._requeued = 0
        queue = self._queue = collections.deque(jobs)
        while queue or any(w.job for w in self.workers.values()):
            now = time.monotonic()
            for w in list(self.workers.values()):
                if w.job is None and queue:
                    self._dispatch(w, queue, now)
            busy = [w for w in self.workers.values() if w.job is not None]
            if not busy:  # every job sent this round went back to the queue (its worker was found dead)
                continue
            for w in busy:  # time spent only waiting for the GPU lock does not count against the job
                if w.lock is not None and w.lock.is_waiting(w.lock_index):
                    w.deadline += now - w.tick
                w.tick = now
            timeout = max(0.0, min(w.deadline for w in busy) - now)
            if self.locks:
                timeout = min(timeout, 0.5)
            ready = wait([w.conn for w in busy] + [w.proc.sentinel for w in busy], timeout=timeout)
            for w in busy:
                result = self._collect(w, ready)
                if result is not None:
                    yield result

    def _dispatch(self, w: _Worker, queue: collections.deque, now: float) -> None:
        job = queue.popleft()
        try:
            w.conn.send(job)
        except OSError:  # the worker died while idle: not this job's doing, so it goes to a fresh worker
            self._replace(w)
            self._requeue(job)
            return
        w.job, w.started = job, False
        w.deadline, w.tick = now + job.config.timeout_s, now

    def _requeue(self, job) -> None:
        self._requeued += 1
        if self._requeued > MAX_REQUEUES * max(1, len(self.workers)):
            raise KzError("evaluator workers keep dying before their jobs start; results so far are saved")
        self._queue.appendleft(job)

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
        if time.monotonic() >= w.deadline:
            w.job = None
            self._replace(w)
            return _failure(job, Status.TIMEOUT, f"no result within {job.config.timeout_s:g} s; the worker was killed")
        return None

    def _lost(self, w: _Worker) -> EvalResult | None:
        """The worker died or closed its pipe. Before it took the job, the job goes back to the queue."""
        job, w.job = w.job, None
        w.proc.join(timeout=5)  # the pipe can close before the process is reaped: wait for its exit code
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
    if isinstance(job, EvalJob):
        return (job.candidate.problem, job.candidate.language, job.candidate.sample)
    return (job.problem.name,)


def _result_of(result) -> tuple:
    if isinstance(result, EvalResult):
        return (result.problem, result.language, result.sample)
    return (getattr(result, "problem", None),)


def _failure(job, status: Status, message: str):
    """The result filed for a job whose worker died or hung: an EvalResult, or a failed ProblemReport."""
    if not isinstance(job, EvalJob):
        from kzcore.evaluate.problem_check import failed_report

        return failed_report(job, f"{status.value}: {message}")
    return job.result(status, message)

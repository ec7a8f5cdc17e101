"""The default executor: a pool of persistent, spawned worker processes on this machine (one per GPU, or N
on a CPU). Each job has a wall-clock deadline; a worker that dies, hangs or poisons its CUDA context is
replaced and its candidate gets the matching status. Results stream back as they finish."""

from __future__ import annotations

import collections
import multiprocessing as mp
import os
import signal
import time
from collections.abc import Iterable, Iterator
from multiprocessing.connection import wait

from kzcore.errors import KzError
from kzcore.executors.devicelock import DeviceLock
from kzcore.executors.worker import worker_main
from kzcore.plugins import get_plugin_manager, plugin_specs
from kzcore.types import EvalConfig, EvalJob, EvalResult, Status

START_TIMEOUT_S = 300.0
MAX_START_FAILURES = 3


def resolve_device(device: str) -> str:
    if device != "auto":
        if device == "cuda":
            import torch

            if not torch.cuda.is_available():
                raise KzError("--device cuda was asked for, but no CUDA GPU is visible")
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def gpu_count() -> int:
    import torch

    return torch.cuda.device_count()


class _Worker:
    def __init__(
        self, ctx, worker_id: int, device: str, env: dict, specs: list[str], tf32: bool, lock, lock_index: int
    ):
        self.id = worker_id
        self.lock, self.lock_index = lock, lock_index
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(
            target=worker_main,
            args=(child, worker_id, device, env, specs, tf32, lock, lock_index),
            name=f"kz-worker-{worker_id}",
            daemon=True,
        )
        self.proc.start()
        child.close()
        self.info: dict | None = None
        self.job: EvalJob | None = None
        self.deadline = 0.0

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(timeout=10)
        self.conn.close()


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
        self._next_id = 0
        self.info: dict = {}
        self.replaced = 0

    # -- worker lifecycle -------------------------------------------------------------------------
    def _env(self, slot) -> dict:
        # explicit both ways: a TRITON_INTERPRET=1 left in the parent's environment must not reach GPU workers
        env = {"PYTHONUNBUFFERED": "1", "TRITON_INTERPRET": "1" if self.device == "cpu" else "0"}
        if slot is not None:
            env["CUDA_VISIBLE_DEVICES"] = slot
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
        )
        worker.slot_index = slot_index
        self._next_id += 1
        return worker

    def _await_ready(self, worker: _Worker) -> None:
        if not worker.conn.poll(START_TIMEOUT_S):
            worker.kill()
            raise KzError(f"evaluator worker did not start within {START_TIMEOUT_S:.0f} s")
        try:
            msg = worker.conn.recv()
        except EOFError:
            worker.kill()
            raise KzError(f"evaluator worker {_exit_description(worker.proc)} while starting") from None
        if msg[0] != "ready":
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
        for w in self.workers.values():
            w.proc.join(timeout=5)
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
        queue = collections.deque(jobs)
        while queue or any(w.job for w in self.workers.values()):
            now = time.monotonic()
            for w in self.workers.values():
                if w.job is None and queue:
                    w.job = queue.popleft()
                    w.deadline, w.tick = now + w.job.config.timeout_s, now
                    w.conn.send(w.job)
            busy = [w for w in self.workers.values() if w.job is not None]
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

    def _collect(self, w: _Worker, ready: list) -> EvalResult | None:
        job = w.job
        if w.conn in ready:
            try:
                _, result, poisoned = w.conn.recv()
            except (EOFError, OSError):
                pass  # died mid-send; handled as a crash below
            else:
                w.job = None
                if poisoned:
                    self._replace(w)
                return result
        if w.proc.sentinel in ready or not w.proc.is_alive():
            w.job = None
            w.proc.join(timeout=5)  # the pipe can close before the process is reaped: wait for its exit code
            how = _exit_description(w.proc)
            self._replace(w)
            return _failure(job, Status.RUNTIME_ERROR, f"the worker process {how} while running this candidate (crash)")
        if time.monotonic() >= w.deadline:
            w.job = None
            self._replace(w)
            return _failure(job, Status.TIMEOUT, f"no result within {job.config.timeout_s:g} s; the worker was killed")
        return None


def _failure(job, status: Status, message: str):
    """The result filed for a job whose worker died or hung: an EvalResult, or a failed ProblemReport."""
    if not isinstance(job, EvalJob):
        from kzcore.evaluate.problem_check import failed_report

        return failed_report(job, f"{status.value}: {message}")
    return job.result(status, message)

"""A readers-writer lock shared by the worker processes of one GPU, so several workers can overlap
compilation and correctness checks while timing always has the GPU to itself.

Correctness stages hold it *shared*; timing holds it *exclusive* (a waiting writer blocks new readers, so
timing is never starved). Waiting polls under a plain mutex rather than using a condition variable: a
worker killed mid-wait (timeout, crash) then leaves nothing inconsistent behind. Each worker's holding and
waiting state lives in shared memory so the pool can stop a job's deadline clock while its worker only
waits for the lock, and release what a killed worker held."""

from __future__ import annotations

import contextlib
import time

NONE, SHARED, EXCLUSIVE = 0, 1, 2
POLL_S = 0.001


class DeviceLock:
    def __init__(self, ctx, n_workers: int):
        self.mutex = ctx.Lock()
        self.readers = ctx.Value("i", 0, lock=False)
        self.writer = ctx.Value("i", 0, lock=False)  # set while a writer holds or waits for the lock
        self.holding = ctx.Array("i", n_workers, lock=False)  # EXCLUSIVE also means "owns the writer flag"
        self.waiting = ctx.Array("i", n_workers, lock=False)

    def _until(self, me: int, try_take) -> None:
        self.waiting[me] = 1
        while True:
            with self.mutex:
                if try_take():
                    self.waiting[me] = 0
                    return
            time.sleep(POLL_S)

    @contextlib.contextmanager
    def shared(self, me: int):
        def take():
            if self.writer.value:
                return False
            self.readers.value += 1
            self.holding[me] = SHARED
            return True

        self._until(me, take)
        try:
            yield
        finally:
            with self.mutex:
                self.readers.value -= 1
                self.holding[me] = NONE

    @contextlib.contextmanager
    def exclusive(self, me: int):
        def claim():
            if self.writer.value and self.holding[me] != EXCLUSIVE:
                return False
            self.writer.value = 1
            self.holding[me] = EXCLUSIVE
            return True

        self._until(me, claim)
        self._until(me, lambda: self.readers.value == 0)
        try:
            yield
        finally:
            with self.mutex:
                self.writer.value = 0
                self.holding[me] = NONE

    def is_waiting(self, me: int) -> bool:
        return bool(self.waiting[me])

    def release_dead(self, me: int, timeout: float = 5.0) -> bool:
        """Undo whatever worker ``me`` (now dead) held. False if the mutex could not be taken (the worker
        died holding it): the caller must then rebuild the lock and restart that GPU's workers."""
        if not self.mutex.acquire(timeout=timeout):
            return False
        try:
            if self.holding[me] == SHARED:
                self.readers.value -= 1
            elif self.holding[me] == EXCLUSIVE:
                self.writer.value = 0
            self.holding[me] = NONE
            self.waiting[me] = 0
        finally:
            self.mutex.release()
        return True


_bound: tuple | None = None  # (DeviceLock, index) of this worker process, once `bind_worker` ran


def bind_worker(lock: DeviceLock | None, index: int) -> None:
    """In a worker process: the lock and index `device_work` takes (None: a worker with no GPU lock)."""
    global _bound
    _bound = (lock, index) if lock is not None else None


@contextlib.contextmanager
def device_work():
    """The shared lock of this worker's GPU around device work done outside the evaluation stages' own locks
    (a worker's start-up, returning cached memory, loading a compiled kernel into the CUDA context), so none
    of it runs while another worker on the GPU times: on an H200 another process's cudaMalloc/cudaFree slowed
    timed memory-bound kernels by 4-13 % (``bench/interference_probe.py``). A no-op outside a worker, and where
    this worker already holds the lock (a stage's, shared or exclusive): never a second hold that a waiting
    writer could deadlock."""
    if _bound is None or _bound[0].holding[_bound[1]] != NONE:
        yield
        return
    with _bound[0].shared(_bound[1]):
        yield

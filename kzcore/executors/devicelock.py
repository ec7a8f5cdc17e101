"""A readers-writer lock shared by the worker processes of one GPU, so several workers can overlap
compilation and correctness checks while timing always has the GPU to itself.

Correctness stages hold it *shared*; timing holds it *exclusive*. The turns are phase-fair: a waiting writer
blocks readers that arrive after it, so timing is never starved, and when a writer lets go, every reader
that was already waiting goes in before the next writer claims the GPU, so a worker that needs a shared
stage before it can time moves on at every timing instead of waiting out each worker queued to time (the
GPU then sat idle whenever the queue of timings ran dry). Waiting polls under a plain mutex rather than using a condition variable: a
worker killed mid-wait (timeout, crash) then leaves nothing inconsistent behind. Each worker's holding and
waiting state lives in shared memory so the pool can stop a job's deadline clock while its worker only
waits for the lock, and release what a killed worker held.

The lock also keeps the GPU's occupancy by state (``occupancy()``): seconds timed (a writer holding it alone),
draining (a writer waiting for readers to finish), shared (readers only) and idle (nobody holding it). With
timing exclusive, the time not timed bounds how much faster several workers can finish a batch than one
(bench/throughput.py files it beside the wall time). Each shared hold says what it is for (``HOLDS``), and the
draining seconds are split among the holds open while a writer waited (``drained_by()``): which work kept
the timings waiting, holds that no evaluation stage clocks (a worker's start-up, memory given back) included."""

from __future__ import annotations

import contextlib
import time

NONE, SHARED, EXCLUSIVE = 0, 1, 2
POLL_S = 0.001
OCCUPANCY = ("timed", "draining", "shared", "idle")  # the GPU's states, by what holds its lock
# what a shared hold is for: the evaluation's stages, then work outside them (`device_work`); anything else "other"
HOLDS = ("construct", "trials", "second_shape", "inputs", "reverify", "start_up", "release_cache", "other")


class DeviceLock:
    def __init__(self, ctx, n_workers: int):
        self.mutex = ctx.Lock()
        self.readers = ctx.Value("i", 0, lock=False)
        self.writer = ctx.Value("i", 0, lock=False)  # set while a writer holds or waits for the lock
        self.holding = ctx.Array("i", n_workers, lock=False)  # EXCLUSIVE also means "owns the writer flag"
        self.waiting = ctx.Array("i", n_workers, lock=False)
        self.turn = ctx.Value("i", 0, lock=False)  # writers' releases so far
        self.reader_since = ctx.Array("i", n_workers, lock=False)  # `turn` when a waiting reader began, or -1
        for i in range(n_workers):
            self.reader_since[i] = -1
        self.spent = ctx.Array("d", len(OCCUPANCY), lock=False)  # seconds in each OCCUPANCY state
        self.hold_what = ctx.Array("i", n_workers, lock=False)  # a shared holder's HOLDS index
        self.drained = ctx.Array("d", len(HOLDS), lock=False)  # draining seconds split among the open holds
        self.since = ctx.Value("d", time.monotonic(), lock=False)  # when the state last changed

    def _state(self) -> int:
        if self.writer.value:
            return 1 if self.readers.value else 0
        return 2 if self.readers.value else 3

    def _account(self) -> None:
        """Book the time since the last change to the state the lock was in (under the mutex, before a change)."""
        now = time.monotonic()
        state, elapsed = self._state(), now - self.since.value
        self.spent[state] += elapsed
        self.since.value = now
        if state == 1:  # draining: each open shared hold bears an equal part
            holders = [i for i in range(len(self.holding)) if self.holding[i] == SHARED]
            for i in holders:
                self.drained[self.hold_what[i]] += elapsed / len(holders)

    def occupancy(self, reset: bool = False) -> dict[str, float]:
        """Seconds the GPU spent in each state (``OCCUPANCY``) since the lock was made or last reset."""
        with self.mutex:
            self._account()
            spent = {name: round(self.spent[i], 3) for i, name in enumerate(OCCUPANCY)}
            if reset:
                for i in range(len(OCCUPANCY)):
                    self.spent[i] = 0.0
                for i in range(len(HOLDS)):
                    self.drained[i] = 0.0
        return spent

    def drained_by(self) -> dict[str, float]:
        """The draining seconds of ``occupancy()`` by what the open shared holds were for (``HOLDS``), each
        stretch split equally among the holds open during it; since the same reset, only those above zero."""
        with self.mutex:
            self._account()
            return {name: round(self.drained[i], 3) for i, name in enumerate(HOLDS) if self.drained[i] > 0}

    def _until(self, me: int, try_take) -> None:
        self.waiting[me] = 1
        while True:
            with self.mutex:
                if try_take():
                    self.waiting[me] = 0
                    return
            time.sleep(POLL_S)

    def _readers_owed(self) -> bool:
        """Whether a reader that was waiting when the last writer let go has yet to go in."""
        turn = self.turn.value
        return any(0 <= since < turn for since in self.reader_since)

    @contextlib.contextmanager
    def shared(self, me: int, what: str = "other"):
        """Held alongside other readers; ``what`` (one of ``HOLDS``) books the draining it causes."""
        code = HOLDS.index(what) if what in HOLDS else HOLDS.index("other")

        def take():
            if self.writer.value:
                return False
            self._account()
            self.readers.value += 1
            self.holding[me] = SHARED
            self.hold_what[me] = code
            self.reader_since[me] = -1
            return True

        with self.mutex:
            self.reader_since[me] = self.turn.value
        self._until(me, take)
        try:
            yield
        finally:
            with self.mutex:
                self._account()
                self.readers.value -= 1
                self.holding[me] = NONE

    @contextlib.contextmanager
    def exclusive(self, me: int):
        def claim():
            if self.writer.value and self.holding[me] != EXCLUSIVE:
                return False
            if self._readers_owed():
                return False
            self._account()
            self.writer.value = 1
            self.holding[me] = EXCLUSIVE
            return True

        self._until(me, claim)
        self._until(me, lambda: self.readers.value == 0)
        try:
            yield
        finally:
            with self.mutex:
                self._account()
                self.writer.value = 0
                self.turn.value += 1
                self.holding[me] = NONE

    def is_waiting(self, me: int) -> bool:
        return bool(self.waiting[me])

    def release_dead(self, me: int, timeout: float = 5.0) -> bool:
        """Undo whatever worker ``me`` (now dead) held. False if the mutex could not be taken (the worker
        died holding it): the caller must then rebuild the lock and restart that GPU's workers."""
        if not self.mutex.acquire(timeout=timeout):
            return False
        try:
            self._account()
            if self.holding[me] == SHARED:
                self.readers.value -= 1
            elif self.holding[me] == EXCLUSIVE:
                self.writer.value = 0
                self.turn.value += 1
            self.holding[me] = NONE
            self.waiting[me] = 0
            self.reader_since[me] = -1
        finally:
            self.mutex.release()
        return True


_bound: tuple | None = None  # (DeviceLock, index) of this worker process, once `bind_worker` ran


def bind_worker(lock: DeviceLock | None, index: int) -> None:
    """In a worker process: the lock and index `device_work` takes (None: a worker with no GPU lock)."""
    global _bound
    _bound = (lock, index) if lock is not None else None


@contextlib.contextmanager
def device_work(what: str = "other"):
    """The shared lock of this worker's GPU around device work done outside the evaluation stages' own locks
    (a worker's start-up, returning cached memory, loading a compiled kernel into the CUDA context), so none
    of it runs while another worker on the GPU times: on an H200 another process's cudaMalloc/cudaFree slowed
    timed memory-bound kernels by 4-13 % (``bench/interference_probe.py``). A no-op outside a worker, and where
    this worker already holds the lock (a stage's, shared or exclusive): never a second hold that a waiting
    writer could deadlock. ``what``: the hold's ``HOLDS`` name, for the lock's ``drained_by``."""
    if _bound is None or _bound[0].holding[_bound[1]] != NONE:
        yield
        return
    with _bound[0].shared(_bound[1], what):
        yield

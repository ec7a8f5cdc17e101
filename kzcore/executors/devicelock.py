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
the timings waiting, holds that no evaluation stage clocks (a worker's start-up, memory given back) included.

Runs are not alone on a GPU either: two `kz` commands, or two training runs side by side, each have their own
pool. Each hold therefore also takes the GPU's host-wide lock (`HostLock`, a pair of ``flock``-ed files per GPU
that every pool on the machine opens): shared with shared, timing alone, so no pool times while another's
worker uses the same GPU."""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

NONE, SHARED, EXCLUSIVE = 0, 1, 2
POLL_S = 0.001
OCCUPANCY = ("timed", "draining", "shared", "idle")  # the GPU's states, by what holds its lock
# what a shared hold is for: the evaluation's stages, then work outside them (`device_work`); anything else "other"
HOLDS = (
    "construct",
    "trials",
    "second_shape",
    "inputs",
    "reverify",
    "start_up",
    "release_cache",
    "problem_check",
    "other",
)


HOST_LOCKS = "KZ_GPU_LOCKS"  # the folder of the host-wide GPU locks; "off" takes none
HOST_POLL_S = 0.002
HOST_WAIT_S = 900.0  # the longest a hold waits for other processes before going on without the host-wide lock


class HostLock:
    """One GPU's readers-writer lock across every process on this machine: two files under the host's lock
    folder named by the GPU's UUID, held with ``flock`` (the kernel lets go of a dead process's hold, whatever
    killed it). Shared holds overlap; an exclusive one waits for them to end, and while it waits and holds, it
    keeps the turnstile file, which every shared hold passes through first, so new readers queue behind it and
    a timing is never starved. Pickles as its paths: each process (and each lock index in it, so threads stand
    for workers in tests) opens its own descriptors, read-only, which a read-only sandbox allows."""

    def __init__(self, path: str):
        self.path = path
        self._fds: dict[int, tuple[int, int]] = {}

    def __getstate__(self) -> dict:
        return {"path": self.path}

    def __setstate__(self, state: dict) -> None:
        self.path, self._fds = state["path"], {}

    def _files(self, me: int) -> tuple[int, int]:
        if me not in self._fds:
            self._fds[me] = (os.open(self.path + ".lock", os.O_RDONLY), os.open(self.path + ".turn", os.O_RDONLY))
        return self._fds[me]

    def acquire(self, me: int, exclusive: bool, wait_s: float = HOST_WAIT_S) -> Callable[[], None] | None:
        """Take the hold, waiting up to ``wait_s``; returns what lets go of it, or None when another process
        kept the GPU longer than that (a process that cannot exit, stuck in the driver, holds it forever; going
        on without the hold is better than a pool that never finishes, and the caller records it)."""
        main, turn = self._files(me)
        until = time.monotonic() + wait_s
        if not _flock(turn, fcntl.LOCK_EX, until):
            return None
        if not exclusive:
            fcntl.flock(turn, fcntl.LOCK_UN)
            if not _flock(main, fcntl.LOCK_SH, until):
                return None
            return lambda: fcntl.flock(main, fcntl.LOCK_UN)
        try:
            if not _flock(main, fcntl.LOCK_EX, until):
                fcntl.flock(turn, fcntl.LOCK_UN)
                return None
        except BaseException:
            fcntl.flock(turn, fcntl.LOCK_UN)
            raise

        def release() -> None:
            fcntl.flock(main, fcntl.LOCK_UN)
            fcntl.flock(turn, fcntl.LOCK_UN)

        return release


def _flock(fd: int, kind: int, until: float) -> bool:
    """``flock(fd, kind)``, polled until the monotonic time ``until``: whether it was taken."""
    while True:
        try:
            fcntl.flock(fd, kind | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= until:
                return False
            time.sleep(HOST_POLL_S)


def host_lock(gpu: str, environ=os.environ) -> tuple[HostLock | None, str]:
    """The host-wide lock of visible GPU ``gpu`` (its files made here if absent) and where it lives, or None and
    why there is none: ``KZ_GPU_LOCKS=off``, or a folder that cannot be written. The folder: ``KZ_GPU_LOCKS``,
    else ``kzcore-gpu-locks`` in the system's temporary folder, open to every user (sticky, like /tmp), so
    every user's runs on a GPU see one lock."""
    where = environ.get(HOST_LOCKS, "")
    if where.lower() == "off":
        return None, f"off ({HOST_LOCKS}=off)"
    folder = Path(where) if where else Path(tempfile.gettempdir()) / "kzcore-gpu-locks"
    path = folder / f"gpu-{gpu_identity(gpu, environ)}"
    try:
        if not folder.is_dir():
            folder.mkdir(parents=True, exist_ok=True)
            if not where:
                os.chmod(folder, 0o1777)
        for suffix in (".lock", ".turn"):
            fd = os.open(str(path) + suffix, os.O_RDONLY | os.O_CREAT, 0o666)
            os.close(fd)
    except OSError as exc:
        return None, f"off (cannot make {path}.lock: {exc.strerror or exc})"
    return HostLock(str(path)), f"{path}.lock"


def gpu_identity(gpu: str, environ=os.environ) -> str:
    """A name for visible GPU ``gpu`` that is the same in every process on the machine, whatever its
    CUDA_VISIBLE_DEVICES: the device's UUID, else its machine index."""
    from kzcore.executors.devices import physical_gpu

    try:
        import torch

        uuid = str(torch.cuda.get_device_properties(int(gpu)).uuid)
    except Exception:  # a torch without the property, or no device behind the number
        uuid = ""
    name = uuid or f"index{physical_gpu(gpu, environ)}"
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)


class DeviceLock:
    def __init__(self, ctx, n_workers: int, host: HostLock | None = None):
        self.host = host  # the GPU's host-wide lock, taken inside this one's holds (None: this pool only)
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
            with self._across_runs(me, exclusive=False) as across:
                yield across
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
            with self._across_runs(me, exclusive=True) as across:
                yield across
        finally:
            with self.mutex:
                self._account()
                self.writer.value = 0
                self.turn.value += 1
                self.holding[me] = NONE

    @contextlib.contextmanager
    def _across_runs(self, me: int, exclusive: bool):
        """The host-wide hold of the same kind, taken once this pool's is held (always in this order, so no
        two holds wait on each other); while it waits, ``is_waiting`` says so, and the job's clock stops.
        Yields whether the GPU is held across runs: False only when the host-wide hold was given up on
        (`HostLock.acquire`)."""
        if self.host is None:
            yield True
            return
        self.waiting[me] = 1
        try:
            release = self.host.acquire(me, exclusive)
        finally:
            self.waiting[me] = 0
        try:
            yield release is not None
        finally:
            if release is not None:
                release()

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

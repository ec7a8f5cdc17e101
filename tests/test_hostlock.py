"""The GPU's host-wide lock (`devicelock.HostLock`): two pools (two runs) on one GPU never time while the other
uses it, a waiting timing keeps the other run's new readers out, a dead holder lets go, a holder that never
lets go is given up on and recorded, and the lock's files are made where the user can see them."""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time

from kzcore.executors import devicelock
from kzcore.executors.devicelock import DeviceLock, HostLock, host_lock
from tests import fakes_lock

CTX = mp.get_context("spawn")


def two_pools(tmp_path, n: int = 2) -> tuple[DeviceLock, DeviceLock]:
    """Two runs' locks of one GPU: each its own pool lock, both on the same host-wide files."""
    host, where = host_lock("0", environ={devicelock.HOST_LOCKS: str(tmp_path)})
    assert host is not None and where == f"{host.path}.lock"
    return DeviceLock(CTX, n, HostLock(host.path)), DeviceLock(CTX, n, HostLock(host.path))


def in_thread(hold, log: list, tag: str, seconds: float = 0.0) -> threading.Thread:
    def run():
        with hold:
            log.append((tag, "in", time.monotonic()))
            time.sleep(seconds)
            log.append((tag, "out", time.monotonic()))

    t = threading.Thread(target=run)
    t.start()
    return t


def test_a_run_never_times_while_another_run_uses_the_gpu(tmp_path):
    """Run B's timing waits for run A's shared hold (a correctness trial) to end, and run A's next shared hold
    waits for B's timing; two shared holds of different runs overlap."""
    a, b = two_pools(tmp_path)
    log: list = []
    with a.shared(0) as across:
        assert across is True
        timing = in_thread(b.exclusive(0), log, "B times", 0.2)
        time.sleep(0.15)
        assert log == [] and b.is_waiting(0)  # waiting across runs stops the job's clock, as in-pool waits do
        assert b.writer.value == 1  # it holds its own pool's lock: the host-wide one comes second
    timing.join(5)
    assert [e[:2] for e in log] == [("B times", "in"), ("B times", "out")]

    log.clear()
    hold_b = in_thread(b.exclusive(0), log, "B times", 0.3)
    time.sleep(0.05)
    trial = in_thread(a.shared(1), log, "A trial", 0.0)
    hold_b.join(5)
    trial.join(5)
    assert [e[:2] for e in log] == [("B times", "in"), ("B times", "out"), ("A trial", "in"), ("A trial", "out")]

    both = threading.Barrier(2, timeout=5)

    def overlapping(lock):
        with lock.shared(0):
            both.wait()  # BrokenBarrierError unless both runs' readers are in together

    threads = [threading.Thread(target=overlapping, args=(lock,)) for lock in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert not both.broken


def test_a_waiting_timing_keeps_the_other_runs_new_readers_out(tmp_path):
    """A's trial holds the GPU; B's timing waits for it; A's next trial, asked for after B's timing, goes in
    only once B has timed: a stream of one run's trials cannot starve the other run's timings."""
    a, b = two_pools(tmp_path)
    log: list = []
    first = in_thread(a.shared(0), log, "A trial 1", 0.3)
    time.sleep(0.05)
    timing = in_thread(b.exclusive(0), log, "B times", 0.1)
    time.sleep(0.05)
    second = in_thread(a.shared(1), log, "A trial 2", 0.0)
    for t in (first, timing, second):
        t.join(5)
    order = [e[:2] for e in sorted(log, key=lambda e: e[2])]
    assert order.index(("B times", "in")) < order.index(("A trial 2", "in"))
    assert order.index(("A trial 1", "out")) < order.index(("B times", "in"))


def test_a_killed_holder_lets_go_of_the_host_wide_lock(tmp_path):
    """A worker of another run killed while it times (SIGKILL: nothing of its own runs) leaves no hold behind:
    the kernel drops a dead process's flock."""
    a, b = two_pools(tmp_path, n=1)
    ready = CTX.Event()
    proc = CTX.Process(target=fakes_lock.hold_exclusive_forever, args=(a, 0, ready), daemon=True)
    proc.start()
    try:
        assert ready.wait(60)
        released = b.host.acquire(0, exclusive=True, wait_s=0.2)
        assert released is None  # held by the other run
        proc.kill()
        proc.join(10)
        released = b.host.acquire(0, exclusive=True, wait_s=5)
        assert released is not None
        released()
    finally:
        proc.kill()


def test_a_hold_kept_past_the_wait_is_given_up_on_and_recorded(tmp_path, monkeypatch):
    """A process that never lets go (stuck in the driver) must not hang the pool: past ``HOST_WAIT_S`` the hold
    goes on without the host-wide lock, says so, and the stage records it in the result's seconds."""
    from kzcore.evaluate.stage import EvaluationState

    a, b = two_pools(tmp_path, n=1)
    monkeypatch.setattr(devicelock, "HOST_WAIT_S", 0.1)
    monkeypatch.setattr(HostLock.acquire, "__defaults__", (0.1,))
    release = a.host.acquire(0, exclusive=True)
    assert release is not None
    try:
        t0 = time.monotonic()
        with b.exclusive(0) as across:
            assert across is False and b.writer.value == 1
        assert 0.1 <= time.monotonic() - t0 < 2
        assert b.writer.value == 0 and not b.is_waiting(0)

        state = EvaluationState.__new__(EvaluationState)
        state.gpu_lock, state.lock_index = b, 0
        state.clock = type("Clock", (), {"seconds": {}})()
        with state._held("shared", "trials"):
            pass
        assert state.clock.seconds["lock.shared_not_across_runs"] == 1
    finally:
        release()
    with b.exclusive(0) as across:  # once it lets go, the hold is across runs again
        assert across is True


def test_the_lock_files_live_where_the_user_can_see_them_or_the_pool_says_why_not(tmp_path):
    """``KZ_GPU_LOCKS``: the folder (made if absent), or ``off``; a folder that cannot be written leaves the pool
    without a host-wide lock, and the reason is what the pool records. The name does not depend on
    CUDA_VISIBLE_DEVICES where the GPU has a UUID; without one (here, no GPU), it is the machine's index."""
    folder = tmp_path / "locks"
    host, where = host_lock("1", environ={devicelock.HOST_LOCKS: str(folder), "CUDA_VISIBLE_DEVICES": "4,6"})
    assert host is not None and where == str(folder / "gpu-index6.lock")
    assert (folder / "gpu-index6.lock").exists() and (folder / "gpu-index6.turn").exists()
    assert host_lock("0", environ={devicelock.HOST_LOCKS: "off"}) == (None, "off (KZ_GPU_LOCKS=off)")
    blocked = tmp_path / "file"
    blocked.write_text("")
    none, why = host_lock("0", environ={devicelock.HOST_LOCKS: str(blocked / "sub")})
    assert none is None and why.startswith(f"off (cannot make {blocked / 'sub'}/gpu-") and why.endswith(")")

    import pickle

    again = pickle.loads(pickle.dumps(host))  # a worker's copy: the paths only, its own descriptors
    assert again.path == host.path and again._fds == {}
    release = again.acquire(0, exclusive=False)
    assert release is not None
    release()
    assert os.path.getsize(folder / "gpu-index6.lock") == 0  # held, never written

"""The per-GPU readers-writer lock: readers overlap, a writer runs alone, and a killed holder's share is
released so the GPU's other workers never deadlock."""

from __future__ import annotations

import multiprocessing as mp
import threading
import time

import pytest

from kzcore.executors.devicelock import EXCLUSIVE, SHARED, DeviceLock
from tests import fakes_lock

CTX = mp.get_context("spawn")


def test_readers_overlap_and_writer_excludes_them():
    lock = DeviceLock(CTX, 3)
    events = []
    both_in = threading.Barrier(2, timeout=5)

    def reader(me):
        with lock.shared(me):
            both_in.wait()  # fails with BrokenBarrierError unless both readers are inside together
            events.append(("r", me, time.monotonic()))
            time.sleep(0.1)

    def writer():
        time.sleep(0.02)
        with lock.exclusive(2):
            events.append(("w", 2, time.monotonic()))
            assert lock.readers.value == 0

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(2)] + [threading.Thread(target=writer)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    kinds = [e[0] for e in sorted(events, key=lambda e: e[2])]
    assert kinds == ["r", "r", "w"]


def test_waiting_writer_blocks_new_readers():
    lock = DeviceLock(CTX, 3)
    order = []

    def run(ctx, tag):
        with ctx:
            order.append(tag)

    with lock.shared(0):
        w = threading.Thread(target=run, args=(lock.exclusive(1), "w"))
        w.start()
        time.sleep(0.05)
        assert lock.is_waiting(1) and lock.writer.value == 1
        r = threading.Thread(target=run, args=(lock.shared(2), "r"))
        r.start()
        time.sleep(0.05)
        assert order == [] and lock.is_waiting(2)
    w.join(5)
    r.join(5)
    assert order == ["w", "r"]


@pytest.mark.parametrize(
    "target,state", [(fakes_lock.hold_shared_forever, SHARED), (fakes_lock.hold_exclusive_forever, EXCLUSIVE)]
)
def test_release_dead_frees_what_a_killed_worker_held(target, state):
    lock = DeviceLock(CTX, 2)
    ready = CTX.Event()
    proc = CTX.Process(target=target, args=(lock, 0, ready), daemon=True)
    proc.start()
    assert ready.wait(60)
    assert lock.holding[0] == state
    proc.kill()
    proc.join(10)
    assert lock.release_dead(0)
    got = threading.Event()

    def take():
        with lock.exclusive(1):
            got.set()

    threading.Thread(target=take, daemon=True).start()
    assert got.wait(5), "the GPU stayed locked after its holder died"
    assert lock.readers.value == 0


def test_worker_gpus_are_the_machines_gpus_that_kz_was_given(monkeypatch):
    from kzcore.executors.local import physical_gpu

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert [physical_gpu("0"), physical_gpu("1")] == ["2", "3"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aaaa, GPU-bbbb")
    assert physical_gpu("1") == "GPU-bbbb"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert physical_gpu("1") == "1"

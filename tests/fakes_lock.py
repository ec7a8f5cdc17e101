"""Helpers run in spawned processes by tests/test_devicelock.py (must be importable)."""

import time


def hold_shared_forever(lock, me, ready):
    with lock.shared(me):
        ready.set()
        time.sleep(3600)


def hold_exclusive_forever(lock, me, ready):
    with lock.exclusive(me):
        ready.set()
        time.sleep(3600)


def wait_shared_forever(lock, me, ready):
    ready.set()
    with lock.shared(me):  # waits behind the test's timing; killed before it gets in
        time.sleep(3600)

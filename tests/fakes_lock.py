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

"""The precompile's load: Triton's launcher is built off the GPU lock, the binary loaded under it (shared)."""

import multiprocessing
import types

from kz_triton import runtime
from kzcore.executors import devicelock
from kzcore.executors.devicelock import NONE, SHARED, DeviceLock


def test_the_launcher_is_built_off_the_lock_and_the_binary_loaded_under_it(monkeypatch):
    lock = DeviceLock(multiprocessing.get_context("spawn"), 1)
    monkeypatch.setattr(devicelock, "_bound", None)
    devicelock.bind_worker(lock, 0)
    seen = []

    class Launcher:
        def __init__(self, src, metadata):
            seen.append(("launcher", lock.holding[0], src, metadata))

    class Compiled:
        module = None
        src, metadata = "SRC", "META"

        def _init_handles(self):
            seen.append(("load", lock.holding[0]))
            self.module = object()

    import triton.runtime

    monkeypatch.setattr(
        triton.runtime, "driver", types.SimpleNamespace(active=types.SimpleNamespace(launcher_cls=Launcher))
    )
    runtime._load(Compiled())
    assert seen == [("launcher", NONE, "SRC", "META"), ("load", SHARED)]
    assert lock.holding[0] == NONE


def test_a_loaded_kernel_or_a_triton_without_the_api_goes_straight_to_the_load(monkeypatch):
    calls = []

    class Loaded:
        module = object()

        def _init_handles(self):
            calls.append("load")

    import triton.runtime

    monkeypatch.setattr(triton.runtime, "driver", types.SimpleNamespace(active=types.SimpleNamespace()))
    runtime._load(Loaded())  # no launcher_cls either: nothing raised, the load still runs
    assert calls == ["load"]

"""The precompile's load: Triton's launcher is built off the GPU lock; the binary is loaded by the first launch,
inside the correctness trials' shared hold, not by a hold of its own."""

import multiprocessing
import types

from kz_triton import runtime
from kzcore.executors import devicelock
from kzcore.executors.devicelock import NONE, DeviceLock


def test_the_launcher_is_built_off_the_lock_and_the_binary_left_to_the_first_launch(monkeypatch):
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
    assert seen == [("launcher", NONE, "SRC", "META")]
    assert lock.holding[0] == NONE and not lock.is_waiting(0)


def test_a_loaded_kernel_or_a_triton_without_the_api_is_left_to_its_first_launch(monkeypatch):
    calls = []

    class Kernel:
        module = None

        def _init_handles(self):
            calls.append("load")

    class Loaded(Kernel):
        module = object()

    import triton.runtime

    monkeypatch.setattr(triton.runtime, "driver", types.SimpleNamespace(active=types.SimpleNamespace()))
    runtime._load(Loaded())
    runtime._load(Kernel())  # no launcher_cls: nothing raised, the first launch builds what it needs
    assert calls == []

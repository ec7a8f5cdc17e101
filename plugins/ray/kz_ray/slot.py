"""One evaluation slot, as it runs inside a Ray actor: a kzcore LocalPool of one worker on the actor's node.

The pool gives the slot the local executor's guarantees unchanged (spawned worker, scrubbed environment,
per-job deadline, replacement after a crash, hang or poisoned CUDA context), so a candidate that segfaults or
spins costs a worker, never the actor. Two differences from a plain LocalPool: the worker runs on the GPU
Ray assigned to the actor, and it dies with the actor (a killed actor must not leave a spinning candidate
behind on its node). ray is not imported here at module level: worker processes import this module too.
"""

from __future__ import annotations

import ctypes
import multiprocessing.context
import os
import signal
import sys

from kzcore import EvalConfig, EvalResult, LocalPool

PR_SET_PDEATHSIG = 1  # linux/prctl.h


class LifelineProcess(multiprocessing.context.SpawnProcess):
    """A spawned process that the kernel kills (SIGKILL) as soon as the process that started it dies."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._parent_pid = os.getpid()

    def run(self):
        if sys.platform == "linux":
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != self._parent_pid:  # the parent died before the lifeline was set
                os._exit(1)
        super().run()


class LifelineContext(multiprocessing.context.SpawnContext):
    Process = LifelineProcess


class SlotPool(LocalPool):
    """A LocalPool whose workers use the GPUs Ray gave this process and die with it."""

    def __init__(self, workers: int | None = None, config: EvalConfig | None = None, plugins: list[str] | None = None):
        super().__init__(workers=workers, config=config, plugins=plugins)
        self.ctx = LifelineContext()


class SlotActor:
    """The body of one Ray actor (``ray.remote`` is applied by the driver): start a one-worker pool, then
    evaluate the jobs sent to it one at a time."""

    def __init__(self, config: EvalConfig, plugins: list[str]):
        self.pool = SlotPool(workers=1, config=config, plugins=plugins).start()

    def info(self) -> dict:
        """What the worker reported at start-up (torch, device name, ...), plus where this slot runs."""
        import ray

        return dict(self.pool.info, node=ray.util.get_node_ip_address(), actor_pid=os.getpid())

    def evaluate(self, job) -> EvalResult:
        (result,) = self.pool.map([job])
        return result

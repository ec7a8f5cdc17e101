"""A worker plugin for plugins/ray/tests/test_ray.py: it kills the process that started the worker (under Ray, the
slot's actor) when a forward runs a model marked ``kz_kill_my_actor``. Candidate code itself may not
signal other processes (the worker's process guard), so the test's actor death comes from plugin code."""

from __future__ import annotations

import os
import signal

from kzcore import hookimpl


class ActorKiller:
    @hookimpl
    def kz_run_forward(self, language, model, inputs):
        if getattr(model, "kz_kill_my_actor", False):
            os.kill(os.getppid(), signal.SIGKILL)
        return None


ACTOR_KILLER = ActorKiller()

"""The ``ray`` executor, driver side: start one Ray actor per evaluation slot (kz_ray.slot), keep a few jobs
queued on each, and stream results back as they finish (``ray.wait``). An actor that dies (its node lost,
its process killed) is replaced, and the job it was running gets one more try before it is filed as a
``runtime_error``; jobs only queued behind it are simply sent again. No job is ever dropped: when no slot
can be restarted at all, the run stops with an error and a re-run resumes from the results file."""

from __future__ import annotations

import collections
import logging
import os
import time
from collections.abc import Iterable, Iterator

import attrs

from kz_ray.slot import SlotActor
from kzcore import EvalConfig, EvalJob, EvalResult, KzError, Status, get_plugin_manager, plugin_specs

IN_FLIGHT = 2  # jobs queued on one actor: the one running and the next, so an actor never waits on the driver
ATTEMPTS = 2  # a job whose actor dies under it this many times is filed as runtime_error
START_TIMEOUT_S = 300.0  # an actor has loaded torch and the plugins, and its worker is up, within this
MAX_RESTARTS = 3  # replacements of one slot's actor before the slot is given up
POLL_S = 5.0


class _Slot:
    """One actor and the jobs queued on it. ``ready`` is the actor's start-up reply while it is starting."""

    def __init__(self, index: int, actor):
        self.index = index
        self.actor = actor
        self.ready = actor.info.remote()
        self.deadline = time.monotonic() + START_TIMEOUT_S
        self.info: dict = {}
        self.queued: dict = {}  # ObjectRef -> (job, attempts so far), in submission (= execution) order
        self.restarts = 0
        self.retired = False

    @property
    def serving(self) -> bool:
        return self.ready is None and not self.retired


class RayPool:
    """``RayPool(workers=None, config=EvalConfig(), plugins=None, address=None)``; ``map(jobs)`` then ``close()``.

    ``address`` (default ``$RAY_ADDRESS``) names a cluster to join; without one a local Ray instance with
    ``workers`` CPUs is started, and shut down again by ``close()``. When the caller already called
    ``ray.init``, that connection is used and left open. Slots: ``workers``, or one per GPU of the cluster,
    or half its CPUs when it has no GPU (the local executor's default on one machine).
    """

    def __init__(
        self,
        workers: int | None = None,
        config: EvalConfig | None = None,
        plugins: list[str] | None = None,
        address: str | None = None,
        in_flight: int = IN_FLIGHT,
    ):
        self.workers = workers
        self.config = config or EvalConfig()
        self.specs = plugins if plugins is not None else plugin_specs(get_plugin_manager())
        self.address = address or os.environ.get("RAY_ADDRESS") or None
        self.in_flight = max(1, in_flight)
        self.slots: list[_Slot] = []
        self.info: dict = {}
        self.replaced = 0
        self._owns_ray = False
        self._actor_class = None
        self._slot_config = self.config

    # -- cluster and actors -----------------------------------------------------------------------
    def _connect(self) -> None:
        import ray

        if ray.is_initialized():
            return
        try:
            if self.address:
                ray.init(address=self.address, logging_level=logging.WARNING)
            else:
                cpus = self.workers or max(1, (os.cpu_count() or 2) // 2)
                ray.init(address="local", num_cpus=cpus, include_dashboard=False, logging_level=logging.WARNING)
                self._owns_ray = True
        except (ConnectionError, ValueError, RuntimeError) as exc:
            where = self.address or "a new local instance"
            raise KzError(f"could not start or join the Ray cluster ({where}): {exc}") from exc

    def _plan(self) -> tuple[int, dict]:
        """How many slots, on which device, and what each actor asks Ray for."""
        import ray

        total = ray.cluster_resources()
        cpus, gpus = int(total.get("CPU", 0)), int(total.get("GPU", 0))
        device = self.config.device
        if device == "auto":
            device = "cuda" if gpus else "cpu"
        if device == "cuda" and not gpus:
            raise KzError("--device cuda was asked for, but the Ray cluster has no GPU")
        if device == "cuda":
            n, need = self.workers or gpus, {"num_gpus": 1, "num_cpus": 1}
        else:
            n, need = self.workers or (cpus if self._owns_ray else max(1, cpus // 2)), {"num_cpus": 1}
        if n > cpus or (device == "cuda" and n > gpus):
            raise KzError(
                f"{n} evaluation slot(s) on {device} need {n} {'GPUs and CPUs' if device == 'cuda' else 'CPUs'}; "
                f"the Ray cluster has {cpus} CPU(s) and {gpus} GPU(s) (ask for fewer with --workers)"
            )
        # workers resolve "auto" on their own node; a CPU slot on a GPU node must stay on the CPU
        self._slot_config = attrs.evolve(self.config, device=device)
        return n, need

    def _launch(self, index: int) -> _Slot:
        return _Slot(index, self._actor_class.remote(self._slot_config, self.specs))

    def start(self) -> RayPool:
        """Connect to the cluster, start every slot's actor and wait until each worker is up."""
        if self.slots:
            return self
        import ray

        self._connect()
        n, need = self._plan()
        self._actor_class = ray.remote(SlotActor).options(**need, max_restarts=0)
        self.slots = [self._launch(i) for i in range(n)]
        ready, _ = ray.wait([s.ready for s in self.slots], num_returns=n, timeout=START_TIMEOUT_S)
        try:
            for slot in self.slots:
                if slot.ready not in ready:
                    raise KzError(
                        f"only {len(ready)} of {n} Ray evaluation slots started within {START_TIMEOUT_S:.0f} s "
                        "(is the cluster busy, or short of CPUs/GPUs?)"
                    )
                try:
                    slot.info = ray.get(slot.ready)
                except ray.exceptions.RayError as exc:
                    raise KzError(f"a Ray evaluation slot failed to start: {_reason(exc)}") from None
                slot.ready = None
        except KzError:
            self.close()
            raise
        self.info = self._describe()
        return self

    def _describe(self) -> dict:
        import ray

        first = dict(self.slots[0].info)
        first.pop("actor_pid", None)
        first.pop("pid", None)
        nodes = sorted({s.info.get("node", "") for s in self.slots})
        return {**first, "executor": "ray", "ray": ray.__version__, "slots": len(self.slots), "nodes": nodes}

    def _restart(self, slot: _Slot) -> None:
        """Kill a slot's actor and start another in its place (Ray puts it wherever resources are free)."""
        import ray

        try:
            ray.kill(slot.actor, no_restart=True)
        except Exception:  # already gone
            pass
        if slot.restarts >= MAX_RESTARTS:
            slot.retired = True
            return
        replacement = self._launch(slot.index)
        replacement.restarts = slot.restarts + 1
        self.slots[slot.index] = replacement
        self.replaced += 1

    def close(self) -> None:
        """Kill every actor (their workers die with them); shut Ray down if this pool started it."""
        import ray

        for slot in self.slots:
            try:
                ray.kill(slot.actor, no_restart=True)
            except Exception:
                pass
        self.slots = []
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
            self._owns_ray = False

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()

    # -- scheduling -------------------------------------------------------------------------------
    def map(self, jobs: Iterable[EvalJob]) -> Iterator[EvalResult]:
        """Evaluate ``jobs``; yield each result as soon as it is ready (not in submission order)."""
        import ray

        self.start()
        waiting = collections.deque((job, 0) for job in jobs)
        while waiting or any(s.queued for s in self.slots):
            self._submit(waiting)
            refs = [ref for s in self.slots for ref in s.queued]
            refs += [s.ready for s in self.slots if s.ready is not None and not s.retired]
            if not refs:
                raise KzError(
                    "every Ray evaluation slot died and none could be restarted; "
                    "results so far are saved, re-run the command to resume"
                )
            done, _ = ray.wait(refs, num_returns=1, timeout=POLL_S)
            for ref in done:
                yield from self._settle(ref, waiting)
            self._check_starting()

    def _submit(self, waiting: collections.deque) -> None:
        for slot in self.slots:
            while slot.serving and waiting and len(slot.queued) < self.in_flight:
                job, attempts = waiting.popleft()
                slot.queued[slot.actor.evaluate.remote(_portable(job))] = (job, attempts)

    def _settle(self, ref, waiting: collections.deque) -> Iterator[EvalResult]:
        import ray

        slot = next((s for s in self.slots if ref in s.queued or _same(ref, s.ready)), None)
        if slot is None:  # a reply from an actor already replaced: its job was handled then
            return
        if _same(ref, slot.ready):
            try:
                slot.info = ray.get(ref)
                slot.ready = None
            except ray.exceptions.RayError:
                self._restart(slot)
            return
        try:
            result = ray.get(ref)
        except ray.exceptions.RayError as exc:
            yield from self._actor_lost(slot, exc, waiting)
        else:
            del slot.queued[ref]
            yield result

    def _actor_lost(self, slot: _Slot, exc: Exception, waiting: collections.deque) -> Iterator[EvalResult]:
        """The actor died (or its pool broke): salvage finished replies, retry the job it was running once,
        and send the jobs queued behind it again."""
        lost = list(slot.queued.items())
        slot.queued.clear()
        self._restart(slot)
        blamed = False
        again = []
        for ref, (job, attempts) in lost:
            result = _finished(ref)
            if result is not None:  # it finished before the actor went
                yield result
                continue
            if blamed:  # only queued behind the job that was running: not its fault
                again.append((job, attempts))
                continue
            blamed = True
            if attempts + 1 >= ATTEMPTS:
                yield _lost_result(job, attempts + 1, exc)
            else:
                again.append((job, attempts + 1))
        waiting.extendleft(reversed(again))

    def _check_starting(self) -> None:
        now = time.monotonic()
        for slot in list(self.slots):
            if slot.ready is not None and not slot.retired and now >= slot.deadline:
                self._restart(slot)


def _portable(job):
    """The job as shipped to another machine: the problem travels as source, never as a local path (a node
    with a different file at the same path must not evaluate that one)."""
    problem = getattr(job, "problem", None)
    if problem is not None and problem.path:
        return attrs.evolve(job, problem=attrs.evolve(problem, path=None))
    return job


def _finished(ref):
    """The reply behind ``ref`` if it is already there and is a result, else None."""
    import ray

    if not ray.wait([ref], timeout=0)[0]:
        return None
    try:
        return ray.get(ref)
    except ray.exceptions.RayError:
        return None


def _same(ref, other) -> bool:
    return other is not None and ref == other


def _reason(exc: Exception) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[-1] if lines else ""
    return f"{type(exc).__name__}: {text}"[:500]


def _lost_result(job, attempts: int, exc: Exception):
    message = (
        f"the Ray actor evaluating this candidate died {attempts} times ({_reason(exc)}); "
        "the candidate was not evaluated to the end"
    )
    return job.failure(Status.RUNTIME_ERROR, message)

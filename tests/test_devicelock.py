"""The per-GPU readers-writer lock: readers overlap, a writer runs alone, and a killed holder's share is
released so the GPU's other workers never deadlock."""

from __future__ import annotations

import multiprocessing as mp
import threading
import time

import pytest

from kzcore.executors.devicelock import EXCLUSIVE, HOLDS, SHARED, DeviceLock
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


def test_readers_waiting_when_a_timing_ends_go_in_before_the_next_timing():
    """Phase-fair turns: a reader that waited out one timing is not made to wait out the next writer's too."""
    lock = DeviceLock(CTX, 3)
    order = []

    def run(ctx, tag, hold=0.0):
        with ctx:
            order.append(tag)
            time.sleep(hold)

    with lock.exclusive(0):
        r = threading.Thread(target=run, args=(lock.shared(1), "r", 0.1))
        r.start()
        time.sleep(0.05)
        w = threading.Thread(target=run, args=(lock.exclusive(2), "w"))
        w.start()
        time.sleep(0.05)
        assert order == [] and lock.is_waiting(1) and lock.is_waiting(2)
    r.join(5)
    w.join(5)
    assert order == ["r", "w"]


def test_many_workers_taking_random_turns_never_overlap_a_timing_and_all_finish():
    """Four workers, each a job's sequence (shared holds with work between them, then a timing), many jobs: a
    timing never overlaps another hold, and every worker finishes (no turn is owed for ever)."""
    import random

    lock = DeviceLock(CTX, 4)
    inside = {"shared": 0, "exclusive": 0}
    guard = threading.Lock()
    overlaps, done = [], []

    def enter(kind):
        with guard:
            inside[kind] += 1
            if inside["exclusive"] > 1 or (inside["exclusive"] and inside["shared"]):
                overlaps.append(dict(inside))

    def leave(kind):
        with guard:
            inside[kind] -= 1

    def worker(me):
        rng = random.Random(me)
        for _ in range(25):
            for _ in range(rng.randint(1, 4)):  # the job's shared stages, host work between them
                time.sleep(rng.uniform(0, 0.002))
                with lock.shared(me):
                    enter("shared")
                    time.sleep(rng.uniform(0, 0.002))
                    leave("shared")
            with lock.exclusive(me):
                enter("exclusive")
                time.sleep(rng.uniform(0, 0.003))
                leave("exclusive")
        done.append(me)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(done) == [0, 1, 2, 3], "a worker never finished"
    assert overlaps == []
    spent = lock.occupancy()
    assert spent["timed"] > 0 and spent["shared"] + spent["draining"] > 0


def test_occupancy_books_the_gpu_time_to_what_held_the_lock():
    """A reader holds 0.2 s, a writer claims after 0.1 s (drains the rest), times 0.2 s, then nobody holds it."""
    lock = DeviceLock(CTX, 2)
    lock.occupancy(reset=True)

    def writer():
        time.sleep(0.1)
        with lock.exclusive(1):
            time.sleep(0.2)

    w = threading.Thread(target=writer)
    with lock.shared(0):
        w.start()
        time.sleep(0.2)
    w.join(5)
    time.sleep(0.1)
    spent = lock.occupancy()
    assert set(spent) == {"timed", "draining", "shared", "idle"}
    assert spent["shared"] == pytest.approx(0.1, abs=0.05)
    assert spent["draining"] == pytest.approx(0.1, abs=0.05)
    assert spent["timed"] == pytest.approx(0.2, abs=0.05)
    assert spent["idle"] == pytest.approx(0.1, abs=0.05)
    assert lock.occupancy(reset=True)["timed"] > 0 and lock.occupancy()["timed"] == 0


def test_draining_is_split_among_the_shared_holds_a_timing_waited_for():
    """A writer waits 0.2 s for two readers: 0.1 s for both (half each), then 0.1 s for the longer one alone;
    ``drained_by`` books it by what each hold was for, sums to the draining, and resets with the occupancy."""
    lock = DeviceLock(CTX, 3)
    lock.occupancy(reset=True)
    claimed = threading.Event()

    def writer():
        with lock.exclusive(2):
            claimed.set()

    with lock.shared(0, "trials"):
        with lock.shared(1, "release_cache"):
            w = threading.Thread(target=writer)
            w.start()
            time.sleep(0.1)
        time.sleep(0.1)
    w.join(5)
    assert claimed.is_set()
    drained, draining = lock.drained_by(), lock.occupancy()["draining"]
    assert set(drained) == {"trials", "release_cache"}
    assert drained["release_cache"] == pytest.approx(0.05, abs=0.03)  # half of the stretch both were open
    assert drained["trials"] - drained["release_cache"] == pytest.approx(0.1, abs=0.05)  # and its own stretch
    assert sum(drained.values()) == pytest.approx(draining, abs=0.005)
    with lock.shared(0, "not one of HOLDS"):
        assert lock.hold_what[0] == HOLDS.index("other")
    lock.occupancy(reset=True)
    assert lock.drained_by() == {}


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


def test_a_reader_killed_while_its_turn_was_owed_does_not_keep_the_next_timing_out():
    """Phase-fair turns owe a reader that waited out a timing the next go; a worker killed while so owed is
    released with the rest of what it had, so the next writer does not wait for it for ever."""
    lock = DeviceLock(CTX, 3)
    ready = CTX.Event()
    with lock.exclusive(1):
        proc = CTX.Process(target=fakes_lock.wait_shared_forever, args=(lock, 0, ready), daemon=True)
        proc.start()
        assert ready.wait(60)
        deadline = time.monotonic() + 10
        while not lock.is_waiting(0) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert lock.is_waiting(0)
        proc.kill()
        proc.join(10)
    assert lock._readers_owed()  # the dead reader is owed the turn the timing's end gave it
    assert lock.release_dead(0)
    got = threading.Event()

    def take():
        with lock.exclusive(2):
            got.set()

    threading.Thread(target=take, daemon=True).start()
    assert got.wait(5), "a dead reader's owed turn kept the GPU from the next timing"


def test_worker_gpus_are_the_machines_gpus_that_kz_was_given(monkeypatch):
    from kzcore.executors.local import physical_gpu

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert [physical_gpu("0"), physical_gpu("1")] == ["2", "3"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aaaa, GPU-bbbb")
    assert physical_gpu("1") == "GPU-bbbb"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert physical_gpu("1") == "1"


def test_one_process_per_gpu_pins_its_pool_to_its_own_gpu():
    from kzcore.executors.local import pool_gpus

    assert pool_gpus(8, {}) == [str(i) for i in range(8)]  # kz eval, or one training process: every GPU
    assert pool_gpus(8, {"LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "8"}) == ["3"]
    assert pool_gpus(2, {"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}) == ["0", "1"]  # a launcher with 1 process
    assert pool_gpus(1, {"LOCAL_RANK": "5", "LOCAL_WORLD_SIZE": "8"}) == ["0"]  # visible devices already narrowed
    import pytest

    from kzcore.errors import KzError

    with pytest.raises(KzError, match="LOCAL_RANK=4 but this process sees only 2 GPU"):
        pool_gpus(2, {"LOCAL_RANK": "4", "LOCAL_WORLD_SIZE": "8"})


def test_a_training_process_pool_puts_every_worker_on_its_rank_gpu(monkeypatch):
    """Under `accelerate launch` with 8 processes on 8 GPUs, rank 3's evaluator workers all run on GPU 3 (the
    machine's GPU 3 as CUDA_VISIBLE_DEVICES names it), not spread over all eight."""
    from kzcore.executors import local
    from kzcore.types import EvalConfig

    monkeypatch.setattr(local, "resolve_device", lambda device: "cuda")
    monkeypatch.setattr(local, "gpu_count", lambda: 8)
    monkeypatch.setenv("LOCAL_RANK", "3")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,5,4,3,6,7")
    pool = local.LocalPool(config=EvalConfig(workers_per_gpu=2), plugins=[])
    assert pool.slots == ["3", "3"]
    assert pool._env(pool.slots[0])["CUDA_VISIBLE_DEVICES"] == "5"
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert local.LocalPool(config=EvalConfig(workers_per_gpu=1), plugins=[]).slots == [str(i) for i in range(8)]


def test_device_work_waits_for_a_timing_and_never_holds_twice():
    """``device_work`` (a worker's device work outside the stages' locks: start-up, returning cached memory,
    loading a kernel) takes its GPU's lock shared, so it waits while another worker times; inside a hold of
    its own (a stage's) it takes nothing more, so a writer waiting meanwhile cannot deadlock it; unbound (no
    GPU lock) it is a no-op."""
    from kzcore.executors import devicelock

    lock = DeviceLock(CTX, 2)
    try:
        devicelock.bind_worker(None, 0)
        with devicelock.device_work():
            assert lock.readers.value == 0  # unbound: nothing taken
        devicelock.bind_worker(lock, 0)
        with devicelock.device_work("release_cache"):
            assert lock.holding[0] == SHARED and lock.readers.value == 1
            assert HOLDS[lock.hold_what[0]] == "release_cache"
        assert lock.holding[0] == 0 and lock.readers.value == 0

        entered = []
        timing = threading.Event()

        def other_worker_times():
            with lock.exclusive(1):
                timing.set()
                time.sleep(0.2)
                entered.append(("timing over", time.monotonic()))

        t = threading.Thread(target=other_worker_times)
        t.start()
        assert timing.wait(5)
        with devicelock.device_work():
            entered.append(("device work", time.monotonic()))
        t.join(5)
        assert [e[0] for e in sorted(entered, key=lambda e: e[1])] == ["timing over", "device work"]

        held = []

        def waiting_writer():
            hold = lock.exclusive(1)
            hold.__enter__()
            held.append(hold)

        with lock.shared(0):  # a stage's hold: device_work inside it takes no second share
            writer = threading.Thread(target=waiting_writer)
            writer.start()
            time.sleep(0.05)  # the writer now waits (its flag set): a second share would wait forever
            assert lock.writer.value == 1 and not held
            with devicelock.device_work():
                assert lock.readers.value == 1
        writer.join(5)
        assert held and lock.holding[1] == EXCLUSIVE  # the writer got the GPU once the stage let go
        held[0].__exit__(None, None, None)
    finally:
        devicelock.bind_worker(None, 0)


class RecordingLock(DeviceLock):
    """A DeviceLock that notes each hold it grants, in order."""

    def __init__(self, ctx, n_workers):
        super().__init__(ctx, n_workers)
        self.holds: list[str] = []

    def shared(self, me, what="other"):
        self.holds.append(f"shared {what}")
        return super().shared(me, what)

    def exclusive(self, me):
        self.holds.append("exclusive")
        return super().exclusive(me)


def test_an_evaluation_files_the_seconds_it_waited_for_and_held_the_gpu(plugins, tmp_path):
    """Shared holds for the models, each trial (a timing waits for one trial, not all of them), the tamper
    watch's values check after the trials, the second shape and the timing's inputs, then the timing alone; what
    each kind of hold cost is in the result's stages (the throughput bench sums them)."""
    from kzcore.evaluate.pipeline import evaluate_job
    from kzcore.types import Candidate, EvalConfig, EvalJob, Problem, Status
    from tests.test_inputs import PY_RELU, RELU_OF_RAND

    lock = RecordingLock(CTX, 1)
    problem = Problem(name="relu_of_rand", source=RELU_OF_RAND, level=1)
    candidate = Candidate(problem=problem.name, language="python", level=1, source=PY_RELU)
    config = EvalConfig(device="cpu", trials=3, timeout_s=60, size="small")
    result, poisoned = evaluate_job(EvalJob(problem, candidate, config), plugins("kz_pylang"), tmp_path, "cpu", lock)
    assert result.status is Status.CORRECT and not poisoned, result.message
    assert result.second_shape
    # the second shape's holds: its reference alone (a derived shape), both models built, its trial
    assert lock.holds == [
        "shared construct",
        *["shared trials"] * (config.trials + 1),  # each trial, then the values check
        *["shared second_shape"] * 3,
        "shared inputs",
        "exclusive",
    ]
    stages = result.stages
    assert stages["lock.shared_held"] >= stages["check"] > 0
    assert stages["lock.exclusive_held"] >= stages["timing"] > 0
    assert 0 < stages["lock.shared_held_max"] <= stages["lock.shared_held"]
    assert stages["lock.shared_wait"] >= 0 and stages["lock.exclusive_wait"] >= 0


def test_a_problem_check_holds_its_gpu_shared(monkeypatch, tmp_path):
    """A problem check runs the reference on the GPU (at full size, for seconds): in a worker it holds the GPU's
    lock shared, booked as ``problem_check``, so no worker of this pool or another run times meanwhile."""
    from kzcore.evaluate import problem_check
    from kzcore.executors import devicelock
    from kzcore.executors.worker import run_job
    from kzcore.types import EvalConfig, Problem, ProblemCheckJob, ProblemReport

    lock = DeviceLock(CTX, 2)
    seen = []

    def check(job, workdir, device):
        seen.append((lock.holding[0], HOLDS[lock.hold_what[0]], lock.readers.value))
        return ProblemReport(problem=job.problem.name), False

    monkeypatch.setattr(problem_check, "check_problem_job", check)
    job = ProblemCheckJob(problem=Problem(name="1_X", level=1, source=""), config=EvalConfig())
    try:
        devicelock.bind_worker(lock, 0)
        report, poisoned = run_job(job, None, tmp_path, "cuda")
    finally:
        devicelock.bind_worker(None, 0)
    assert seen == [(SHARED, "problem_check", 1)] and report.problem == "1_X" and not poisoned
    assert lock.readers.value == 0 and lock.holding[0] == 0

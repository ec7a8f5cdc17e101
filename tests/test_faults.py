"""Faults a candidate can cause in the process that evaluates it, and the fences against them (issue
"Verifier integrity" §3). Each fault candidate in tests/adversarial/faults/ goes through the real LocalPool
(language "triton" under the CPU interpreter, built-in 1_ReLU); each test checks the status and the message,
that every job got exactly one result, and that a good candidate evaluated right after is still correct.
That good candidate is `probe_clean_worker`, which also fails when the worker was left dirty (working
directory, stdout/stderr, signal handlers, timers). Each test says which defence it fails without.

Most tests share one module-scoped pool, started with fake credentials in its environment; a second
"loose" pool has the network namespace and the process guard switched off (KZ_SANDBOX_SKIP), to test the
fences behind them. GPU-only faults are marked `gpu` (run on the GPU machine).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import pickle
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from multiprocessing import Pipe
from pathlib import Path

import pytest

from kz_triton.static import check_source
from kzcore.executors import processes
from kzcore.executors.local import READ_TIMEOUT_S, ChannelError, LocalPool, _bound_reads, receive
from kzcore.executors.worker import LOG_LIMIT
from kzcore.problems import load_problems, load_solutions
from kzcore.types import Candidate, EvalConfig, EvalJob, EvalResult, Problem, Status
from tests.fakes_static import BARE, only_later_rules

FAULTS = Path(__file__).resolve().parent / "adversarial" / "faults"
CONFIG = EvalConfig(device="cpu", trials=2, timeout_s=60)
SHORT = EvalConfig(device="cpu", trials=2, timeout_s=5)
PLANTED = {  # fake credentials in the environment the pool starts from; no candidate may see them
    "HF_TOKEN": "hf_kzplanted0000",
    "OPENAI_API_KEY": "sk-kzplanted0000",
    "ANTHROPIC_API_KEY": "sk-ant-kzplanted0000",
    "AWS_ACCESS_KEY_ID": "AKIAKZPLANTED0000",
    "AWS_SECRET_ACCESS_KEY": "kzplanted0000",
    "AWS_SESSION_TOKEN": "kzplanted0000",
    "AWS_PROFILE": "kzplanted",
    "GITHUB_TOKEN": "ghp_kzplanted0000",
    "WANDB_API_KEY": "kzplanted0000",
}


def fault(name: str, **constants) -> str:
    """A fault's source, with module constants (``PORT = 9``) set to the given values."""
    source = (FAULTS / f"{name}.py").read_text()
    for constant, value in constants.items():
        lines = [line for line in source.splitlines() if line.startswith(f"{constant} = ")]
        assert len(lines) == 1, f"{name}.py has no single `{constant} = ...` line"
        source = source.replace(lines[0], f"{constant} = {value!r}")
    return source


@pytest.fixture(scope="module")
def relu() -> Problem:
    return next(p for p in load_problems("builtin:1") if p.name == "1_ReLU")


@pytest.fixture(scope="module")
def pool():
    # the credentials must be in this process's environment when a worker is spawned (replacements too),
    # so they stay set for the whole module
    with pytest.MonkeyPatch.context() as patch:
        for name, value in PLANTED.items():
            patch.setenv(name, value)
        with LocalPool(workers=1, config=CONFIG, plugins=["kz_triton", BARE]) as shared:
            yield shared


class LoosePool(LocalPool):
    """Network namespace and process guard off (in its own workers only): what is left is the Python-level
    socket block and the per-job sweep of child processes."""

    def _env(self, slot) -> dict:
        return {**super()._env(slot), "KZ_SANDBOX_SKIP": "netns,process-guard"}


@pytest.fixture(scope="module")
def loose_pool(pool, own_workers):  # after `pool`, so the credentials are planted for its workers too
    with LoosePool(workers=1, config=CONFIG, plugins=["kz_triton", BARE]) as loose:
        yield loose


def evaluate(pool: LocalPool, problem: Problem, *sources: str, config: EvalConfig = CONFIG) -> list[EvalResult]:
    """Evaluate ``sources`` in one map; asserts every job got exactly one result; returns them in order."""
    jobs = [
        EvalJob(problem, Candidate(problem=problem.name, language="triton", level=1, sample=i, source=s), config)
        for i, s in enumerate(sources)
    ]
    results = list(pool.map(jobs))
    assert sorted(r.sample for r in results) == list(range(len(jobs))), [r.sample for r in results]
    return sorted(results, key=lambda r: r.sample)


def worker_pid(pool: LocalPool) -> int:
    (worker,) = pool.start().workers.values()  # start(): a replacement may still be starting
    return worker.info["pid"]


def fences(pool: LocalPool) -> dict:
    """What the pool's current worker reported of its sandbox (pool.info is the first worker's)."""
    (worker,) = pool.start().workers.values()
    return worker.info["sandbox"]


def assert_clean_and_correct(result: EvalResult) -> None:
    assert result.status is Status.CORRECT, result.message


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()


def gone_within(pid: int, seconds: float) -> bool:
    """Whether ``pid`` is gone within ``seconds`` (a process killed mid-kernel can take a while to release
    its GPU context and exit)."""
    deadline = time.monotonic() + seconds
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def sleepers() -> set[int]:
    """`sleep 59.9` processes running: what the process faults try to start."""
    found = set()
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if (
                entry.name.isdigit()
                and (entry / "cmdline").read_bytes() == b"sleep\x0059.9\x00"
                and alive(int(entry.name))
            ):
                found.add(int(entry.name))
    return found


# ------------------------------------------------------------------------------------------------------
# the worker dies: crash detection (process sentinel) and replacement
# ------------------------------------------------------------------------------------------------------


def test_abort_is_a_crash_named_by_its_signal(pool, relu, worker_replacement):
    # defence: LocalPool._collect sees the dead worker's sentinel, names the signal and replaces it
    pid, replaced = worker_pid(pool), pool.replaced
    result, after = evaluate(pool, relu, fault("abort"), fault("probe_clean_worker"))
    assert result.status is Status.RUNTIME_ERROR, result.message
    assert "killed by SIGABRT" in result.message and "crash" in result.message
    assert pool.replaced == replaced + 1 and worker_pid(pool) != pid
    assert_clean_and_correct(after)


def test_os_exit_in_forward_or_at_import_is_a_crash(pool, relu, worker_replacement):
    # defence: the same crash path; the queue goes on after two dead workers in one map
    replaced = pool.replaced
    in_forward, at_import, after = evaluate(
        pool, relu, fault("os_exit"), fault("os_exit_import"), fault("probe_clean_worker")
    )
    assert in_forward.status is Status.RUNTIME_ERROR and "exited with code 0" in in_forward.message
    # the worker log's last line comes with the crash: what the process said last (a traceback's exception)
    assert in_forward.message.endswith("its log ends: giving up: the device state is gone"), in_forward.message
    assert at_import.status is Status.RUNTIME_ERROR and "exited with code 7" in at_import.message
    assert pool.replaced == replaced + 2
    assert_clean_and_correct(after)


def test_sys_exit_is_a_runtime_error_and_the_worker_stays(pool, relu):
    # defence: worker_main catches the BaseException the pipeline lets through (_escaped); without it the
    # worker exits and the job is filed as a crash, at the price of a new worker
    pid, replaced = worker_pid(pool), pool.replaced
    in_forward, at_import, after = evaluate(
        pool, relu, fault("sys_exit"), fault("sys_exit_import"), fault("probe_clean_worker")
    )
    assert in_forward.status is Status.RUNTIME_ERROR and "SystemExit(0,)" in in_forward.message
    assert at_import.status is Status.RUNTIME_ERROR and "SystemExit(3,)" in at_import.message
    assert "sys.exit is not a way out" in in_forward.message
    assert pool.replaced == replaced and worker_pid(pool) == pid
    assert_clean_and_correct(after)


def test_worker_dying_while_idle_costs_no_job(pool, relu, worker_replacement):
    # defence: LocalPool._dispatch puts the job back and replaces the worker when sending fails (without it
    # BrokenPipeError ends the whole map)
    pid, replaced = worker_pid(pool), pool.replaced
    os.kill(pid, signal.SIGKILL)
    assert gone_within(pid, 10)
    (after,) = evaluate(pool, relu, fault("probe_clean_worker"))
    assert_clean_and_correct(after)
    assert pool.replaced == replaced + 1


def start_plan(tmp_path, monkeypatch, **plan) -> list[str]:
    """Plugins for a pool whose worker starts follow ``plan`` (tests.fakes_hooks.StartPlan)."""
    import json

    from tests import fakes_hooks

    (tmp_path / "plan.json").write_text(json.dumps(plan))
    monkeypatch.setenv(fakes_hooks.START_PLAN_ENV, str(tmp_path))
    monkeypatch.setenv("KZ_SANDBOX_WRITABLE", str(tmp_path))  # the plan's start counter lives there
    return ["kz_triton", "tests.fakes_hooks:START_PLAN", BARE]


def test_a_crash_stalls_no_other_worker(relu, tmp_path, monkeypatch, own_workers, timeout_wait):
    # defence: WorkerLifecycle.replace kills the crashed worker and starts its successor without waiting for it
    # (it takes jobs once it reports ready); before, the scheduling loop waited out every replacement's
    # start (10-13 s on a GPU), so one crash froze every other worker's results and ran their deadlines out
    plugins = start_plan(tmp_path, monkeypatch, delay_from=2, delay_s=20)  # the replacement is slow to start
    sources = [fault("os_exit")] + [fault("probe_clean_worker")] * 3
    jobs = [
        EvalJob(relu, Candidate(problem=relu.name, language="triton", level=1, sample=i, source=s), CONFIG)
        for i, s in enumerate(sources)
    ]
    with LocalPool(workers=2, config=CONFIG, plugins=plugins) as own:
        seen = [(r.sample, r.status, time.time()) for r in own.map(jobs)]
        own.start()  # waits for the replacement, which cannot be ready before it has slept in kz_worker_started
        ready_at = (tmp_path / "start-2").stat().st_mtime + 20
        assert sorted((sample, status) for sample, status, _ in seen) == [(0, Status.RUNTIME_ERROR)] + [
            (i, Status.CORRECT) for i in (1, 2, 3)
        ]
        before = [sample for sample, _, t in seen if t < ready_at]
        assert 0 in before and len(before) >= 3, (seen, ready_at)  # the crash and the others' results came
        assert own.replaced == 1 and len(own.restart_seconds) == 1 and own.restart_seconds[0] >= 20
        (later,) = list(own.map(jobs[1:2]))  # and it serves
        assert_clean_and_correct(later)
        assert all(w.ready for w in own.workers.values())


def test_a_standby_worker_takes_a_crashed_workers_place_at_once(relu, tmp_path, monkeypatch, own_workers, timeout_wait):
    # defence: WorkerLifecycle._succeed promotes a ready spare (EvalConfig.standby_workers) into a dead worker's
    # slot and starts a new spare behind it; without one, the slot waits out a new worker's start-up
    import attrs

    plugins = start_plan(tmp_path, monkeypatch, delay_from=2, delay_s=20)  # starts after the first two: slow
    config = attrs.evolve(CONFIG, standby_workers=1)
    sources = [fault("os_exit"), fault("probe_clean_worker"), fault("probe_clean_worker")]
    jobs = [
        EvalJob(relu, Candidate(problem=relu.name, language="triton", level=1, sample=i, source=s), config)
        for i, s in enumerate(sources)
    ]
    with LocalPool(workers=1, config=config, plugins=plugins) as own:
        (spare,) = own.spares
        seen = [(r.sample, r.status, time.time()) for r in own.map(jobs)]
        assert own.workers[0] is spare and own.replaced == 1  # the spare serves the slot now
        own.start()  # waits for the new spare, which sleeps in kz_worker_started
        ready_at = (tmp_path / "start-2").stat().st_mtime + 20
        assert sorted((sample, status) for sample, status, _ in seen) == [
            (0, Status.RUNTIME_ERROR),
            (1, Status.CORRECT),
            (2, Status.CORRECT),
        ]
        assert all(t < ready_at for _, _, t in seen), (seen, ready_at)  # no job waited for a start-up
        assert len(own.spares) == 1 and own.spares[0].ready and own.spares[0] is not spare


def test_a_replacement_that_fails_to_start_is_retried_then_the_map_stops(relu, tmp_path, monkeypatch, own_workers):
    # defence: WorkerLifecycle._start_failed retries a replacement MAX_START_FAILURES times in a row, then ends the
    # map with a one-line KzError; results already yielded stay with the caller
    from kzcore.errors import KzError
    from kzcore.executors.local import MAX_START_FAILURES

    plugins = start_plan(tmp_path, monkeypatch, fail=[1])  # the first replacement fails, the second works
    with LocalPool(workers=1, config=CONFIG, plugins=plugins) as own:
        crash, after = evaluate(own, relu, fault("os_exit"), fault("probe_clean_worker"))
        assert crash.status is Status.RUNTIME_ERROR
        assert_clean_and_correct(after)
        assert own.replaced == 1 and len(list(tmp_path.glob("start-*"))) == 3
    for n in range(3):
        (tmp_path / f"start-{n}").unlink()
    plugins = start_plan(tmp_path, monkeypatch, fail=list(range(1, 1 + MAX_START_FAILURES)))
    with LocalPool(workers=1, config=CONFIG, plugins=plugins) as own:
        jobs = [
            EvalJob(relu, Candidate(problem=relu.name, language="triton", level=1, sample=i, source=s), CONFIG)
            for i, s in enumerate([fault("os_exit"), fault("probe_clean_worker")])
        ]
        got = []
        with pytest.raises(KzError, match=f"{MAX_START_FAILURES} starts in a row failed"):
            for result in own.map(jobs):
                got.append(result)
        assert [(r.sample, r.status) for r in got] == [(0, Status.RUNTIME_ERROR)]
    assert len(list(tmp_path.glob("start-*"))) == 1 + MAX_START_FAILURES


def test_a_replacement_that_hangs_while_starting_is_given_up_on(relu, tmp_path, monkeypatch, own_workers, timeout_wait):
    # defence: WorkerLifecycle.tend kills a replacement that has not reported ready by its start deadline and tries
    # again; after MAX_START_FAILURES the map stops with a one-line error instead of waiting forever
    from kzcore.errors import KzError
    from kzcore.executors import local

    monkeypatch.setattr(local, "START_TIMEOUT_S", 6.0)
    plugins = start_plan(tmp_path, monkeypatch, delay_from=1, delay_s=600)  # every replacement hangs
    with LocalPool(workers=1, config=CONFIG, plugins=plugins) as own:
        jobs = [
            EvalJob(relu, Candidate(problem=relu.name, language="triton", level=1, sample=i, source=s), CONFIG)
            for i, s in enumerate([fault("os_exit"), fault("probe_clean_worker")])
        ]
        got = []
        t = time.monotonic()
        with pytest.raises(KzError, match=r"did not start within 6 s \(3 starts in a row failed\)"):
            for result in own.map(jobs):
                got.append(result)
        assert time.monotonic() - t < 60
        assert [(r.sample, r.status) for r in got] == [(0, Status.RUNTIME_ERROR)]
        assert all(w.killed for w in own.workers.values())  # the last hung start was killed too
    assert len(list(tmp_path.glob("start-*"))) == 1 + local.MAX_START_FAILURES


# ------------------------------------------------------------------------------------------------------
# processes and signals
# ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def checked_pool(pool):  # after `pool`: the static check on, as in every real evaluation
    with LocalPool(workers=1, config=CONFIG, plugins=["kz_triton"]) as checked:
        yield checked


def test_fork_and_subprocess_are_refused_by_the_static_check(checked_pool, relu):
    # defence: kzcore.evaluate.static PROCESS_NAMES / FORBIDDEN_IMPORTS; nothing runs, no child appears
    pool = checked_pool
    before = sleepers()
    fork, spawn = evaluate(pool, relu, fault("fork_bomb"), fault("subprocess_spawn"))
    assert fork.status is Status.STATIC_CHECK_FAILED and "`os.fork`" in fork.message, fork.message
    assert spawn.status is Status.STATIC_CHECK_FAILED and "`subprocess`" in spawn.message, spawn.message
    assert set(fork.stages) == {"static"} and set(spawn.stages) == {"static"}
    assert processes.descendants(worker_pid(pool)) == []
    assert sleepers() <= before


def test_process_started_through_a_library_is_refused_at_run_time(pool, relu):
    # defence: processes.guard_processes (asyncio -> subprocess -> _posixsubprocess.fork_exec refuses a
    # candidate caller); without it a `sleep 60` starts (and the sweep below files hack_suspected)
    source = fault("spawn_hidden")
    assert only_later_rules(check_source(source))  # only the run-time guard can stop it
    before = sleepers()
    result, after = evaluate(pool, relu, source, fault("probe_clean_worker"))
    assert result.status is Status.RUNTIME_ERROR, result.message
    assert "may not start or signal processes" in result.message and "fork_exec" in result.message
    assert sleepers() <= before
    assert processes.descendants(worker_pid(pool)) == []


def test_process_left_running_is_killed_and_hack_suspected(loose_pool, relu):
    # defence: CleanSlate.restore -> processes.sweep_children after every job (here the process guard is off,
    # as if a candidate had got past it); without it the sleeper outlives the job
    assert fences(loose_pool)["process_guard"] == "off"
    pid, before = worker_pid(loose_pool), sleepers()
    result, after = evaluate(loose_pool, relu, fault("spawn_hidden"), fault("probe_clean_worker"))
    assert result.status is Status.HACK_SUSPECTED, result.message
    assert re.search(r"left \d process\(es\) running", result.message) and "(sleep)" in result.message
    assert sleepers() <= before
    assert processes.descendants(pid) == []  # (the worker may have been replaced: asyncio left threads behind)
    assert_clean_and_correct(after)


GUARD_SCRIPT = """
import os, subprocess, sys, tempfile
from pathlib import Path
from kzcore.executors import processes
scratch = Path(tempfile.mkdtemp())
processes.guard_processes(scratch)
candidate = compile("import subprocess\\nsubprocess.run(['true'])", str(scratch / "kz_candidate_0.py"), "exec")
try:
    exec(candidate, {})
    print("candidate: allowed")
except PermissionError as exc:
    print("candidate: refused", exc)
for label, code in (("fork", "os.fork()"), ("kill", "os.kill(1, 0)"), ("own", "os.kill(os.getpid(), 0)")):
    try:
        exec(compile(code, str(scratch / "kz_candidate_1.py"), "exec"), {"os": os})
        print(label + ": allowed")
    except PermissionError:
        print(label + ": refused")
print("library:", subprocess.run(["true"]).returncode)  # this file is not a candidate's
"""


def test_process_guard_refuses_candidates_but_not_libraries(tmp_path):
    # defence: processes.candidate_caller: Triton running ptxas or torch building an extension from inside a
    # candidate's forward must still work; the candidate's own call must not
    script = tmp_path / "guard_check.py"
    script.write_text(GUARD_SCRIPT)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("candidate: refused") and "fork_exec" in lines[0], out.stdout
    assert lines[1:] == ["fork: refused", "kill: refused", "own: allowed", "library: 0"], out.stdout


@contextlib.contextmanager
def counting_signal(sig):
    received = []
    previous = signal.signal(sig, lambda *_: received.append(1))
    try:
        yield received
    finally:
        signal.signal(sig, previous)


def test_signalling_another_process_is_refused(pool, relu):
    # defence: processes.guard_processes wraps os.kill (own process only); without it this test process gets
    # SIGUSR1 (a real attack would send SIGKILL to the evaluator)
    source = fault("kill_parent", TARGET_PID=os.getpid())
    assert only_later_rules(check_source(source))
    with counting_signal(signal.SIGUSR1) as received:
        result, after = evaluate(pool, relu, source, fault("probe_clean_worker"))
        time.sleep(0.2)
    assert result.status is Status.RUNTIME_ERROR, result.message
    assert "may signal only its own process" in result.message
    assert received == []
    assert_clean_and_correct(after)


def test_ignored_sigterm_does_not_stop_the_timeout(pool, relu, timeout_wait, worker_replacement):
    # defence: LocalPool kills with SIGKILL (kill_process_tree), which a candidate cannot ignore; with
    # SIGTERM the spinning worker would live on
    pid, replaced = worker_pid(pool), pool.replaced
    t0 = time.monotonic()
    (result,) = evaluate(pool, relu, fault("ignore_sigterm"), config=SHORT)
    assert result.status is Status.TIMEOUT, result.message
    assert "no result within 5 s" in result.message
    assert time.monotonic() - t0 < SHORT.timeout_s + 30
    assert gone_within(pid, 10)  # SIGKILLed without waiting (the pool never stalls on a dying worker)
    assert pool.replaced == replaced + 1
    (after,) = evaluate(pool, relu, fault("probe_clean_worker"))
    assert_clean_and_correct(after)


def test_timer_armed_by_a_candidate_is_disarmed(pool, relu, timeout_wait):
    # defence: CleanSlate._restore_signals cancels interval timers after each job; without it SIGALRM kills
    # the worker two seconds later, between or during other candidates' jobs
    pid = worker_pid(pool)
    (result,) = evaluate(pool, relu, fault("alarm_later"))
    assert_clean_and_correct(result)
    time.sleep(3)
    (after,) = evaluate(pool, relu, fault("probe_clean_worker"))
    assert_clean_and_correct(after)
    assert worker_pid(pool) == pid and alive(pid)


def test_timer_going_off_during_the_candidates_own_job_is_ignored(pool, relu):
    # defence: processes.ignore_timer_signals (the worker ignores SIGALRM/SIGVTALRM/SIGPROF); without it the
    # alarm the candidate arms kills the worker mid-job, and a correct kernel is filed runtime_error. On a
    # loaded GPU a 2 s timer re-armed on every call went off between two calls of one job this way.
    pid = worker_pid(pool)
    (result,) = evaluate(pool, relu, fault("alarm_now"))
    assert_clean_and_correct(result)
    assert worker_pid(pool) == pid and alive(pid)


# ------------------------------------------------------------------------------------------------------
# file descriptors, output, working directory
# ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["close_fds", "chdir_away", "delete_workdir"])
def test_worker_state_a_candidate_breaks_is_restored_for_the_next(pool, relu, name):
    # defence: CleanSlate (fds 1/2 re-pointed at the log, working directory re-created and re-entered, log
    # re-opened); without it the probe fails: closed stdout, wrong cwd, or no scratch dir to write into
    pid = worker_pid(pool)
    result, after = evaluate(pool, relu, fault(name), fault("probe_clean_worker"))
    assert_clean_and_correct(result)  # the fault only harms itself, so its kernel is judged as usual
    assert_clean_and_correct(after)
    assert worker_pid(pool) == pid


def test_files_outside_the_scratch_directory_are_read_only(pool, relu, tmp_path):
    # defence: sandbox.readonly_filesystem (a mount namespace with every mount read-only but the scratch dir
    # and the compiler caches); without it the candidate deletes the file and passes
    fences = pool.info["sandbox"]
    if fences.get("filesystem") != "readonly":
        pytest.skip(f"this machine cannot give workers a read-only filesystem: {fences.get('filesystem')}")
    target = tmp_path / "results.jsonl"  # pytest's tmp dir: outside every worker's scratch dir
    target.write_text("a result already computed\n")
    result, after = evaluate(pool, relu, fault("write_outside", TARGET=str(target)), fault("probe_clean_worker"))
    assert result.status is Status.RUNTIME_ERROR
    assert "Read-only file system" in result.message, result.message
    assert target.read_text() == "a result already computed\n"
    assert not target.with_name("results.jsonl.planted").exists()
    assert_clean_and_correct(after)  # its own scratch dir stays writable (the probe writes there)


def test_worker_scratch_directories_are_removed_with_their_worker(relu, own_workers):
    with LocalPool(workers=1, config=CONFIG, plugins=["kz_triton", BARE]) as own:
        (worker,) = own.workers.values()
        scratch = Path(worker.scratch)
        assert (scratch / f"kz-worker{worker.id}").is_dir()
    assert not scratch.exists()


def test_stdout_flood_goes_to_a_capped_log(pool, relu):
    # defence: fds 1/2 on a log file in the scratch dir (not a pipe: no deadlock, nothing on our terminal),
    # trimmed after each job past LOG_LIMIT; without the trim the log keeps the 100 MB
    pid = worker_pid(pool)
    result, after = evaluate(pool, relu, fault("stdout_flood"), fault("probe_clean_worker"))
    assert_clean_and_correct(result)
    assert_clean_and_correct(after)
    log = Path(os.readlink(f"/proc/{pid}/cwd")) / "worker.log"
    assert os.readlink(f"/proc/{pid}/fd/1") == str(log) == os.readlink(f"/proc/{pid}/fd/2")
    assert log.stat().st_size <= LOG_LIMIT


def test_closing_the_result_pipe_is_a_crash(pool, relu, worker_replacement):
    # defence: EOF on the pipe is a dead worker (LocalPool._collect); the worker is replaced
    replaced = pool.replaced
    result, after = evaluate(pool, relu, fault("close_pipe"), fault("probe_clean_worker"))
    assert result.status is Status.RUNTIME_ERROR, result.message
    assert "while running this candidate" in result.message
    assert pool.replaced == replaced + 1
    assert_clean_and_correct(after)


def test_junk_in_the_result_pipe_is_a_runtime_error(pool, relu, worker_replacement):
    # defence: local.receive (length bound, only kzcore's types unpickled, message shape checked); without it
    # the pool reads the junk's first bytes as a 1.8 GB message length and waits for it forever
    replaced, done = pool.replaced, []
    thread = threading.Thread(
        target=lambda: done.append(evaluate(pool, relu, fault("dup2_stdout"), fault("probe_clean_worker"))),
        daemon=True,
    )
    thread.start()
    thread.join(120)
    assert done, "no result for the junk job: the pool hung or raised reading the result pipe"
    result, after = done[0]
    assert result.status is Status.RUNTIME_ERROR, result.message
    assert "result pipe carried something other than this job's result" in result.message
    assert pool.replaced == replaced + 1
    assert_clean_and_correct(after)


class _Forged:
    def __reduce__(self):
        return (os.system, ("touch kz-forged-pickle-ran",))


def test_messages_from_a_worker_are_bounded_and_build_no_foreign_objects(tmp_path, monkeypatch, timeout_wait):
    # defence: _bound_reads (SO_RCVTIMEO) and _MessageUnpickler; without them a header with no body blocks
    # the pool forever, and a pickle written into the pipe runs code in the evaluator's own process
    monkeypatch.chdir(tmp_path)
    ours, theirs = Pipe()
    _bound_reads(ours)
    os.write(theirs.fileno(), struct.pack("!i", 100) + b"abc")  # a 100-byte message that never comes
    t0 = time.monotonic()
    with pytest.raises(ChannelError):
        receive(ours)
    assert time.monotonic() - t0 < READ_TIMEOUT_S + 5
    ours, theirs = Pipe()
    theirs.send(("result", _Forged(), False))
    with pytest.raises(ChannelError, match="not allowed"):
        receive(ours)
    assert not (tmp_path / "kz-forged-pickle-ran").exists()
    buffer = io.BytesIO()
    pickle.dump(("result", 1, False), buffer)  # control: well-formed messages of plain values pass
    theirs.send_bytes(buffer.getvalue())
    assert receive(ours) == ("result", 1, False)


# ------------------------------------------------------------------------------------------------------
# memory, network, secrets
# ------------------------------------------------------------------------------------------------------


def test_host_memory_runaway_is_a_memory_error(pool, relu):
    # defence: sandbox.limit_memory (RLIMIT_AS on a CPU worker); without it the fault refuses to allocate
    # (it never runs unbounded) and its message has no MemoryError
    up = fences(pool)
    assert up["memory_limit"] == "RLIMIT_AS", up
    assert 1 <= up["memory_limit_gib"] <= 1024, up
    pid = worker_pid(pool)
    result, after = evaluate(pool, relu, fault("host_oom"), fault("probe_clean_worker"))
    assert result.status is Status.RUNTIME_ERROR, result.message
    assert "MemoryError" in result.message
    assert worker_pid(pool) == pid  # the memory came back when the exception unwound: no new worker needed
    assert_clean_and_correct(after)


@contextlib.contextmanager
def tcp_server():
    """A server on 127.0.0.1 that records every connection and every byte it gets."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    received, stop = [], threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(2)
                with contextlib.suppress(OSError):
                    received.append(conn.recv(65536) or b"(connected, nothing sent)")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], received
    finally:
        stop.set()
        thread.join(5)
        server.close()


@pytest.mark.parametrize(
    ("which", "fence", "refusal"),
    [
        ("pool", ("netns", "userns+netns"), "Network is unreachable"),  # userns+netns where we are not root
        # a hand mark: the pool is picked at run time (request.getfixturevalue), so collection cannot see that
        # this case starts the loose pool (own_workers); usefixtures is refused in pytest.param's marks
        pytest.param("loose_pool", ("socket-block",), "network access is disabled", marks=pytest.mark.slow),
    ],
)
def test_candidate_cannot_reach_the_network(request, relu, which, fence, refusal):
    # defence: sandbox.isolate_network (an empty network namespace; without one, the Python-level socket
    # block); without either the server below receives the candidate's POST and the candidate is correct
    pool = request.getfixturevalue(which)
    assert fences(pool)["network"] in fence, fences(pool)
    with tcp_server() as (port, received):
        source = fault("network_connect", PORT=port)
        assert only_later_rules(check_source(source))
        result, after = evaluate(pool, relu, source, fault("probe_clean_worker"))
        time.sleep(0.2)
    assert received == []
    assert result.status is Status.RUNTIME_ERROR, result.message
    assert refusal in result.message
    assert_clean_and_correct(after)


def test_candidate_sees_no_credentials(pool, relu):
    # defence: worker.scrub_environment (os.environ) and sandbox.wipe_start_environment (/proc/self/environ,
    # which still holds what the worker was spawned with); without either the fault lists what it found
    spec = importlib.util.spec_from_file_location("kz_env_secrets_control", FAULTS / "env_secrets.py")
    control = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(control)
    assert set(PLANTED) <= set(control.leaked_names()[0])  # control: this process has them, the fault finds them
    up = fences(pool)
    assert up["secrets_removed"] >= len(PLANTED) and up["start_environment_wiped"] >= len(PLANTED), up
    (result,) = evaluate(pool, relu, fault("env_secrets"))
    assert result.status is Status.CORRECT, result.message
    for name, value in PLANTED.items():
        assert name not in result.message and value not in result.message


# ------------------------------------------------------------------------------------------------------
# GPU-only faults (H200): the same pool behaviour with a CUDA context in the worker
# ------------------------------------------------------------------------------------------------------

GPU_CONFIG = EvalConfig(device="cuda", trials=2, timeout_s=120)


@pytest.fixture(scope="module")
def gpu_pool():
    with LocalPool(workers=1, config=GPU_CONFIG, plugins=["kz_triton", BARE]) as pool:
        yield pool


@pytest.fixture(scope="module")
def good_relu(relu) -> str:
    return load_solutions("builtin", [relu], "triton")[0].source


@pytest.mark.gpu
def test_gpu_worker_runs_behind_the_fences(gpu_pool, relu, good_relu):
    # the fences must not break CUDA or Triton: a network namespace, RLIMIT_DATA, the process guard (Triton
    # runs ptxas and builds its launcher through subprocess from inside the candidate's forward)
    up = fences(gpu_pool)
    assert up["network"] in ("netns", "userns+netns"), up
    assert up["memory_limit"] == "RLIMIT_DATA" and up["process_guard"] == "python", up
    good, probe = evaluate(gpu_pool, relu, good_relu, fault("probe_clean_worker"), config=GPU_CONFIG)
    assert good.status is Status.CORRECT and good.speedup is not None, good.message
    assert probe.status is Status.CORRECT, probe.message


@pytest.mark.gpu
def test_gpu_illegal_memory_access_replaces_the_worker(gpu_pool, relu, good_relu):
    # defence: pipeline.is_fatal_device_error marks the worker poisoned; the pool replaces it
    replaced = gpu_pool.replaced
    (result,) = evaluate(gpu_pool, relu, (FAULTS.parent / "oob_write.py").read_text(), config=GPU_CONFIG)
    assert result.status is Status.RUNTIME_ERROR, result.message
    assert "illegal memory access" in result.message or "CUDA error" in result.message, result.message
    assert gpu_pool.replaced == replaced + 1
    (after,) = evaluate(gpu_pool, relu, good_relu, config=GPU_CONFIG)
    assert after.status is Status.CORRECT, after.message


@pytest.mark.gpu
def test_gpu_out_of_memory_is_a_runtime_error(gpu_pool, relu, good_relu):
    # defence: the allocator's error is the candidate's runtime_error; "out of memory" replaces the worker
    replaced = gpu_pool.replaced
    (result,) = evaluate(gpu_pool, relu, fault("gpu_oom"), config=GPU_CONFIG)
    assert result.status is Status.RUNTIME_ERROR, result.message
    assert "out of memory" in result.message, result.message
    assert gpu_pool.replaced == replaced + 1
    (after,) = evaluate(gpu_pool, relu, good_relu, config=GPU_CONFIG)
    assert after.status is Status.CORRECT, after.message


@pytest.mark.gpu
def test_gpu_kernel_that_never_ends_times_out(gpu_pool, relu, good_relu):
    # defence: the deadline and SIGKILL; the driver tears the context (and the running kernel) down with
    # the process, and the fresh worker gets the GPU
    config = EvalConfig(device="cuda", trials=2, timeout_s=30)
    pid, replaced = worker_pid(gpu_pool), gpu_pool.replaced
    (result,) = evaluate(gpu_pool, relu, fault("gpu_hang"), config=config)
    assert result.status is Status.TIMEOUT, result.message
    assert gone_within(pid, 60) and gpu_pool.replaced == replaced + 1
    (after,) = evaluate(gpu_pool, relu, good_relu, config=GPU_CONFIG)
    assert after.status is Status.CORRECT, after.message


@pytest.mark.gpu
def test_gpu_worker_host_memory_runaway_is_a_memory_error(gpu_pool, relu, good_relu):
    # defence: sandbox.limit_memory (RLIMIT_DATA on a GPU worker)
    (result,) = evaluate(gpu_pool, relu, fault("host_oom"), config=GPU_CONFIG)
    assert result.status is Status.RUNTIME_ERROR, result.message
    assert "MemoryError" in result.message or "can't allocate memory" in result.message, result.message
    (after,) = evaluate(gpu_pool, relu, good_relu, config=GPU_CONFIG)
    assert after.status is Status.CORRECT, after.message


@pytest.mark.gpu
def test_gpu_worker_cannot_reach_the_network(gpu_pool, relu):
    with tcp_server() as (port, received):
        result, after = evaluate(
            gpu_pool, relu, fault("network_connect", PORT=port), fault("probe_clean_worker"), config=GPU_CONFIG
        )
        time.sleep(0.2)
    assert received == []
    assert result.status is Status.RUNTIME_ERROR and "Network is unreachable" in result.message, result.message
    assert after.status is Status.CORRECT, after.message


def test_fault_files_are_kernelbench_candidates_for_relu():
    """Every fault defines ModelNew and a @triton.jit kernel; only the two meant for the static check fail it (the
    others, some refused by the later rules, run through pools whose static check passes them: the sandbox and the
    pool are what these tests measure)."""
    refused = {"fork_bomb", "subprocess_spawn"}
    for path in sorted(FAULTS.glob("*.py")):
        source = path.read_text()
        assert "class ModelNew" in source and "@triton.jit" in source, path.name
        problems = check_source(source)  # the rules written after the sandbox's (tests/fakes_static.py) aside
        assert (not only_later_rules(problems)) == (path.stem in refused), (path.name, problems)


class SharedDevicePool(LocalPool):
    """Workers taken as sharing one GPU (``shared``), as several workers per GPU do; on a CPU none is shared."""

    shared = True

    def _shares_device(self) -> bool:
        return self.shared


def test_a_candidate_out_of_device_memory_beside_a_neighbour_is_evaluated_again_alone(relu, own_workers):
    # defence: LocalPool.map evaluates again, alone, a candidate that ran out of device memory while other jobs
    # shared its GPU; without it an honest kernel is filed runtime_error for what its neighbours held (4 workers
    # per GPU on an 80 GB H100 filed two correct 14_RMSNorm kernels so)
    from kzcore.executors.local import ALONE_NOTE

    def jobs(until: float) -> list[EvalJob]:
        sources = [fault("memory_neighbour", UNTIL=until), fault("memory_neighbour", UNTIL=until, RUN_OUT=True)]
        return [
            EvalJob(relu, Candidate(problem=relu.name, language="triton", level=1, sample=i, source=s), CONFIG)
            for i, s in enumerate(sources)
        ]

    with SharedDevicePool(workers=2, config=CONFIG, plugins=["kz_triton", BARE]) as own:
        own.shared = False  # the control: no GPU shared, so the verdict stands as filed
        by_sample = {r.sample: r for r in own.map(jobs(time.time() + 6))}
        assert by_sample[0].status is Status.CORRECT, by_sample[0].message
        assert by_sample[1].status is Status.RUNTIME_ERROR and "out of memory" in by_sample[1].message
        own.shared = True
        own.start()  # both workers ready before the clock starts
        seen = [(r.sample, r, time.time()) for r in own.map(jobs(time.time() + 6))]
        assert [sample for sample, _, _ in seen] == [0, 1]  # the neighbour's result first, then the one run alone
        neighbour, alone = seen[0][1], seen[1][1]
        assert neighbour.status is Status.CORRECT and ALONE_NOTE not in neighbour.timing_note
        assert alone.status is Status.CORRECT, alone.message
        assert alone.timing_note.startswith(ALONE_NOTE)  # correct: it ran once its neighbour's job had ended

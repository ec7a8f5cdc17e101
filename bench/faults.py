"""Fault tolerance of the evaluator: a stream of candidates mixing faults, cheats and good kernels through
one worker pool. Prints JSON (and writes --out): counts per expected/actual status, lost results, harness
crashes, good kernels misfiled, and what got past the sandbox (connections a local server received, signals
this process received, `sleep` processes left running). Targets: 0 lost, 0 harness crashes, 0 good kernels
misfiled, nothing past the sandbox.

    python -m bench run faults --n 200 --out bench/results/faults.json     (CPU: Triton interpreter, small sizes)
    python -m bench run faults --n 200 --device cuda                       (adds the GPU-only faults)
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import platform
import random
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.report import Terminated, cut_short, sigterm_raises, write_json_atomic  # noqa: E402

ADVERSARIAL = ROOT / "tests" / "adversarial"

# candidate file under tests/adversarial (on built-in 1_ReLU) -> the statuses that are right for it
EXPECTED = {
    "crash_segv": {"runtime_error"},
    "infinite_loop": {"timeout"},
    "zeros_output": {"incorrect"},
    "half_output": {"incorrect"},
    "inplace_input": {"hack_suspected"},
    "hidden_torch_op": {"hack_suspected"},
    "no_launch": {"hack_suspected"},
    "thread_offload": {"static_check_failed", "hack_suspected"},
    "tamper_guard": {"static_check_failed", "hack_suspected"},
    "try_fallback": {"static_check_failed"},
    "syntax_error": {"compile_error"},
    "oob_write": {"runtime_error", "incorrect", "correct"},  # CPU interpreter: may not fault; GPU: runtime_error
    # faults/ (tests/test_faults.py): a fault that harms only itself leaves a correct kernel correct
    "faults/abort": {"runtime_error"},
    "faults/sys_exit": {"runtime_error"},
    "faults/sys_exit_import": {"runtime_error"},
    "faults/os_exit": {"runtime_error"},
    "faults/os_exit_import": {"runtime_error"},
    "faults/fork_bomb": {"static_check_failed"},
    "faults/subprocess_spawn": {"static_check_failed"},
    "faults/spawn_hidden": {"runtime_error"},
    "faults/kill_parent": {"runtime_error"},
    "faults/ignore_sigterm": {"timeout"},
    "faults/alarm_later": {"correct"},
    "faults/alarm_now": {"correct"},
    "faults/gpu_hang": {"timeout"},  # the CPU interpreter spins in Python: the same deadline ends it
    "faults/stdout_flood": {"correct"},
    "faults/close_fds": {"correct"},
    "faults/close_pipe": {"runtime_error"},
    "faults/dup2_stdout": {"runtime_error"},
    "faults/chdir_away": {"correct"},
    "faults/delete_workdir": {"correct"},
    "faults/host_oom": {"runtime_error"},
    "faults/network_connect": {"runtime_error"},
    "faults/env_secrets": {"correct"},
    # read-only filesystem: EROFS; where that fence is off the file is gone (counted in files_damaged)
    "faults/write_outside": {"runtime_error"},
}
GPU_ONLY = {
    "faults/gpu_oom": {"runtime_error"},
}
GOOD = "good"
PROBE = "faults/probe_clean_worker"  # a good kernel that fails when an earlier fault left the worker dirty
GUARDED_TEXT = "a result already computed\n"
PLANTED = {"HF_TOKEN": "hf_kzbench", "AWS_SECRET_ACCESS_KEY": "kzbench", "OPENAI_API_KEY": "sk-kzbench"}


def fault_source(kind: str, constants: dict) -> str:
    """The candidate file, with module constants it declares (``PORT = 9``) set from ``constants``."""
    source = (ADVERSARIAL / f"{kind}.py").read_text()
    for name, value in constants.items():
        lines = [line for line in source.splitlines() if line.startswith(f"{name} = ")]
        if len(lines) == 1:
            source = source.replace(lines[0], f"{name} = {value!r}")
    return source


def candidates(n: int, seed: int, expected: dict, constants: dict):
    from kzcore.problems import load_problems, load_solutions

    problems = load_problems("builtin:1")
    relu = next(p for p in problems if p.name == "1_ReLU")
    good = {c.problem: c for c in load_solutions("builtin", problems, "triton")}
    rng = random.Random(seed)
    kinds = list(expected) + [GOOD] * (len(expected) - 2) + [PROBE] * 2  # half good kernels
    drawn = list(expected)[:n] + [rng.choice(kinds) for _ in range(n - len(expected))]  # every fault at least once
    rng.shuffle(drawn)
    out = []
    for i, kind in enumerate(drawn):
        if kind == GOOD:
            problem = rng.choice(problems)
            out.append((kind, problem, good[problem.name].source))
        else:
            out.append((kind, relu, fault_source(kind, constants)))
        out[-1] = (*out[-1], i)
    return problems, out


@contextlib.contextmanager
def listening_server():
    """A TCP server on 127.0.0.1 for the network fault: yields its port and the list of what it received."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    received, stop = [], threading.Event()

    def serve():
        while not stop.is_set():
            with contextlib.suppress(OSError):
                conn, _ = server.accept()
                with conn:
                    conn.settimeout(2)
                    received.append(conn.recv(4096)[:100].decode(errors="replace"))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], received
    finally:
        stop.set()
        thread.join(5)
        server.close()


def _damage(target: Path) -> int:
    """Files outside the workers' scratch dirs that candidates deleted, changed or planted (0 or more)."""
    changed = not target.exists() or target.read_text() != GUARDED_TEXT
    return int(changed) + len(list(target.parent.glob("*.planted")))


def sleepers() -> set[int]:
    """`sleep 59.9` processes now running (what the process faults try to start)."""
    found = set()
    for entry in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            if (entry / "cmdline").read_bytes() == b"sleep\x0059.9\x00" and "State:\tZ" not in (
                entry / "status"
            ).read_text():
                found.add(int(entry.name))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--standby-workers", type=int, default=0, help="started spares per GPU (EvalConfig)")
    parser.add_argument("--timeout", type=float, default=20.0)
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="cuda adds GPU-only faults")
    parser.add_argument("--out", default=None)
    parser.add_argument(
        "--max-seconds", type=float, default=0.0,
        help="stop taking results after this long (0: never); the report then counts what ran and what did not",
    )  # fmt: skip
    args = parser.parse_args(argv)
    with listening_server() as (port, received), contextlib.ExitStack() as stack:
        signals: list[int] = []
        previous = signal.signal(signal.SIGUSR1, lambda *_: signals.append(1))
        stack.callback(signal.signal, signal.SIGUSR1, previous)
        os.environ.update(PLANTED)  # fake credentials the env_secrets fault must not see
        guarded = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kz-faults-"))) / "results.jsonl"
        guarded.write_text(GUARDED_TEXT)  # outside every worker's scratch dir: write_outside tries to delete it
        return run(args, {"PORT": port, "TARGET_PID": os.getpid(), "TARGET": str(guarded)}, received, signals)


def run(args, constants: dict, received: list, signals: list) -> int:
    """The stream through one pool, then the report. SIGTERM or Ctrl-C stops taking results: the report then
    counts what ran (like ``--max-seconds``), is marked ``"partial": true`` and ``"cut_short"``, and the exit
    status is 128 + the signal."""
    from kzcore.executors.local import LocalPool, resolve_device
    from kzcore.plugins import get_plugin_manager, plugin_specs
    from kzcore.types import Candidate, EvalConfig, EvalJob

    device = resolve_device(args.device)
    expected = dict(EXPECTED, **(GPU_ONLY if device == "cuda" else {}))
    problems, items = candidates(args.n, args.seed, expected, constants)
    sleeping_before = sleepers()
    config = EvalConfig(device=device, trials=2, timeout_s=args.timeout, standby_workers=args.standby_workers)
    jobs, kind_of = [], {}
    for kind, problem, source, i in items:
        cand = Candidate(
            problem=problem.name, language="triton", level=problem.level, sample=i, source=source, origin=kind
        )
        jobs.append(EvalJob(problem=problem, candidate=cand, config=config))
        kind_of[i] = kind
    pool = LocalPool(workers=args.workers, config=config, plugins=plugin_specs(get_plugin_manager()))
    t0 = time.perf_counter()
    state = {"args": args, "pool": pool, "jobs": jobs, "kind_of": kind_of, "expected": expected, "results": [],
             "harness_error": None, "stopped": False, "t0": t0, "wall": None, "constants": constants,
             "received": received, "signals": signals, "sleeping_before": sleeping_before}  # fmt: skip
    results = state["results"]
    try:
        with sigterm_raises():
            try:
                for r in pool.map(jobs):
                    results.append(r)
                    elapsed = time.perf_counter() - t0
                    print(
                        f"[{len(results)}/{len(jobs)} {elapsed:.0f}s] {kind_of[r.sample]}: {r.status.value}",
                        file=sys.stderr,
                    )
                    if args.max_seconds and elapsed > args.max_seconds and len(results) < len(jobs):
                        state["stopped"] = True
                        break
            except Exception as exc:  # the number we want to be zero
                state["harness_error"] = f"{type(exc).__name__}: {exc}"
            finally:
                pool.close()
            state["wall"] = time.perf_counter() - t0
            time.sleep(0.5)  # let a late signal or connection arrive
            report = faults_report(state, partial=False)
    except (Terminated, KeyboardInterrupt) as exc:
        return cut_short("faults.py", args.out, exc, lambda: faults_report(state, partial=True))
    print(json.dumps(report, indent=2))
    if args.out:
        write_json_atomic(args.out, report)
    ok = all(report[name] == 0 for name in report["targets"])
    return 0 if ok and report["faults_with_unexpected_status"] == 0 else 1


def faults_report(state: dict, partial: bool) -> dict:
    """The report from the results in ``state`` (`run`). A partial one (cut short) counts the jobs without a
    result as not run, as ``--max-seconds`` does, not as lost."""
    from kzcore.results import package_versions

    args, pool, jobs, kind_of, expected = (state[k] for k in ("args", "pool", "jobs", "kind_of", "expected"))
    results, harness_error, constants = state["results"], state["harness_error"], state["constants"]
    stopped = state["stopped"] or partial
    wall = state["wall"] if state["wall"] is not None else time.perf_counter() - state["t0"]
    by_sample = {r.sample: r for r in results}
    table = collections.defaultdict(collections.Counter)
    misfiled_good, wrong = [], []
    for i, kind in kind_of.items():
        r = by_sample.get(i)
        if r is None:
            continue
        table[kind][r.status.value] += 1
        if kind in (GOOD, PROBE) and not r.correct:
            misfiled_good.append(
                {"sample": i, "problem": r.problem, "status": r.status.value, "message": r.message[:200]}
            )
        elif kind not in (GOOD, PROBE) and r.status.value not in expected[kind]:
            wrong.append({"sample": i, "kind": kind, "status": r.status.value, "message": r.message[:200]})
    return {
        "bench": "faults",
        "partial": partial,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": platform.node(),
        "device": pool.info.get("device_name"),
        "packages": package_versions(),
        "candidates": len(jobs),
        "results": len(results),
        # stopped by --max-seconds: the jobs not yet returned were abandoned by us, not lost by the pool
        "stopped_early_after_s": args.max_seconds if state["stopped"] else None,
        "not_run": len(jobs) - len(by_sample) if stopped else 0,
        "lost_results": 0 if stopped else len(jobs) - len(by_sample),
        "harness_crashes": int(harness_error is not None),
        "harness_error": harness_error,
        "good_misfiled": len(misfiled_good),
        "faults_with_unexpected_status": len(wrong),
        "workers_replaced": pool.replaced,
        "standby_workers": args.standby_workers,
        "replacement_start_s": {
            "median": statistics.median(pool.restart_seconds) if pool.restart_seconds else None,
            "max": max(pool.restart_seconds, default=None),
            "phases_of_first_worker": pool.info.get("start_s"),
        },
        "sandbox": pool.info.get("sandbox"),
        "network_connections_received": len(state["received"]),
        "signals_received": len(state["signals"]),
        "sleep_processes_left": len(sleepers() - state["sleeping_before"]),
        "files_damaged": _damage(Path(constants["TARGET"])),
        "wall_s": round(wall, 2),
        "per_kind": {k: dict(v) for k, v in sorted(table.items())},
        "misfiled_good": misfiled_good,
        "unexpected": wrong,
        "targets": {
            "lost_results": 0,
            "harness_crashes": 0,
            "good_misfiled": 0,
            "network_connections_received": 0,
            "signals_received": 0,
            "sleep_processes_left": 0,
            "files_damaged": 0,
        },
    }


if __name__ == "__main__":
    sys.exit(main())

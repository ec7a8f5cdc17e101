"""The worker process: set up the device and plugins once, then evaluate jobs sent over a pipe until told
to stop. Candidate code only ever runs here, in a scratch directory, behind the fences of `sandbox`: no
network, credentials scrubbed from the environment, capped memory and files, no core dumps, no new
processes, and a clean slate after every job. Nothing heavy is imported at module level: the environment
(CUDA_VISIBLE_DEVICES, the languages' variables such as TRITON_INTERPRET) must be set before torch or a
compiler loads, and the network namespace needs a process that has no threads yet. What the registered
languages need before their plugins load here (environment, writable caches) comes from the pool."""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

import attrs

LOG_LIMIT = 4 * 1024 * 1024  # candidate stdout/stderr kept per worker before the log is truncated
FILE_SIZE_LIMIT = 1 << 30  # no file a candidate writes may exceed 1 GiB (RLIMIT_FSIZE)
SECRET_MARKERS = (
    "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "API_KEY", "APIKEY", "ACCESS_KEY", "PRIVATE_KEY", "AUTH",
)  # fmt: skip
SECRET_PREFIXES = ("AWS_", "AZURE_")  # cloud SDK settings: keys, sessions, profiles
# KZ_SANDBOX_SKIP=netns,readonly-fs,write-audit,process-guard,memory switches fences off (to test what is behind them)
SANDBOX_SKIP = "KZ_SANDBOX_SKIP"
# KZ_WORKER_PROFILE=DIR writes a cProfile of every job (evaluation and clean-up) to DIR/<pid>-<n>.pstats
PROFILE_DIR = "KZ_WORKER_PROFILE"


def is_secret_name(name: str) -> bool:
    upper = name.upper()
    return any(m in upper for m in SECRET_MARKERS) or upper.startswith(SECRET_PREFIXES) or upper.endswith("_KEY")


def scrub_environment(environ=os.environ) -> list[str]:
    """Remove variables that look like credentials, so candidate code never sees them; returns their names."""
    gone = [k for k in environ if is_secret_name(k)]
    for k in gone:
        del environ[k]
    return gone


def _limit_resources() -> None:
    """No core dumps, and a cap on the size of any file written (a candidate filling the disk: past it a
    write fails with EFBIG, since Python ignores SIGXFSZ). Soft and hard, so a candidate cannot lift them."""
    import resource

    for limit, value in ((resource.RLIMIT_CORE, 0), (resource.RLIMIT_FSIZE, FILE_SIZE_LIMIT)):
        try:
            soft, hard = resource.getrlimit(limit)
            cap = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(limit, (cap, cap))
        except (ValueError, OSError):
            pass


def _fence(device: str, memory_limit: int | None, scratch: Path, caches: Sequence[str]) -> dict:
    """Put up the sandbox fences that must come before torch loads; returns what is up, for the run header."""
    from kzcore.executors import caches as own_caches
    from kzcore.executors import processes, sandbox

    skip = {s.strip() for s in os.environ.get(SANDBOX_SKIP, "").split(",") if s.strip()}
    gone = scrub_environment()
    fences = {
        "secrets_removed": len(gone),
        "start_environment_wiped": sandbox.wipe_start_environment(gone),
        "network": sandbox.isolate_network(use_namespace="netns" not in skip),
    }
    # after the network namespace (whose user namespace, where one was needed, grants the right to mount)
    writable = own_caches.writable_paths(scratch, caches)
    if "readonly-fs" in skip:
        fences["filesystem"] = "off (KZ_SANDBOX_SKIP)"
    else:
        fences["filesystem"] = sandbox.readonly_filesystem(writable)
    fences["writable_refused"] = own_caches.refused_writable(caches)
    # where the filesystem could not be made read-only, Python-level writes are refused outside the same paths
    audit = fences["filesystem"] != "readonly" and "write-audit" not in skip
    profile = [Path(os.environ[PROFILE_DIR])] if os.environ.get(PROFILE_DIR) else []
    fences["write_audit"] = own_caches.audit_writes([*writable, *profile]) if audit else "off"
    fences["process_memory"] = own_caches.deny_process_memory() if "process-memory" not in skip else "off"
    os.environ.update(own_caches.private_caches(scratch))  # the compilers' caches: this worker's own, in scratch
    try:
        os.setpgid(0, 0)  # its own process group: a candidate's kill(0, ...) cannot reach the pool
    except OSError:
        pass
    _limit_resources()
    limit = None if "memory" in skip else memory_limit
    fences["memory_limit"] = sandbox.limit_memory(limit, device)
    fences["memory_limit_gib"] = round(limit / sandbox.GIB, 1) if limit and fences["memory_limit"] != "none" else None
    fences["subreaper"] = processes.become_subreaper()
    fences["process_guard"] = "process-guard" not in skip
    return fences


def _escaped(job, exc: BaseException):
    """The result for a job whose candidate raised SystemExit (sys.exit) or another BaseException that the
    pipeline does not catch: the worker is fine, the candidate failed."""
    from kzcore.types import Status

    message = f"the candidate raised {type(exc).__name__}{exc.args!r} out of the evaluation"[:500]
    return job.failure(Status.RUNTIME_ERROR, message + " (sys.exit is not a way out of an evaluation)")


def _left_processes(result, strays: list[str]):
    """A result whose candidate left processes running behind it (they were killed) is hack_suspected."""
    from kzcore.types import EvalResult, Status

    if not isinstance(result, EvalResult):
        return result
    message = (
        f"the candidate left {len(strays)} process(es) running after its evaluation: {', '.join(strays[:5])}; "
        "they were killed (candidate code may not start processes)"
    )
    return attrs.evolve(result, status=Status.HACK_SUSPECTED, message=f"{message}\n{result.message}".strip())


@contextlib.contextmanager
def _profiled(directory: str | None, n: int, job):
    """cProfile one job into ``directory`` (KZ_WORKER_PROFILE) for bench/profile_report.py; a no-op without it."""
    if not directory:
        yield
        return
    import cProfile

    profile = cProfile.Profile()
    profile.enable()
    try:
        yield
    finally:
        profile.disable()
        name = getattr(getattr(job, "problem", None), "name", "job")
        profile.dump_stats(str(Path(directory) / f"{os.getpid()}-{n}-{name}.pstats"))


@contextlib.contextmanager
def collected_after():
    """Python's cyclic garbage collector off inside a job and run once at its end. A collection can stop the
    host for milliseconds at any allocation; inside a timing that lands between the launch cover and the
    call it times and raises the cover for every later sample (``timeit`` turns it off for the same reason).
    Off for the whole job, trials and timing alike, so a candidate cannot tell them apart by when its
    garbage is collected. The worker froze its start-up objects (`gc.freeze`), so the collection here scans
    only what jobs left."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.collect()
        if was_on:
            gc.enable()


def _release_cache() -> float | None:
    """The device memory this worker cached beyond ``memory.KEEP_CACHED`` goes back between jobs (other workers
    and the trainer share the GPU), never while another worker times (``devicelock.device_work``). The seconds
    it took, waiting for the lock included, when it gave memory back; None when there was nothing to give back.
    A failure here is the next job's to meet, not this one's."""
    from kzcore.evaluate import memory
    from kzcore.executors.devicelock import device_work

    t0 = time.perf_counter()
    with contextlib.suppress(Exception):
        if memory.release_cache(hold=functools.partial(device_work, "release_cache")):
            return time.perf_counter() - t0
    return None


def after_job(result, poisoned: bool, device: str, strays: list[str], release=_release_cache):
    """What the worker does to a job's answer between the job and its report, for either kind of job: a
    candidate that left processes behind is hack_suspected; on a GPU (unless the context is poisoned) the
    memory cached beyond ``memory.KEEP_CACHED`` goes back first (``release``), so when a result arrives the
    worker's memory is already back, and an ``EvalResult`` files the seconds it took (a problem check's
    ``ProblemReport`` has no stages)."""
    from kzcore.types import EvalResult

    if strays:
        result = _left_processes(result, strays)
    if device == "cuda" and not poisoned:
        spent = release()
        if spent is not None and isinstance(result, EvalResult):  # it waited for and held the GPU lock
            result = attrs.evolve(result, stages={**(result.stages or {}), "release_cache": round(spent, 6)})
    return result


def worker_workdir(scratch: str | Path, worker_id: int) -> Path:
    """A worker's working directory inside its scratch directory; its log (`processes.LOG_NAME`) lives there."""
    return Path(scratch) / f"kz-worker{worker_id}"


def _setup_torch(device: str, tf32: bool) -> dict:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    info = {"torch": str(torch.__version__), "device_name": "cpu", "tf32": tf32}
    if device == "cuda":
        torch.cuda.init()
        torch.empty(1, device="cuda")
        info["device_name"] = torch.cuda.get_device_name()
        info["capability"] = ".".join(map(str, torch.cuda.get_device_capability()))
    return info


def run_job(job, pm, workdir, device: str, gpu_lock=None, lock_index: int = 0):
    """(answer, poisoned) for either kind of job inside an evaluator worker: an `EvalJob` gets its candidate
    evaluated (an ``EvalResult``), a `ProblemCheckJob` its problem module checked (a ``ProblemReport``).
    What an executor that runs jobs in processes of its own calls."""
    from kzcore.types import EvalJob, ProblemCheckJob

    if isinstance(job, EvalJob):
        from kzcore.evaluate.pipeline import evaluate_job

        return evaluate_job(job, pm, workdir, device, gpu_lock=gpu_lock, lock_index=lock_index)
    if isinstance(job, ProblemCheckJob):
        from kzcore.evaluate.problem_check import check_problem_job
        from kzcore.executors.devicelock import device_work

        with device_work("problem_check"):  # its reference runs on the GPU: never while a worker times
            return check_problem_job(job, workdir, device)
    raise TypeError(f"an evaluator worker runs EvalJob and ProblemCheckJob, not {type(job).__name__}")


def worker_main(
    conn,
    worker_id: int,
    device: str,
    env: dict,
    plugin_specs: list,
    tf32: bool,
    gpu_lock=None,
    lock_index: int = 0,
    memory_limit: int | None = None,
    scratch: str | None = None,
    caches: Sequence[str] = (),
) -> None:
    """``env``: variables to set first (the languages' among them); ``caches``: the languages' compiler
    caches, writable besides ``scratch``."""
    clock = time.perf_counter()
    phases: dict[str, float] = {}  # seconds of each start-up phase, reported in the worker's info

    def phase(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        phases[name] = round(now - clock, 4)
        clock = now

    os.environ.update(env)
    # everything this worker may write lives under ``scratch`` (the pool makes it and deletes it after the
    # worker ends): its working directory and its temporary files
    root = Path(scratch) if scratch else Path(tempfile.mkdtemp(prefix=f"kz-sandbox{worker_id}-"))
    workdir, tmp = worker_workdir(root, worker_id), root / "tmp"
    workdir.mkdir(exist_ok=True)
    tmp.mkdir(exist_ok=True)
    os.environ["TMPDIR"] = tempfile.tempdir = str(tmp)
    fences = _fence(device, memory_limit, root, caches)
    phase("fences")
    from kzcore.executors.processes import CleanSlate, guard_processes, ignore_timer_signals

    os.chdir(workdir)
    sys.path.insert(0, str(workdir))
    slate = CleanSlate(workdir, LOG_LIMIT)  # fds 1 and 2 go to its log: prints never reach our pipe or a tty
    slate.restore()
    try:
        import torch  # noqa: F401 (imported outside the lock: only CUDA's initialisation touches the device)

        from kzcore.executors.devicelock import bind_worker, device_work

        bind_worker(gpu_lock, lock_index)
        with device_work("start_up"):  # the CUDA context and the warm-up kernels: never while another worker times
            info = _setup_torch(device, tf32)
            phase("torch")  # import, and CUDA initialisation on a GPU
            # both job kinds' code is loaded now, before the slate's snapshot (run_job reaches it)
            import kzcore.evaluate.problem_check  # noqa: F401
            from kzcore.evaluate.pipeline import warm_up
            from kzcore.plugins import new_plugin_manager, set_plugin_manager

            pm = new_plugin_manager(load_entry_points=False, extra=plugin_specs)
            set_plugin_manager(pm)
            pm.hook.kz_worker_started(device=device)
            phase("plugins")
            warm_up(device, pm)
            phase("warm_up")
        if fences.pop("process_guard"):
            guard_processes(workdir)
            fences["process_guard"] = "python"
        else:
            fences["process_guard"] = "off"
        ignore_timer_signals()
        slate.snapshot()
        gc.freeze()  # start-up's objects: never scanned by the collections between jobs (`collected_after`)
        info["pid"] = os.getpid()
        info["sandbox"] = fences
        info["start_s"] = phases
    except BaseException as exc:
        conn.send(("failed", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-2000:]}"))
        return
    conn.send(("ready", info))
    try:
        profile_dir, jobs_done = os.environ.get(PROFILE_DIR), 0
        while True:
            try:
                job = conn.recv()
            except EOFError:
                return
            if job is None:
                return
            conn.send(("started",))  # a death before this is not the job's doing: the pool sends it again
            jobs_done += 1
            with _profiled(profile_dir, jobs_done, job), collected_after():
                try:
                    result, poisoned = run_job(job, pm, workdir, device, gpu_lock=gpu_lock, lock_index=lock_index)
                except BaseException as exc:  # sys.exit or KeyboardInterrupt raised by candidate code
                    result, poisoned = _escaped(job, exc), False
                strays = slate.restore()  # before reporting: a death while restoring is charged to this job
            result = after_job(result, poisoned, device, strays)
            conn.send(("result", result, poisoned))
            if poisoned:
                return  # a CUDA context that saw an illegal access is unusable: the pool starts a fresh worker
    finally:
        gc.unfreeze()  # frozen objects are never freed at exit: nanobind (Triton) would report them leaked

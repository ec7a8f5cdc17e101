"""The worker process: set up the device and plugins once, then evaluate jobs sent over a pipe until told
to stop. Candidate code only ever runs here, in a scratch directory, with credentials scrubbed from the
environment, no core dumps and a cap on file sizes. Nothing heavy is imported at module level: the environment
(CUDA_VISIBLE_DEVICES, TRITON_INTERPRET) must be set before torch or triton load."""

from __future__ import annotations

import os
import sys
import tempfile
import traceback
from pathlib import Path

LOG_LIMIT = 4 * 1024 * 1024  # candidate stdout/stderr kept per worker before the log is truncated
FILE_SIZE_LIMIT = 1 << 30  # no file a candidate writes may exceed 1 GiB (RLIMIT_FSIZE)
SECRET_MARKERS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "API_KEY", "APIKEY", "ACCESS_KEY", "AUTH")


def scrub_environment(environ=os.environ) -> list[str]:
    """Remove variables that look like credentials, so candidate code never sees them; returns their names."""
    gone = [k for k in environ if any(m in k.upper() for m in SECRET_MARKERS)]
    for k in gone:
        del environ[k]
    return gone


def _limit_resources() -> None:
    """No core dumps, and a cap on the size of any file written (a candidate filling the disk)."""
    import resource

    for limit, value in ((resource.RLIMIT_CORE, 0), (resource.RLIMIT_FSIZE, FILE_SIZE_LIMIT)):
        try:
            soft, hard = resource.getrlimit(limit)
            cap = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(limit, (cap, hard))
        except (ValueError, OSError):
            pass


def _redirect_output(workdir: Path) -> Path:
    """Send fds 1 and 2 to a log file so candidate prints never reach the user's terminal or our pipe."""
    log = workdir / "worker.log"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    return log


def _trim_log(log: Path) -> None:
    try:
        if log.stat().st_size > LOG_LIMIT:
            os.truncate(log, 0)
    except OSError:
        pass


def _setup_torch(device: str, tf32: bool) -> dict:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    info = {"torch": torch.__version__, "device_name": "cpu", "tf32": tf32}
    if device == "cuda":
        torch.cuda.init()
        torch.empty(1, device="cuda")
        info["device_name"] = torch.cuda.get_device_name()
        info["capability"] = ".".join(map(str, torch.cuda.get_device_capability()))
    return info


def worker_main(
    conn, worker_id: int, device: str, env: dict, plugin_specs: list, tf32: bool, gpu_lock=None, lock_index: int = 0
) -> None:
    os.environ.update(env)
    scrub_environment()
    _limit_resources()
    workdir = Path(tempfile.mkdtemp(prefix=f"kz-worker{worker_id}-"))
    os.chdir(workdir)
    sys.path.insert(0, str(workdir))
    log = _redirect_output(workdir)
    try:
        info = _setup_torch(device, tf32)
        from kzcore.evaluate.pipeline import evaluate_job
        from kzcore.evaluate.problem_check import check_problem_job
        from kzcore.plugins import new_plugin_manager, set_plugin_manager
        from kzcore.types import EvalJob

        pm = new_plugin_manager(load_entry_points=False, extra=plugin_specs)
        set_plugin_manager(pm)
        pm.hook.kz_worker_started(device=device)
        info["pid"] = os.getpid()
    except BaseException as exc:
        conn.send(("failed", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-2000:]}"))
        return
    conn.send(("ready", info))
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        if isinstance(job, EvalJob):
            result, poisoned = evaluate_job(job, pm, workdir, device, gpu_lock=gpu_lock, lock_index=lock_index)
        else:
            result, poisoned = check_problem_job(job, workdir, device)
        _trim_log(log)
        conn.send(("result", result, poisoned))
        if poisoned:
            return  # a CUDA context that saw an illegal access is unusable: the pool starts a fresh worker

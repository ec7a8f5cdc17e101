"""Processes around candidate code: none started from a candidate (`guard_processes`), none left behind
(`sweep_children`, `kill_process_tree`, a subreaper for double forks), no timer signal that kills the worker,
and the clean slate a worker restores after every job (`CleanSlate`). Neighbours: `executors.sandbox` (the
other fences), `executors.worker` and `executors.lifecycle` (their callers)."""

from __future__ import annotations

import os
import signal
import sys
import sysconfig
import time
from contextlib import suppress
from pathlib import Path

from kzcore.executors.sandbox import _libc

PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>

# os/posix functions that start or replace a process, or signal another one
PROCESS_FUNCTIONS = (
    "fork forkpty system popen posix_spawn posix_spawnp execv execve execl execle execlp execlpe execvp execvpe "
    "spawnv spawnve spawnvp spawnvpe spawnl spawnle spawnlp spawnlpe killpg pidfd_open"
).split()

_STDLIB = sysconfig.get_paths()["stdlib"] + os.sep


def become_subreaper() -> bool:
    """Orphans of this process's children (a double fork) become its children, so none escape a sweep."""
    if sys.platform != "linux":
        return False
    return _libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def _parents() -> dict[int, int]:
    """pid -> parent pid for every process visible in /proc."""
    out = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with suppress(OSError, ValueError, IndexError), open(f"/proc/{entry.name}/stat", "rb") as f:  # gone
                out[int(entry.name)] = int(f.read().rsplit(b")", 1)[1].split()[1])
    return out


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` in the process tree (Linux; [] elsewhere)."""
    if not os.path.isdir("/proc"):
        return []
    children: dict[int, list[int]] = {}
    for child, parent in _parents().items():
        children.setdefault(parent, []).append(child)
    out, stack = [], list(children.get(pid, []))
    while stack:
        p = stack.pop()
        out.append(p)
        stack += children.get(p, [])
    return out


def _signal_all(pids, sig) -> None:
    for p in pids:
        with suppress(OSError):  # already gone
            os.kill(p, sig)


def freeze_and_kill(pids: list[int], root: int | None = None) -> list[int]:
    """SIGSTOP ``pids`` (and ``root``'s descendants that appear meanwhile: a stopped process cannot fork),
    then SIGKILL them all. Returns every pid signalled."""
    seen: list[int] = []
    new = list(pids)
    for _ in range(20):
        new = [p for p in new if p not in seen]
        if not new:
            break
        _signal_all(new, signal.SIGSTOP)
        seen += new
        new = [p for r in ([root] if root is not None else new) for p in descendants(r)]
    _signal_all(seen, signal.SIGKILL)
    return seen


def kill_process_tree(pid: int) -> None:
    """SIGKILL ``pid`` and every process below it, freezing them first so none slips out by forking."""
    stopped = freeze_and_kill([pid, *descendants(pid)], root=pid)
    if pid not in stopped:
        _signal_all([pid], signal.SIGKILL)


def sweep_children(keep: frozenset[int] = frozenset()) -> list[str]:
    """Kill and reap every process this one started (except ``keep``); returns "pid (name)" for each."""
    me = os.getpid()
    found = [p for p in descendants(me) if p not in keep]
    if not found:
        return []
    names = []
    for p in found:
        try:
            names.append(f"{p} ({Path(f'/proc/{p}/comm').read_text().strip()})")
        except OSError:
            names.append(str(p))
    freeze_and_kill(found, root=me)
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:  # reap them (orphaned grandchildren come to us: we are a subreaper)
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            time.sleep(0.01)
    return names


def _is_stdlib(filename: str) -> bool:
    if filename.startswith("<frozen "):
        return True
    return filename.startswith(_STDLIB) and "site-packages" not in filename and "dist-packages" not in filename


def candidate_caller(scratch: str) -> str | None:
    """The file of the code that asked for a process, when that code is a candidate's: the first frame
    outside the standard library decides (so Triton calling ptxas or torch building an extension, from
    inside a candidate's forward, is allowed; the candidate calling subprocess itself is not). Code with no
    real file behind it counts as a candidate's."""
    frame = sys._getframe(2)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not _is_stdlib(filename):
            if filename.startswith(scratch) or not os.path.isfile(filename):
                return filename
            return None
        frame = frame.f_back
    return None


def guard_processes(scratch: Path) -> list[str]:
    """Make candidate code unable to start processes or signal other ones through Python: the functions
    that do it (os/posix, `_posixsubprocess.fork_exec` under subprocess and multiprocessing) refuse when the
    caller is a candidate (`candidate_caller`). ``os.kill`` is allowed on this process only. Returns what
    was wrapped. ctypes or the raw syscall get past this; the per-job sweep (`sweep_children`) and
    `kill_process_tree` are the backstop."""
    import _posixsubprocess
    import posix

    prefix = str(scratch) + os.sep
    wrapped = []

    def refusing(name, real):
        def guarded(*args, **kwargs):
            if candidate_caller(prefix) is not None:
                raise PermissionError(f"candidate code may not start or signal processes ({name} refused)")
            return real(*args, **kwargs)

        guarded.__name__ = getattr(real, "__name__", name)
        return guarded

    def own_process_only(real):
        def kill(pid, sig):
            if pid != os.getpid() and candidate_caller(prefix) is not None:
                raise PermissionError("candidate code may signal only its own process (os.kill refused)")
            return real(pid, sig)

        return kill

    for name in PROCESS_FUNCTIONS:
        real = getattr(os, name, None)
        if real is None:
            continue
        guarded = refusing(f"os.{name}", real)
        setattr(os, name, guarded)
        if getattr(posix, name, None) is real:
            setattr(posix, name, guarded)
        wrapped.append(name)
    kill = own_process_only(os.kill)
    os.kill = posix.kill = kill
    fork_exec = refusing("_posixsubprocess.fork_exec", _posixsubprocess.fork_exec)
    _posixsubprocess.fork_exec = fork_exec
    if "subprocess" in sys.modules:  # it binds fork_exec at import
        sys.modules["subprocess"]._fork_exec = fork_exec
    return [*wrapped, "kill", "_posixsubprocess.fork_exec"]


TIMER_SIGNALS = (signal.SIGALRM, signal.SIGVTALRM, signal.SIGPROF)
LOG_NAME = "worker.log"  # what a worker's stdout and stderr go to, in its working directory (CleanSlate)


def ignore_timer_signals() -> None:
    """The worker uses no interval timer, so a timer's signal can only come from a candidate: ignored, it
    cannot kill the worker in the middle of that candidate's own job (the timers themselves are cancelled
    after every job by ``CleanSlate``). A candidate that sets its own handler back gets what it asked for,
    charged to its own job."""
    for s in TIMER_SIGNALS:
        signal.signal(s, signal.SIG_IGN)


# -- between jobs -----------------------------------------------------------------------------------------


class CleanSlate:
    """What a worker restores after every job, before it reports the result (so anything that goes wrong
    while restoring is charged to that job): working directory (re-created if deleted), stdout/stderr on the
    worker's log (re-opened if closed, redirected or deleted; trimmed past ``log_limit``), signal handlers,
    signal mask and interval timers as they were at start-up, and no child processes left running."""

    def __init__(self, workdir: Path, log_limit: int):
        self.workdir, self.log, self.log_limit = workdir, workdir / LOG_NAME, log_limit
        self.log_fd = -1
        self._open_log()
        self.stdout, self.stderr = sys.stdout, sys.stderr
        self.handlers: dict = {}
        self.mask: set = set()
        self.keep: frozenset[int] = frozenset()

    def _open_log(self) -> None:
        # O_APPEND: after a trim, writes start again at the end of the now-empty file, not at the old offset
        fd = os.open(self.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.log_fd = fd if fd > 2 else os.dup(fd)  # fds 0-2 are what candidates close or redirect
        if self.log_fd != fd:
            os.close(fd)
        os.set_inheritable(self.log_fd, False)

    def snapshot(self) -> None:
        """Record the worker's signal state once it is set up (torch and the plugins loaded)."""
        self.handlers = {}
        for s in signal.valid_signals():
            if s in (signal.SIGKILL, signal.SIGSTOP):
                continue
            try:
                handler = signal.getsignal(s)
            except (ValueError, OSError):
                continue
            if handler is not None:
                self.handlers[s] = handler
        self.mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
        self.keep = frozenset(descendants(os.getpid()))

    def restore(self) -> list[str]:
        """Put the worker back as it was; returns the child processes that had to be killed."""
        self._restore_directory()
        self._restore_output()
        self._restore_signals()
        return sweep_children(self.keep)

    def _restore_directory(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        os.chdir(self.workdir)
        if str(self.workdir) not in sys.path:
            sys.path.insert(0, str(self.workdir))

    def _restore_output(self) -> None:
        try:
            log_gone = os.fstat(self.log_fd).st_nlink == 0 or not self.log.exists()
        except OSError:  # our own descriptor was closed
            log_gone = True
        if log_gone:
            with suppress(OSError):
                os.close(self.log_fd)
            self._open_log()
        with suppress(OSError):
            if os.fstat(self.log_fd).st_size > self.log_limit:
                os.ftruncate(self.log_fd, 0)
        for fd in (1, 2):
            os.dup2(self.log_fd, fd)
        for name, original in (("stdout", self.stdout), ("stderr", self.stderr)):
            fd = 1 if name == "stdout" else 2
            stream = original if not original.closed else open(fd, "w", buffering=1, closefd=False)
            if stream is not original:
                setattr(self, name, stream)
            setattr(sys, name, stream)

    def _restore_signals(self) -> None:
        for which in (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF):
            signal.setitimer(which, 0)
        for s, handler in self.handlers.items():
            with suppress(ValueError, OSError):
                if signal.getsignal(s) != handler:
                    signal.signal(s, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, self.mask)

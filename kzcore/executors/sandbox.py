"""The fences a worker process puts up around candidate code: no network, a read-only filesystem outside its
scratch directory, capped memory and files, no new processes, no secrets left in its environment, and a
clean slate between jobs. A candidate still runs inside
the worker's own Python process, so these are limits on what a candidate can reach, not a security boundary:
docs/verifier.md lists what each one catches and what gets past it.

Neighbours: `executors.worker` calls these in the worker; `executors.local` kills a worker together with the
processes it started (`kill_process_tree`). Linux-only pieces degrade to no-ops elsewhere."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import sysconfig
import time
from collections.abc import Sequence
from pathlib import Path

CLONE_NEWNS = 0x00020000  # <linux/sched.h>
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
# <sys/mount.h>
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC, MS_PRIVATE, MS_RELATIME = 1024, 2048, 4096, 16384, 1 << 18, 1 << 21
MOUNT_OPTION_FLAGS = {
    "nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
    "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME,
}  # fmt: skip
KERNEL_FILESYSTEMS = ("/proc", "/sys", "/dev")  # devices, shared memory and process files stay as they are
PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
GIB = 1 << 30

# os/posix functions that start or replace a process, or signal another one
PROCESS_FUNCTIONS = (
    "fork forkpty system popen posix_spawn posix_spawnp execv execve execl execle execlp execlpe execvp execvpe "
    "spawnv spawnve spawnvp spawnvpe spawnl spawnle spawnlp spawnlpe killpg pidfd_open"
).split()

_STDLIB = sysconfig.get_paths()["stdlib"] + os.sep


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _thread_count() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 1


# -- network ----------------------------------------------------------------------------------------------


def isolate_network(use_namespace: bool = True) -> str:
    """Cut this process off the network; returns which fence is up.

    Prefers a new, empty network namespace (only a loopback device, and that one down: every connect fails
    with "Network is unreachable", including to 127.0.0.1 and to DNS). That needs CAP_SYS_ADMIN (root), or
    else an unprivileged user namespace, which the kernel grants only to a single-threaded process, so this
    must run before torch or CUDA start threads. Existing sockets (the pipe to the pool) keep working.
    Falls back to refusing INET sockets at the Python level (`block_sockets`). Namespaces are per thread:
    threads that already exist stay outside, so the Python-level block is added when there are any.
    Unverified on a GPU machine: CUDA itself needs no network, but the lead's GPU run is the check."""
    fence = ""
    if use_namespace and sys.platform == "linux":
        threads = _thread_count()
        libc = _libc()
        if libc.unshare(CLONE_NEWNET) == 0:
            fence = "netns"
        else:
            uid, gid = os.getuid(), os.getgid()
            if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0:
                _map_ids(uid, gid)
                fence = "userns+netns"
        if fence and threads == 1:
            return fence
    block_sockets()
    return f"{fence}+socket-block" if fence else "socket-block"


def _map_ids(uid: int, gid: int) -> None:
    """Keep our own uid/gid inside the new user namespace (files stay ours; others are `nobody`)."""
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        try:
            Path(f"/proc/self/{name}").write_text(text)
        except OSError:
            pass


def block_sockets() -> None:
    """Refuse IPv4/IPv6 connects, sends, binds and name lookups through the `socket` module. A candidate
    can get around it (the `_socket` extension, ctypes), which is why the namespace comes first and why the
    static check refuses those imports."""
    import socket

    def refuse(what):
        def method(self, *args, **kwargs):
            if self.family in (socket.AF_INET, socket.AF_INET6):
                raise PermissionError(f"network access is disabled in evaluator workers ({what})")
            return getattr(super(socket.socket, self), what)(*args, **kwargs)

        return method

    for what in ("connect", "connect_ex", "bind", "sendto", "sendmsg"):
        setattr(socket.socket, what, refuse(what))

    def refuse_call(name):
        def call(*args, **kwargs):
            raise PermissionError(f"network access is disabled in evaluator workers (socket.{name})")

        return call

    for name in ("getaddrinfo", "gethostbyname", "gethostbyname_ex", "gethostbyaddr", "create_connection"):
        setattr(socket, name, refuse_call(name))


# -- filesystem -------------------------------------------------------------------------------------------


def _unescape(field: str) -> str:
    """Mount points in mountinfo escape space, tab, newline and backslash as octal (\\040)."""
    import re

    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mounts() -> list[tuple[str, str]]:
    """(mount point, per-mount options) of every mount this process sees, from /proc/self/mountinfo."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if len(fields) > 5:
            out.append((_unescape(fields[4]), fields[5]))
    return out


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def readonly_filesystem(writable: list[Path]) -> str:
    """Make every filesystem this process sees read-only except ``writable`` (and /proc, /sys, /dev), in a
    mount namespace of its own: a candidate can then damage nothing outside its scratch directory and the
    caches it is given (``shutil.rmtree("/etc")`` fails with EROFS instead of deleting the machine's /etc).
    Needs a single-threaded process and CAP_SYS_ADMIN (root, or the user namespace ``isolate_network`` may
    have made). Returns the fence's description: "readonly" or "off (why)".

    Mount propagation is turned off first, so nothing done here reaches the host's mount namespace. Each
    writable path is bind-mounted onto itself (a mount of its own, left writable), then every other mount
    point is remounted read-only with its per-mount flags kept (a user namespace may not clear them)."""
    if sys.platform != "linux":
        return "off (not Linux)"
    libc = _libc()
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]

    def mount(source: str | None, target: str, flags: int) -> None:
        src = source.encode() if source else None
        if libc.mount(src, target.encode(), None, flags, None) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"mount {target}: {os.strerror(err)}")

    if libc.unshare(CLONE_NEWNS) != 0:
        return f"off (no mount namespace: {os.strerror(ctypes.get_errno())})"
    try:
        mount(None, "/", MS_REC | MS_PRIVATE)
        keep = []
        for path in writable:
            path.mkdir(parents=True, exist_ok=True)
            real = os.path.realpath(path)
            mount(real, real, MS_BIND | MS_REC)
            keep.append(real)
        for point, options in mounts():
            if any(_within(point, root) for root in (*KERNEL_FILESYSTEMS, *keep)):
                continue
            flags = MS_REMOUNT | MS_BIND | MS_RDONLY
            for option in options.split(","):
                flags |= MOUNT_OPTION_FLAGS.get(option, 0)
            try:
                mount(None, point, flags)
            except OSError:
                if point == "/":
                    raise
    except OSError as exc:
        return f"off ({exc.strerror or exc})"
    return "readonly"


def writable_paths(scratch: Path, caches: Sequence[str] = ()) -> list[Path]:
    """What a worker may write: its scratch directory, ``caches`` (the registered languages' compiler caches,
    `Language.writable_caches`), ~/.cache, kzcore's cache, $XDG_CACHE_HOME and the directories listed in
    KZ_SANDBOX_WRITABLE (os.pathsep-separated). Missing ones are created (a bind mount needs its target)."""
    from kzcore.cache import cache_root

    paths = [scratch, *map(Path, caches), Path.home() / ".cache", cache_root()]
    if os.environ.get("XDG_CACHE_HOME"):
        paths.append(Path(os.environ["XDG_CACHE_HOME"]))
    paths += [Path(p) for p in os.environ.get("KZ_SANDBOX_WRITABLE", "").split(os.pathsep) if p]
    return paths


# -- memory, files, secrets -----------------------------------------------------------------------------


def limit_memory(limit: int | None, device: str) -> str:
    """Cap this process's memory at ``limit`` bytes (soft and hard: a candidate cannot raise it again), so a
    runaway allocation fails with MemoryError in this worker instead of waking the machine's OOM killer.

    CPU workers cap their address space (RLIMIT_AS: counts every mapping). CUDA reserves terabytes of
    address space for unified addressing, so GPU workers cap the data segment instead (RLIMIT_DATA: private
    writable memory, since Linux 4.7); shared mappings get past that one. Unverified on a GPU machine."""
    if not limit:
        return "none"
    import resource

    which, name = (resource.RLIMIT_AS, "RLIMIT_AS") if device == "cpu" else (resource.RLIMIT_DATA, "RLIMIT_DATA")
    try:
        _, hard = resource.getrlimit(which)
        cap = limit if hard == resource.RLIM_INFINITY else min(limit, hard)
        resource.setrlimit(which, (cap, cap))
    except (ValueError, OSError):
        return "none"
    return name


def memory_limit_for(workers: int) -> int | None:
    """Bytes each of ``workers`` workers may use: 80 % of this machine's RAM shared out, at least 8 GiB.
    ``KZ_WORKER_MEMORY_GB`` overrides it (0 turns the limit off)."""
    override = os.environ.get("KZ_WORKER_MEMORY_GB")
    if override is not None:
        return int(float(override) * GIB) or None
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None
    return max(8 * GIB, int(0.8 * total / max(1, workers)))


def wipe_start_environment(names: list[str]) -> int:
    """Blank the entries for ``names`` in the environment block this process was started with.

    Deleting from os.environ does not reach that block, and /proc/self/environ shows it, so a spawned
    worker would still hand its parent's tokens to a candidate that reads the file. Returns how many
    entries were blanked."""
    if not names or sys.platform != "linux":
        return 0
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        start, end = int(fields[47]), int(fields[48])  # env_start, env_end (fields 50 and 51 of proc(5))
    except (OSError, ValueError, IndexError):
        return 0
    if not 0 < end - start < 1 << 24:
        return 0
    block = ctypes.string_at(start, end - start)
    wanted, offset, wiped = {n.encode() for n in names}, 0, 0
    for entry in block.split(b"\0"):
        if entry.split(b"=", 1)[0] in wanted:
            ctypes.memset(start + offset, 0, len(entry))
            wiped += 1
        offset += len(entry) + 1
    return wiped


# -- processes --------------------------------------------------------------------------------------------


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
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    out[int(entry.name)] = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
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
        try:
            os.kill(p, sig)
        except OSError:
            pass


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
        self.workdir, self.log, self.log_limit = workdir, workdir / "worker.log", log_limit
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
            try:
                os.close(self.log_fd)
            except OSError:
                pass
            self._open_log()
        try:
            if os.fstat(self.log_fd).st_size > self.log_limit:
                os.ftruncate(self.log_fd, 0)
        except OSError:
            pass
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
            try:
                if signal.getsignal(s) != handler:
                    signal.signal(s, handler)
            except (ValueError, OSError):
                pass
        signal.pthread_sigmask(signal.SIG_SETMASK, self.mask)

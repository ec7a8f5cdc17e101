"""The fences a worker process puts up around candidate code: no network, a read-only filesystem outside its
scratch directory (or, where that cannot be had, a Python-level write audit), compiler caches of its own
there, nothing writable that kzcore or a policy reads, capped memory and files, no new processes, no secrets
left in its environment, and a clean slate between jobs. A candidate still runs inside
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


# Compiler caches every worker gets of its own, under its scratch directory: each variable points there, so
# what a candidate writes into a compiler's cache reaches no other worker, no later run, no kz process and no
# policy (vLLM and torch.compile read ~/.triton and ~/.cache too). A variable the parent or a language set is
# overridden: a shared cache is exactly what a worker must not write.
PRIVATE_CACHES = {
    "XDG_CACHE_HOME": "xdg",  # whatever else caches under ~/.cache (torch hub, pip, ...)
    "TRITON_HOME": "triton-home",  # Triton's ~/.triton: its cache, dump and override directories
    "TRITON_CACHE_DIR": "triton",  # kernels and the C launchers Triton builds for them
    "CUDA_CACHE_PATH": "nv",  # the CUDA driver's PTX JIT cache (default ~/.nv/ComputeCache)
    "CUPY_CACHE_DIR": "cupy",  # CuPy's NVRTC kernels (default ~/.cupy/kernel_cache)
    "TORCH_EXTENSIONS_DIR": "torch-extensions",  # torch.utils.cpp_extension builds (default ~/.cache)
    "PYTORCH_KERNEL_CACHE_PATH": "torch-kernels",  # torch's jiterator/NVRTC kernels (default ~/.cache/torch)
    "TORCHINDUCTOR_CACHE_DIR": "torchinductor",  # torch.compile (default /tmp/torchinductor_<user>)
    "NUMBA_CACHE_DIR": "numba",
}
# Model, dataset and hub caches a policy or the trainer reads: never writable from a worker, whatever a
# language declares (`writable_paths`)
HF_CACHE_VARIABLES = ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_CACHE", "HF_DATASETS_CACHE")
SHARED_CACHE_VARIABLES = (*HF_CACHE_VARIABLES, "TORCH_HOME", "VLLM_CACHE_ROOT")


def private_caches(root: Path) -> dict[str, str]:
    """The environment that gives this worker its own compiler caches (`PRIVATE_CACHES`), made under
    ``root/caches``; ``KZ_CACHE`` is pinned to the kzcore cache the parent uses, so moving XDG_CACHE_HOME does
    not move where kzcore (and a language's declared cache inside it) is read. Call it after the filesystem
    fence: the shared locations are worked out from the parent's environment."""
    from kzcore.cache import cache_root

    env = {"KZ_CACHE": str(cache_root())}
    for variable, name in PRIVATE_CACHES.items():
        path = root / "caches" / name
        path.mkdir(parents=True, exist_ok=True)
        env[variable] = str(path)
    return env


def shared_caches() -> tuple[list[Path], list[Path]]:
    """(containers, trees) that kzcore, a policy or another process reads, from this process's environment.
    A container (home, ~/.cache, $XDG_CACHE_HOME, the kzcore cache) may hold a language's own cache
    directory, but is never writable as a whole; nothing inside a tree (kzcore's problem checks, the model
    and dataset caches, every shared compiler cache that `PRIVATE_CACHES` replaces) ever is."""
    from kzcore.cache import PROBLEM_CHECKS, cache_root

    home = Path.home()
    env = os.environ
    containers = [home, home / ".cache", cache_root()]
    if env.get("XDG_CACHE_HOME"):
        containers.append(Path(env["XDG_CACHE_HOME"]))
    trees = [cache_root() / PROBLEM_CHECKS, home / ".cache" / "huggingface", home / ".triton", home / ".nv"]
    trees += [home / ".cupy", home / ".cache" / "torch", home / ".cache" / "torch_extensions"]
    if env.get("TRITON_HOME"):
        trees.append(Path(env["TRITON_HOME"]) / ".triton")
    trees += [Path(env[v]) for v in (*PRIVATE_CACHES, *SHARED_CACHE_VARIABLES) if env.get(v) and v != "XDG_CACHE_HOME"]
    return containers, trees


def _resolved(path: Path) -> Path:
    return Path(os.path.realpath(os.path.expanduser(path)))


def shared_overlap(path: Path, containers: Sequence[Path], trees: Sequence[Path]) -> Path | None:
    """The shared directory that writing to ``path`` would expose (None when there is none): a container or
    tree ``path`` is or holds, or a tree it lies inside."""
    target = _resolved(path)
    for shared in map(_resolved, (*containers, *trees)):
        if target == shared or shared.is_relative_to(target):
            return shared
    for shared in map(_resolved, trees):
        if target.is_relative_to(shared):
            return shared
    return None


def writable_paths(scratch: Path, caches: Sequence[str] = ()) -> list[Path]:
    """What a worker may write: its scratch directory (its working directory, temporary files and its private
    compiler caches, `private_caches`), and of ``caches`` (the registered languages' compiler caches,
    `Language.writable_caches`) and the directories listed in KZ_SANDBOX_WRITABLE (os.pathsep-separated) those
    that expose no shared cache (`shared_overlap`: not ~/.cache, not the kzcore cache or its problem checks,
    not a model cache, not ~/.triton, ...). Missing ones are created (a bind mount needs its target)."""
    containers, trees = shared_caches()
    asked = [*map(Path, caches), *(Path(p) for p in os.environ.get("KZ_SANDBOX_WRITABLE", "").split(os.pathsep) if p)]
    return [scratch, *(p for p in asked if shared_overlap(p, containers, trees) is None)]


def refused_writable(caches: Sequence[str] = ()) -> list[str]:
    """The asked-for writable directories `writable_paths` leaves read-only, each with the shared one it exposes."""
    containers, trees = shared_caches()
    asked = [*map(Path, caches), *(Path(p) for p in os.environ.get("KZ_SANDBOX_WRITABLE", "").split(os.pathsep) if p)]
    out = []
    for path in asked:
        shared = shared_overlap(path, containers, trees)
        if shared is not None:
            out.append(f"{path} ({shared})" if _resolved(path) != shared else str(path))
    return out


# Python-level audit events that create, change or remove a file: event -> ((index of a path argument, index
# of the dir_fd it is relative to or None), ...), and whether a link as the path's last component is followed
WRITE_EVENTS = {
    "os.remove": (((0, 1),), False),
    "os.rmdir": (((0, 1),), False),
    "os.mkdir": (((0, 2),), False),
    "os.rename": (((0, 2), (1, 3)), False),  # os.replace too; the source's directory changes as well
    "os.symlink": (((1, 2),), False),
    "os.link": (((0, 2), (1, 3)), True),  # a hard link to a file outside is a way to write it later
    "os.chmod": (((0, 2),), True),
    "os.chown": (((0, 3),), True),
    "os.utime": (((0, 3),), True),
    "os.truncate": (((0, None),), True),
    "os.setxattr": (((0, None),), True),
    "os.removexattr": (((0, None),), True),
    "shutil.rmtree": (((0, 1),), False),
    "sqlite3.connect": (((0, None),), True),
}
OPEN_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _event_path(value, dir_fd, follow: bool) -> str | None:
    """The real path an event's argument names (None: a file descriptor, or no path). A path relative to a
    directory descriptor (``dir_fd`` >= 0; audit events give -1 for none) is resolved through /proc."""
    if isinstance(value, int) or value is None:
        return None
    try:
        path = os.fsdecode(value)
    except TypeError:
        return None
    if not os.path.isabs(path):
        base = os.getcwd()
        if isinstance(dir_fd, int) and dir_fd >= 0:
            try:
                base = os.readlink(f"/proc/self/fd/{dir_fd}")
            except OSError:
                return "?" + path  # an unknown directory: never inside an allowed one
        path = os.path.join(base, path)
    if follow:
        return os.path.realpath(path)
    head, tail = os.path.split(os.path.normpath(path))
    return os.path.join(os.path.realpath(head), tail)


def audit_writes(writable: Sequence[Path]) -> str:
    """Refuse, at the Python level, every file write outside ``writable`` (and /dev, /proc, /sys): an audit
    hook (PEP 578, which nothing can remove) raises PermissionError for an ``open`` for writing, and for
    creating, renaming, linking, removing or changing a file, whose real path (links followed) lies
    elsewhere; ``os.open`` relative to a directory descriptor (which its audit event does not name) is
    checked by a wrapper. It stands where the read-only filesystem cannot be put up (no mount namespace):
    C code (torch.save's writer among it), ctypes or a raw syscall get past it. Returns the fence's name."""
    import posix

    allowed = tuple(os.path.realpath(p) for p in (*writable, *KERNEL_FILESYSTEMS))

    def check(path: str | None, what: str) -> None:
        if path is not None and not any(path == root or path.startswith(root.rstrip("/") + "/") for root in allowed):
            raise PermissionError(
                13, f"evaluator workers may not write outside their scratch and caches ({what})", path
            )

    def hook(event: str, args: tuple) -> None:
        if event == "open":
            path, mode, flags = (*args, None, None, None)[:3]
            if (isinstance(flags, int) and flags & OPEN_WRITE_FLAGS) or (
                isinstance(mode, str) and any(c in mode for c in "wax+")
            ):
                check(_event_path(path, None, True), "open for writing")
            return
        spec = WRITE_EVENTS.get(event)
        if spec is None:
            return
        places, follow = spec
        for at, fd_at in places:
            if at >= len(args):
                continue
            if event == "sqlite3.connect" and os.fsdecode(args[at]) in ("", ":memory:"):
                continue  # an in-memory database (a "file:" URI is resolved as a path: refused)
            real = _event_path(args[at], args[fd_at] if fd_at is not None and fd_at < len(args) else None, follow)
            if event == "os.mkdir" and real is not None and os.path.isdir(real):
                continue  # exists already: nothing changes (os.makedirs(exist_ok=True) walks existing parents)
            check(real, event)

    real_open = os.open

    def open_checked(path, flags, mode=0o777, *, dir_fd=None):
        if dir_fd is not None and flags & OPEN_WRITE_FLAGS:
            check(_event_path(path, dir_fd, True), "open for writing")
        return real_open(path, flags, mode, dir_fd=dir_fd)

    open_checked.__name__ = real_open.__name__
    os.open = posix.open = open_checked
    sys.addaudithook(hook)
    return "audit-hook"


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

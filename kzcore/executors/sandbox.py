"""The fences a worker process puts up around candidate code: no network, a read-only filesystem outside its
scratch directory (or, where that cannot be had, a Python-level write audit), compiler caches of its own
there, nothing writable that kzcore or a policy reads, capped memory and files, no new processes, no secrets
left in its environment, and a clean slate between jobs. A candidate still runs inside
the worker's own Python process, so these are limits on what a candidate can reach, not a security boundary:
docs/verifier.md lists what each one catches and what gets past it.

Neighbours: `executors.caches` (the worker's own compiler caches, what may be written, the write audit) and
`executors.processes` (no new processes, the kill of a worker's process tree, the clean slate between jobs)
hold the rest of the fences; `executors.worker` puts them up. Linux-only pieces degrade to no-ops elsewhere."""

from __future__ import annotations

import ctypes
import os
import sys
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
GIB = 1 << 30


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

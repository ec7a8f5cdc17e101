"""Where an evaluator worker may write: compiler caches of its own under its scratch directory, nothing that
kzcore, a policy or the trainer reads (`writable_paths`), and, where the read-only filesystem cannot be put up,
an audit hook refusing Python-level writes elsewhere (`audit_writes`). Neighbours: `executors.sandbox` (the
read-only filesystem these paths are carved out of), `executors.worker` (puts them in place)."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from kzcore.executors.sandbox import KERNEL_FILESYSTEMS

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
    `Language.writable_caches`), the directories listed in KZ_SANDBOX_WRITABLE (os.pathsep-separated) and the
    profile directory KZ_WORKER_PROFILE names (the worker writes its cProfiles there) those that expose no shared
    cache (`shared_overlap`: not ~/.cache, not the kzcore cache or its problem checks, not a model cache, not
    ~/.triton, ...). Missing ones are created (a bind mount needs its target)."""
    containers, trees = shared_caches()
    return [scratch, *(p for p in _asked(caches) if shared_overlap(p, containers, trees) is None)]


def _asked(caches: Sequence[str]) -> list[Path]:
    """The directories a worker is asked to write: ``caches``, KZ_SANDBOX_WRITABLE's and KZ_WORKER_PROFILE's."""
    listed = [*os.environ.get("KZ_SANDBOX_WRITABLE", "").split(os.pathsep), os.environ.get("KZ_WORKER_PROFILE", "")]
    return [*map(Path, caches), *(Path(p) for p in listed if p)]


def refused_writable(caches: Sequence[str] = ()) -> list[str]:
    """The asked-for writable directories `writable_paths` leaves read-only, each with the shared one it exposes."""
    containers, trees = shared_caches()
    out = []
    for path in _asked(caches):
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


# a process's memory, read and written as a file: a tensor's bytes changed with no torch call and no kernel
PROCESS_MEMORY = re.compile(r"/proc/(\d+|self|thread-self)(/task/\d+)?/(mem|pagemap)|/dev/k?mem")


def deny_process_memory() -> str:
    """Refuse, at the Python level, every ``open`` of a process's memory (``/proc/<pid>/mem``, ``pagemap``,
    ``/dev/mem``), in any mode: a candidate could otherwise read its inputs' bytes at ``data_ptr()`` and write
    an answer computed on the host into its output. An audit hook (PEP 578) for opens by path; ``os.open``
    relative to a directory descriptor is checked by a wrapper. Returns the fence's name."""
    import posix

    def check(path: str | None) -> None:
        if path is not None and PROCESS_MEMORY.fullmatch(path):
            raise PermissionError(13, "evaluator workers may not open a process's memory", path)

    def hook(event: str, args: tuple) -> None:
        if event == "open" and args:
            check(_event_path(args[0], None, True))

    real_open = os.open

    def open_checked(path, flags, mode=0o777, *, dir_fd=None):
        if dir_fd is not None:
            check(_event_path(path, dir_fd, True))
        return real_open(path, flags, mode, dir_fd=dir_fd)

    open_checked.__name__ = real_open.__name__
    os.open = posix.open = open_checked
    sys.addaudithook(hook)
    return "audit-hook"

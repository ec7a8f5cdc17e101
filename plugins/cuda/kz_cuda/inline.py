"""The cuda-inline dialect's builds: KernelBench's ``torch.utils.cpp_extension.load_inline`` calls, run
unchanged but redirected into a disk cache keyed by everything that decides the binary.

While a candidate module is imported, ``torch.utils.cpp_extension.load_inline`` is replaced by
``cached_load_inline``: the call's sources, functions and flags, the toolchain (torch, nvcc, the host
compiler, the Python ABI) and the target architecture are hashed; the extension is built by torch itself
with ``build_directory=<cache>/cuda-inline/<key>`` and ``name=kz_inline_<key>``, under an exclusive file
lock, so a second evaluation of the same source (in any process) only imports the built library. Compile
errors become ``CompileError`` with the log trimmed by ``inline_log`` and are cached as well.

``prebuild`` (kz_cuda.prebuild) imports candidates in CPU processes in "build" mode: the same calls build
into the cache but nothing is loaded. Neighbours: ``inline_static`` (the static check), ``runtime`` (the
NVRTC dialect's loading).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import inspect
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

from kz_cuda.inline_log import import_failure, source_map, trim_build_log
from kzcore import CompileError

NAME = "cuda-inline"
DEFAULT_ARCH = "9.0"  # TORCH_CUDA_ARCH_LIST spelling of kz_cuda.compile.DEFAULT_ARCH (sm_90, the H200)
OK_MARKER = "kz-built.json"
ERROR_MARKER = "kz-error.json"
# Arguments that change where or how loudly torch builds, never what it builds.
NOT_IN_KEY = frozenset({"name", "build_directory", "verbose", "keep_intermediates"})
NEEDS_GPU = "cuda-inline candidates need a GPU; {what}"

# Per process: "load" (a worker: build if needed, then import) or "build" (a prebuild process: build only);
# the device the worker evaluates on; the candidate's source (to map error lines); what each call did.
_state: dict = {"mode": "load", "device": None, "arch": None, "module_source": None, "events": []}
_real: list = []  # torch's own load_inline, captured before it is first replaced


def cache_root() -> Path:
    from kzcore import cache_dir

    return cache_dir(NAME)


@functools.cache
def _tool_output(*command: str) -> str:
    if not command[0] or not shutil.which(command[0]):
        return "none"
    try:
        done = subprocess.run(list(command), capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unavailable: {type(exc).__name__}"
    return (done.stdout or done.stderr).strip()


def nvcc_path() -> str:
    from torch.utils import cpp_extension

    if cpp_extension.CUDA_HOME:
        return os.path.join(cpp_extension.CUDA_HOME, "bin", "nvcc")
    return shutil.which("nvcc") or ""


def toolchain() -> dict[str, str | None]:
    """What builds the binary besides the sources: part of every cache key."""
    import torch

    return {
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "nvcc": _tool_output(nvcc_path(), "--version"),
        "cxx": _tool_output(os.environ.get("CXX", "c++"), "--version").splitlines()[0],
        "python_abi": sysconfig.get_config_var("EXT_SUFFIX"),
    }


def can_build_cuda() -> bool:
    """Whether this process's torch can build CUDA extensions (a CUDA build of torch, and nvcc found)."""
    import torch
    from torch.utils import cpp_extension

    return torch.version.cuda is not None and cpp_extension.CUDA_HOME is not None


def current_arch() -> str:
    """The architecture builds target here: TORCH_CUDA_ARCH_LIST when set, else this worker's GPU, else
    DEFAULT_ARCH. The prebuild processes are given the same value (``prebuild.target_archs``)."""
    if _state["arch"]:
        return _state["arch"]
    if os.environ.get("TORCH_CUDA_ARCH_LIST"):
        return os.environ["TORCH_CUDA_ARCH_LIST"]
    if _state["device"] == "cuda":
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return f"{major}.{minor}"
    return DEFAULT_ARCH


def _as_list(value) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def bind_arguments(args: tuple, kwargs: dict) -> dict:
    """load_inline's arguments by name, defaults filled in (torch's own signature, whatever its version)."""
    bound = inspect.signature(real_load_inline()).bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def build_key(arguments: dict, arch: str) -> str:
    """sha256 over every argument that decides the binary, the toolchain and the target architecture."""
    payload = {k: v for k, v in arguments.items() if k not in NOT_IN_KEY}
    for k in ("cpp_sources", "cuda_sources", "sycl_sources"):
        if k in payload:
            payload[k] = _as_list(payload[k])
    functions = payload.get("functions")
    if isinstance(functions, str):
        payload["functions"] = [functions]
    text = json.dumps({"arguments": payload, "toolchain": toolchain(), "arch": arch}, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


def real_load_inline():
    if not _real:
        from torch.utils import cpp_extension

        _real.append(cpp_extension.load_inline)
    return _real[0]


@contextlib.contextmanager
def build_lock(directory: Path):
    """An exclusive lock on one cache entry, released by the kernel even when its holder is killed."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "kz.lock", "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def _arch_env(arch: str):
    old = os.environ.get("TORCH_CUDA_ARCH_LIST")
    os.environ["TORCH_CUDA_ARCH_LIST"] = arch
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TORCH_CUDA_ARCH_LIST", None)
        else:
            os.environ["TORCH_CUDA_ARCH_LIST"] = old


@contextlib.contextmanager
def _without_import():
    """Build-only: torch builds as usual, then its final import step is skipped."""
    from torch.utils import cpp_extension

    original = getattr(cpp_extension, "_import_module_from_library", None)
    if original is None:  # another torch version: the library is imported too, which is harmless
        yield
        return
    cpp_extension._import_module_from_library = lambda *args, **kwargs: None
    try:
        yield
    finally:
        cpp_extension._import_module_from_library = original


class UnloadedExtension:
    """Stands for an extension that cannot run in this process: every function it is asked for raises."""

    def __init__(self, name: str, reason: str):
        self._name, self._reason = name, reason

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)

        def unavailable(*args, **kwargs):
            from kz_cuda.launch import GPURequiredError

            raise GPURequiredError(self._reason)

        unavailable.__name__ = attr
        return unavailable

    def __repr__(self) -> str:
        return f"<cuda-inline extension {self._name} (not loaded: {self._reason})>"


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)


def _record(key: str, status: str, seconds: float, log: str = "") -> None:
    _state["events"].append({"key": key, "status": status, "seconds": round(seconds, 3), "log": log})


def cached_load_inline(*args, **kwargs):
    """``torch.utils.cpp_extension.load_inline`` with the same arguments, built in the disk cache."""
    arguments = bind_arguments(args, kwargs)
    arch = current_arch()
    key = build_key(arguments, arch)[:32]
    directory = cache_root() / key
    name = f"kz_inline_{key}"
    cuda_sources = _as_list(arguments.get("cuda_sources"))
    t0 = time.perf_counter()
    with build_lock(directory):
        failed = directory / ERROR_MARKER
        if failed.is_file():
            log = json.loads(failed.read_text())["log"]
            _record(key, "compile_error", time.perf_counter() - t0, log)
            raise CompileError(log)
        if cuda_sources and not can_build_cuda():
            import torch

            _record(key, "unbuildable", time.perf_counter() - t0)
            what = f"not built: this torch ({torch.__version__}) cannot build CUDA extensions"
            return UnloadedExtension(name, NEEDS_GPU.format(what=what))
        cached = (directory / OK_MARKER).is_file()
        if cached and _state["mode"] == "build":
            _record(key, "cached", time.perf_counter() - t0)
            return UnloadedExtension(name, "built only (prebuild); not loaded")
        module = _build(arguments, directory, name, key, arch)
        if not cached:
            _write_json(directory / OK_MARKER, {"key": key, "arch": arch, "toolchain": toolchain()})
        _record(key, "cached" if cached else "built", time.perf_counter() - t0)
    if _state["mode"] == "build":
        return UnloadedExtension(name, "built only (prebuild); not loaded")
    if cuda_sources and _state["device"] == "cpu":
        return UnloadedExtension(name, NEEDS_GPU.format(what=f"built OK with nvcc for sm_{arch.replace('.', '')}"))
    return module


def _build(arguments: dict, directory: Path, name: str, key: str, arch: str):
    """Run torch's own load_inline into ``directory`` (caller holds the lock)."""
    call = dict(arguments, name=name, build_directory=str(directory), verbose=False)
    for k in ("cpp_sources", "cuda_sources", "sycl_sources"):
        if k in call and call[k] is not None:
            call[k] = _as_list(call[k])  # torch inserts its headers into the lists it is given
    (directory / "lock").unlink(missing_ok=True)  # torch's own baton, left behind by a killed build
    no_import = _without_import() if _state["mode"] == "build" else contextlib.nullcontext()
    try:
        with _arch_env(arch), no_import:
            return real_load_inline()(**call)
    except RuntimeError as exc:
        if "Error building extension" not in str(exc):
            raise
        smap = source_map(
            _as_list(arguments.get("cpp_sources")),
            _as_list(arguments.get("cuda_sources")),
            not arguments.get("no_implicit_headers", False),
            _state["module_source"],
        )
        trimmed, errors = trim_build_log(str(exc), smap)
        compiler = "nvcc" if arguments.get("cuda_sources") else "the C++ compiler"
        log = f"load_inline could not build the extension ({compiler}):\n{trimmed}"
        if errors:  # a real compile error, the same next time: remember it
            _write_json(directory / ERROR_MARKER, {"key": key, "log": log})
        _record(key, "compile_error", 0.0, log)
        raise CompileError(log) from None
    except ImportError as exc:
        raise CompileError(import_failure(str(exc))) from None


@contextlib.contextmanager
def intercepted(mode: str, module_source: str | None = None):
    """Replace ``torch.utils.cpp_extension.load_inline`` by ``cached_load_inline`` (``mode`` "load" or
    "build") for the duration; a candidate's ``from torch.utils.cpp_extension import load_inline`` made
    inside keeps the cached version for good."""
    from torch.utils import cpp_extension

    real_load_inline()
    previous = cpp_extension.load_inline
    saved = _state["mode"], _state["module_source"]
    cpp_extension.load_inline = cached_load_inline
    _state["mode"], _state["module_source"] = mode, module_source
    try:
        yield
    finally:
        cpp_extension.load_inline = previous
        _state["mode"], _state["module_source"] = saved


def load_module(path: Path, device: str):
    """Import a cuda-inline candidate in a worker: its load_inline calls build into (or load from) the
    cache. On a CPU worker CUDA extensions are built when torch can, never run: their functions raise
    GPURequiredError, which the pipeline files as ``runtime_error``."""
    from kzcore import import_module_from_file

    _state["device"] = device
    source = path.read_text()
    with intercepted("load", source):
        return import_module_from_file(path, path.stem)


def take_events() -> list[dict]:
    """What the load_inline calls since the last take did (built, cached, compile_error, unbuildable)."""
    events, _state["events"] = _state["events"], []
    return events


def warm_up(device: str) -> None:
    """Remember the worker's device and compute the toolchain fingerprint (it runs nvcc and c++ once)."""
    _state["device"] = device
    try:
        toolchain()
    except Exception as exc:  # an optimisation only: a candidate meets the same error itself
        print(f"kz_cuda: cuda-inline warm-up failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)

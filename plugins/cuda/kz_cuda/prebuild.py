"""Ahead-of-time builds for cuda-inline candidates, on CPU processes, before any GPU evaluates them.

``prebuild(sources, workers)`` runs each distinct candidate's module top level in its own fresh Python
process (``python -m kz_cuda.prebuild``; no GPU visible, credentials scrubbed, a deadline) with load_inline
in "build" mode: each call builds into the disk cache of ``kz_cuda.inline`` and loads nothing. Up to
``workers`` such processes run at once. The GPU workers later find every extension built (or its compile
error cached) and only import it. A failure here is never fatal: the worker then builds the candidate
itself, as it would without a prebuild.
"""

from __future__ import annotations

import enum
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import attrs

TIMEOUT_S = 900.0
LOG_TAIL = 2000


class BuildStatus(enum.Enum):
    BUILT = "built"  # at least one extension compiled now
    CACHED = "cached"  # every extension was already in the cache
    COMPILE_ERROR = "compile_error"  # a load_inline call failed to compile (log holds the trimmed errors)
    NO_BUILD = "no_build"  # the module ran without calling load_inline
    UNBUILDABLE = "unbuildable"  # CUDA sources, but this torch cannot build CUDA extensions
    FAILED = "failed"  # the module's top level raised something else, crashed or ran out of time


@attrs.frozen
class BuildOutcome:
    """What prebuilding one candidate did."""

    status: BuildStatus
    seconds: float  # wall time of its build process, Python and torch start-up included
    keys: tuple[str, ...] = ()  # cache keys of its load_inline calls
    log: str = ""


def build_workers(n_sources: int) -> int:
    """KZ_BUILD_WORKERS, else half the CPU cores (a torch extension build runs two compilers at once)."""
    configured = os.environ.get("KZ_BUILD_WORKERS")
    workers = int(configured) if configured else max(1, (os.cpu_count() or 2) // 2)
    return max(1, min(workers, n_sources))


def target_archs(device: str) -> list[str]:
    """The architectures evaluation workers will ask for (``inline.current_arch`` on each): TORCH_CUDA_ARCH_LIST
    when set; on GPU runs each visible GPU's compute capability (from nvidia-smi, so this process never
    creates a CUDA context); else the default."""
    from kz_cuda.inline import DEFAULT_ARCH

    if os.environ.get("TORCH_CUDA_ARCH_LIST"):
        return [os.environ["TORCH_CUDA_ARCH_LIST"]]
    if device != "cpu" and shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=30,
            ).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        caps = sorted({line.strip() for line in out.splitlines() if line.strip()})
        if caps:
            return caps
    return [DEFAULT_ARCH]


def _child_env() -> dict[str, str]:
    from kzcore import scrub_environment

    env = dict(os.environ)
    scrub_environment(env)
    env.update(CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1")
    return env


def _run_one(source: str, archs: Sequence[str], timeout_s: float) -> BuildOutcome:
    scratch = Path(tempfile.mkdtemp(prefix="kz-prebuild-"))
    try:
        (scratch / "kz_prebuild_candidate.py").write_text(source)
        result = scratch / "outcome.json"
        log = scratch / "build.log"
        command = [sys.executable, "-m", "kz_cuda.prebuild", str(scratch / "kz_prebuild_candidate.py"), str(result)]
        t0 = time.perf_counter()
        with open(log, "wb") as out:
            try:
                proc = subprocess.run(
                    command + list(archs), cwd=scratch, env=_child_env(), stdout=out, stderr=out, timeout=timeout_s
                )
            except subprocess.TimeoutExpired:
                return BuildOutcome(
                    BuildStatus.FAILED, time.perf_counter() - t0, log=f"no result within {timeout_s:g} s"
                )
        seconds = round(time.perf_counter() - t0, 3)
        if not result.is_file():
            tail = log.read_text(errors="replace")[-LOG_TAIL:]
            return BuildOutcome(BuildStatus.FAILED, seconds, log=f"build process exited with {proc.returncode}\n{tail}")
        data = json.loads(result.read_text())
        return BuildOutcome(BuildStatus(data["status"]), seconds, tuple(data["keys"]), data["log"])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def prebuild(
    sources: list[str], workers: int, archs: Sequence[str] | None = None, timeout_s: float = TIMEOUT_S
) -> list[BuildOutcome]:
    """Build every load_inline extension the candidates' modules create at import, ``workers`` processes at
    a time, into the disk cache. One outcome per source, in order (identical sources are built once)."""
    archs = list(archs) if archs else target_archs("cuda")
    distinct = list(dict.fromkeys(sources))
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(distinct) or 1))) as pool:
        done = dict(zip(distinct, pool.map(lambda s: _run_one(s, archs, timeout_s), distinct)))
    return [done[s] for s in sources]


def prepare(sources: list[str], device: str) -> list[BuildOutcome]:
    """``kz_prepare_candidates`` for cuda-inline: prebuild the candidates that pass the static check, when
    this machine's torch can build CUDA extensions at all (otherwise the workers could not either)."""
    from kz_cuda.inline import can_build_cuda
    from kz_cuda.inline_static import check_source

    wanted = [s for s in dict.fromkeys(sources) if not check_source(s)]
    if not wanted or not can_build_cuda():
        return []
    return prebuild(wanted, build_workers(len(wanted)), target_archs(device))


# ------------------------------------------------------------------------------------------------------
# the build process
# ------------------------------------------------------------------------------------------------------


def _summarise(events: list[dict], error: str | None) -> dict:
    keys = [e["key"] for e in events]
    statuses = {e["status"] for e in events}
    if "compile_error" in statuses:
        log = next(e["log"] for e in events if e["status"] == "compile_error")
        return {"status": "compile_error", "keys": keys, "log": log}
    if error is not None:
        return {"status": "failed", "keys": keys, "log": error}
    if not events:
        return {"status": "no_build", "keys": keys, "log": ""}
    for status in ("unbuildable", "built"):
        if status in statuses:
            return {"status": status, "keys": keys, "log": ""}
    return {"status": "cached", "keys": keys, "log": ""}


def child_main(path: Path, result: Path, archs: list[str]) -> None:
    """Import the candidate once per architecture with load_inline in build mode; write the outcome."""
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    from kz_cuda import inline
    from kzcore import CompileError, import_module_from_file

    sys.path.insert(0, str(path.parent))
    source = path.read_text()
    error = None
    for i, arch in enumerate(archs):
        inline._state["arch"] = arch
        try:
            with inline.intercepted("build", source):
                import_module_from_file(path, f"{path.stem}_{i}")
        except CompileError:
            break
        except BaseException as exc:  # the candidate's own top level failed: the worker will say so
            error = f"{type(exc).__name__}: {exc}"[:LOG_TAIL]
            break
    result.write_text(json.dumps(_summarise(inline.take_events(), error)))


if __name__ == "__main__":
    child_main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:])
    sys.exit(0)

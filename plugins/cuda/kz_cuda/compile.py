"""NVRTC compilation of CUDA C++ source strings to cubin, cached in memory per worker.

NVRTC (through ``cuda.bindings.nvrtc``) needs no GPU, so compile errors are real verdicts on CPU-only
machines too. Candidates see no system headers: a small built-in prelude defines the fixed-width integer
types and the float limits kernels commonly use. Neighbours: ``launch`` loads the cubin and launches it;
``runtime`` compiles a candidate's kernel strings eagerly when it is loaded.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import attrs

from kzcore import CompileError

DEFAULT_ARCH = "sm_90"  # the H200's; a worker on a GPU compiles for that GPU's own capability instead
BASE_OPTIONS = ("-std=c++17",)
LOG_LIMIT = 1400  # the pipeline keeps 1500 characters of a compile error
MAX_DIAGNOSTICS = 6

# Everything a kernel commonly takes from <cstdint>/<cfloat>/<cmath>, which NVRTC cannot open here.
PRELUDE = """typedef signed char int8_t; typedef short int16_t; typedef int int32_t; typedef long long int64_t;
typedef unsigned char uint8_t; typedef unsigned short uint16_t; typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
#define INFINITY __int_as_float(0x7f800000)
#define NAN __int_as_float(0x7fffffff)
#define FLT_MAX 3.402823466e+38F
#define FLT_MIN 1.175494351e-38F
#define DBL_MAX 1.7976931348623158e+308
#define INT_MAX 2147483647
#define INT_MIN (-2147483647 - 1)
"""
NO_HEADERS_HINT = (
    "note: NVRTC sees no headers here; remove the #include (kz_cuda already defines int8_t..uint64_t, "
    "INFINITY, NAN, FLT_MAX, FLT_MIN, DBL_MAX, INT_MAX, INT_MIN; math functions such as expf are built in)"
)


@attrs.frozen
class CompiledModule:
    """A compiled CUDA source: the cubin and, for each requested name expression, its lowered (mangled)
    symbol name."""

    cubin: bytes = attrs.field(repr=lambda b: f"<{len(b)} bytes>")
    arch: str
    key: str  # sha256 of source + options + arch: the cache key, also used to cache loaded modules per GPU
    lowered_names: dict[str, str] = attrs.field(factory=dict)


_cache: dict[str, CompiledModule] = {}
_stats = {"hits": 0, "misses": 0}


def cache_stats() -> dict[str, int]:
    """Hits and misses of this process's compile cache."""
    return dict(_stats)


def clear_cache() -> None:
    _cache.clear()
    _stats.update(hits=0, misses=0)


def cache_key(source: str, options: Sequence[str], arch: str, name_expressions: Sequence[str] = ()) -> str:
    h = hashlib.sha256(source.encode())
    h.update(repr((tuple(options), arch, tuple(name_expressions))).encode())
    return h.hexdigest()


def compile_cuda(
    source: str,
    *,
    arch: str = DEFAULT_ARCH,
    options: Sequence[str] = (),
    name_expressions: Sequence[str] = (),
    label: str = "kernel source",
    first_line: int = 1,
    line_origin: str = "",
) -> CompiledModule:
    """Compile ``source`` with NVRTC for ``arch`` (e.g. "sm_90") to a cubin.

    ``first_line`` is the number reported for the source's first line (the line of the candidate's Python
    module where the string starts, so errors name the lines the model wrote); ``line_origin`` says what the
    numbers count (shown in the error header). Neither is part of the cache key: the same source compiled
    again from another place is a hit. Raises CompileError with the trimmed NVRTC log.
    """
    key = cache_key(source, options, arch, name_expressions)
    cached = _cache.get(key)
    if cached is not None:
        _stats["hits"] += 1
        return cached
    _stats["misses"] += 1
    text = f'{PRELUDE}#line {int(first_line)} "{label}"\n{source}'
    opts = [f"--gpu-architecture={arch}", *BASE_OPTIONS, *options]
    ok, log, cubin, lowered = _nvrtc(text, opts, name_expressions)
    if not ok:
        origin = f" ({line_origin})" if line_origin else ""
        header = f"NVRTC could not compile the CUDA source `{label}` for {arch}{origin}:"
        raise CompileError(f"{header}\n{trim_log(log)}")
    module = CompiledModule(cubin=cubin, arch=arch, key=key, lowered_names=lowered)
    _cache[key] = module
    return module


def _nvrtc(text: str, options: list[str], name_expressions: Sequence[str]) -> tuple[bool, str, bytes, dict]:
    from cuda.bindings import nvrtc

    def check(result):
        err, *rest = result
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            _, msg = nvrtc.nvrtcGetErrorString(err)
            raise RuntimeError(f"NVRTC call failed: {msg.decode() if isinstance(msg, bytes) else msg}")
        return rest[0] if len(rest) == 1 else rest

    prog = check(nvrtc.nvrtcCreateProgram(text.encode(), b"candidate.cu", 0, [], []))
    try:
        for expr in name_expressions:
            check(nvrtc.nvrtcAddNameExpression(prog, expr.encode()))
        encoded = [o.encode() for o in options]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(encoded), encoded)
        size = check(nvrtc.nvrtcGetProgramLogSize(prog))
        # NVRTC writes into the buffer it is given: a bytearray, never a bytes object (immutable, and for
        # sizes 0 and 1 CPython's shared singletons, whose corruption breaks every later user in the process)
        buf = bytearray(size)
        check(nvrtc.nvrtcGetProgramLog(prog, buf))
        log = bytes(buf).rstrip(b"\x00").decode(errors="replace")
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return False, log, b"", {}
        size = check(nvrtc.nvrtcGetCUBINSize(prog))
        buf = bytearray(size)
        check(nvrtc.nvrtcGetCUBIN(prog, buf))
        cubin = bytes(buf)
        lowered = {}
        for expr in name_expressions:
            name = check(nvrtc.nvrtcGetLoweredName(prog, expr.encode()))
            lowered[expr] = name.decode() if isinstance(name, bytes) else name
        return True, log, cubin, lowered
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


_DIAGNOSTIC = re.compile(
    r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<kind>catastrophic error|error|warning)[^:]*: ?(?P<msg>.*)$"
)


def trim_log(log: str) -> str:
    """The NVRTC diagnostics a model can act on: errors first (warnings only when there is no error), at most
    MAX_DIAGNOSTICS of them, each with NVRTC's source excerpt and caret, as ``line N: error: message``."""
    blocks: list[tuple[str, list[str]]] = []
    for raw in log.splitlines():
        line = raw.rstrip()
        m = _DIAGNOSTIC.match(line)
        if m:
            kind = "error" if "error" in m["kind"] else "warning"
            blocks.append((kind, [f"line {m['line']}: {m['kind']}: {m['msg']}"]))
        elif re.search(r"detected in the compilation|^Compilation terminated", line.strip()):
            continue
        elif line.strip() and blocks and len(blocks[-1][1]) < 3:
            blocks[-1][1].append(line)
    errors = [b for b in blocks if b[0] == "error"]
    chosen = (errors or blocks)[:MAX_DIAGNOSTICS]
    parts = ["\n".join(lines) for _, lines in chosen]
    if len(errors or blocks) > len(chosen):
        parts.append(f"... and {len(errors or blocks) - len(chosen)} more")
    if "could not open source file" in log:
        parts.insert(0, NO_HEADERS_HINT)
    text = "\n".join(parts) if parts else log.strip()
    return text if len(text) <= LOG_LIMIT else text[: LOG_LIMIT - 4] + " ..."


def nvrtc_version() -> str:
    from cuda.bindings import nvrtc

    _, major, minor = nvrtc.nvrtcVersion()
    return f"{major}.{minor}"

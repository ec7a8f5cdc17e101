"""Kernel signatures parsed from CUDA source, and the checks a launch's arguments must pass before anything
reaches the driver (so they run, and are tested, without a GPU).

Only ``extern "C" __global__`` kernels (prefix or inside an ``extern "C" { ... }`` block) are launchable:
their symbol is their plain name. Template kernels are skipped; wrap an instantiation in an extern "C" one.
"""

from __future__ import annotations

import re

import attrs

from kz_cuda.scalars import WRAPPERS, Scalar

# C scalar type (qualifiers removed, words sorted) -> the wrapper kind it takes. ``long`` is 64-bit on
# Linux hosts and so on the device.
SCALAR_KINDS = {
    "int": "i32", "signed": "i32", "int signed": "i32", "int32_t": "i32",
    "unsigned": "u32", "int unsigned": "u32", "uint32_t": "u32",
    "long": "i64", "int long": "i64", "long long": "i64", "int long long": "i64", "long signed": "i64",
    "long long signed": "i64", "int64_t": "i64", "ptrdiff_t": "i64", "intptr_t": "i64",
    "long unsigned": "u64", "long long unsigned": "u64", "int long long unsigned": "u64", "int long unsigned": "u64",
    "uint64_t": "u64", "size_t": "u64", "uintptr_t": "u64",
    "float": "f32", "double": "f64",
}  # fmt: skip
# Pointee type -> the torch dtypes a tensor passed for it may have (a pointee not listed takes any).
POINTEE_DTYPES = {
    "float": ("float32",), "float2": ("float32",), "float4": ("float32",),
    "double": ("float64",), "double2": ("float64",),
    "int": ("int32",), "int32_t": ("int32",), "int2": ("int32",), "int4": ("int32",),
    "unsigned": ("int32",), "int unsigned": ("int32",), "uint32_t": ("int32",),
    "long long": ("int64",), "int64_t": ("int64",), "long": ("int64",), "int long long": ("int64",),
    "long long unsigned": ("int64",), "uint64_t": ("int64",), "size_t": ("int64",),
    "short": ("int16",), "int16_t": ("int16",), "__half": ("float16",), "half": ("float16",),
    "__nv_bfloat16": ("bfloat16",), "nv_bfloat16": ("bfloat16",),
    "bool": ("bool", "uint8", "int8"), "char": ("int8", "uint8", "bool"), "char signed": ("int8", "uint8", "bool"),
    "char unsigned": ("uint8", "int8", "bool"), "int8_t": ("int8", "uint8", "bool"),
    "uint8_t": ("uint8", "int8", "bool"),
}  # fmt: skip
QUALIFIERS = {"const", "volatile", "__restrict__", "__restrict", "restrict", "__grid_constant__", "struct"}

_KERNEL = re.compile(
    r"(?P<externc>extern\s+\"C\"\s+)?__global__\s+(?:__launch_bounds__\s*\([^()]*\)\s*)?void\s+"
    r"(?:__launch_bounds__\s*\([^()]*\)\s*)?(?P<name>[A-Za-z_]\w*)\s*\((?P<params>[^()]*)\)"
)
_TEMPLATE_BEFORE = re.compile(r"template\s*<[^{};]*>\s*$")


@attrs.frozen
class Param:
    text: str  # as written, whitespace collapsed: `const float* __restrict__ x`
    name: str
    kind: str  # "pointer", a scalar kind ("i32", "f32", ...), or "unsupported"
    dtypes: tuple[str, ...] = ()  # for pointers: accepted torch dtype names; () = any

    def describe(self) -> str:
        return f"`{self.text}`"


@attrs.frozen
class KernelSignature:
    name: str
    params: tuple[Param, ...]
    extern_c: bool
    line: int  # 1-based line of the definition in the source string


def strip_comments(source: str) -> str:
    """Comments become spaces (newlines kept, so line numbers stay right)."""

    def blank(m: re.Match) -> str:
        text = m.group(0)
        if text.startswith(("//", "/*")):
            return re.sub(r"[^\n]", " ", text)
        return text  # a string or char literal: kept (`extern "C"` is one)

    return re.sub(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', blank, source, flags=re.S)


def _extern_c_blocks(code: str) -> list[tuple[int, int]]:
    spans = []
    for m in re.finditer(r'extern\s+"C"\s*\{', code):
        depth, i = 1, m.end()
        while i < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[i], 0)
            i += 1
        spans.append((m.end(), i))
    return spans


def _param(text: str) -> Param:
    text = " ".join(text.split())
    words = re.findall(r"[A-Za-z_]\w*", text)
    pointer = "*" in text or "[" in text
    if "&" in text:
        return Param(text, words[-1] if words else "", "unsupported")
    type_words = [w for w in words if w not in QUALIFIERS]
    name = ""
    if len(type_words) > 1 and (pointer or " ".join(sorted(type_words)) not in SCALAR_KINDS):
        name = type_words.pop()
    base = " ".join(sorted(type_words))
    if pointer:
        return Param(text, name, "pointer", POINTEE_DTYPES.get(base, ()))
    return Param(text, name, SCALAR_KINDS.get(base, "unsupported"))


def parse_kernels(source: str) -> dict[str, KernelSignature]:
    """Every non-template ``__global__`` kernel in ``source`` by name (a later definition of the same name
    replaces a declaration)."""
    code = strip_comments(source)
    blocks = _extern_c_blocks(code)
    kernels: dict[str, KernelSignature] = {}
    for m in _KERNEL.finditer(code):
        if _TEMPLATE_BEFORE.search(code[max(0, m.start() - 300) : m.start()]):
            continue
        raw = m["params"].strip()
        params = () if raw in ("", "void") else tuple(_param(p) for p in raw.split(","))
        extern_c = bool(m["externc"]) or any(a <= m.start() < b for a, b in blocks)
        line = code.count("\n", 0, m.start("name")) + 1
        kernels[m["name"]] = KernelSignature(m["name"], params, extern_c, line)
    return kernels


def signature_text(sig: KernelSignature) -> str:
    return f"{sig.name}({', '.join(p.text for p in sig.params)})"


def check_args(sig: KernelSignature, args) -> None:
    """Raise TypeError unless ``args`` match ``sig`` one for one: a torch tensor (plain Tensor or Parameter,
    of an accepted dtype) for each pointer, the exact scalar wrapper for each scalar. Devices are checked
    at launch."""
    import torch

    if not isinstance(args, (tuple, list)):
        raise TypeError(f"{sig.name}: args must be a tuple of arguments, got {type(args).__name__}")
    if len(args) != len(sig.params):
        raise TypeError(f"{sig.name} takes {len(sig.params)} argument(s) ({signature_text(sig)}), got {len(args)}")
    for i, (param, arg) in enumerate(zip(sig.params, args)):
        where = f"{sig.name} argument {i} ({param.describe()})"
        if param.kind == "unsupported":
            raise TypeError(
                f"{where}: the launcher passes only pointers and int/unsigned/long long/unsigned long long/"
                "float/double scalars"
            )
        if param.kind == "pointer":
            if type(arg) not in (torch.Tensor, torch.nn.Parameter):
                raise TypeError(f"{where} is a pointer: pass a torch tensor, got {type(arg).__name__}")
            dtype = str(arg.dtype).removeprefix("torch.")
            if param.dtypes and dtype not in param.dtypes:
                raise TypeError(f"{where}: got a tensor of {dtype}; this pointer takes {' or '.join(param.dtypes)}")
            continue
        wrapper = WRAPPERS[param.kind]
        if isinstance(arg, Scalar):
            if arg.kind != param.kind:
                raise TypeError(f"{where} takes kz_cuda.{param.kind}(...), got {arg!r} (no implicit conversion)")
            continue
        if isinstance(arg, (bool, int, float)):
            raise TypeError(
                f"{where} got a bare Python {type(arg).__name__}: wrap it as kz_cuda.{wrapper.kind}(...) "
                "(bare numbers have no C width)"
            )
        raise TypeError(f"{where} takes kz_cuda.{wrapper.kind}(...), got {type(arg).__name__}")


MAX_SHARED_BYTES = 227 * 1024  # sm_90's per-block opt-in limit


def launch_dims(grid, block, shared_mem) -> tuple[tuple[int, int, int], tuple[int, int, int], int]:
    """Normalise and check a launch configuration; raises ValueError/TypeError naming the bad value."""
    g, b = _dims("grid", grid), _dims("block", block)
    if g[0] > 2**31 - 1 or g[1] > 65535 or g[2] > 65535:
        raise ValueError(f"grid {g} exceeds the limits (2**31-1, 65535, 65535)")
    if b[0] > 1024 or b[1] > 1024 or b[2] > 64 or b[0] * b[1] * b[2] > 1024:
        raise ValueError(f"block {b} exceeds the limits (x, y <= 1024, z <= 64, at most 1024 threads)")
    if isinstance(shared_mem, bool) or not isinstance(shared_mem, int) or not 0 <= shared_mem <= MAX_SHARED_BYTES:
        raise ValueError(f"shared_mem must be an int in [0, {MAX_SHARED_BYTES}] bytes, got {shared_mem!r}")
    return g, b, shared_mem


def _dims(what: str, value) -> tuple[int, int, int]:
    dims = (value,) if isinstance(value, int) else value
    if not isinstance(dims, (tuple, list)) or not 1 <= len(dims) <= 3:
        raise TypeError(f"{what} must be an int or a tuple of 1 to 3 ints, got {value!r}")
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int) or d < 1:
            raise ValueError(f"{what} {tuple(dims)}: every dimension must be an int >= 1, got {d!r}")
    return (*dims, *(1,) * (3 - len(dims)))

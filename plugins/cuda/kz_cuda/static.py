"""Static checks for CUDA candidates, from the AST alone (nothing is imported, compiled or run).

The forward-path analysis (which PyTorch calls ``ModelNew.forward`` and the functions it reaches may make)
is the core's (kzcore.evaluate.static), shared with kz_triton so both languages enforce the same allowlist. On top of it: a kernel
source string with an ``extern "C" __global__`` kernel, the launcher used only through kz_cuda's public
names, and no other way to reach the GPU (cupy, numba, pycuda, cuda-python, Triton, ``load_inline``).
"""

from __future__ import annotations

import ast

from kz_cuda.runtime import is_kernel_source
from kz_cuda.signature import parse_kernels
from kzcore import FORBIDDEN_ATTRS, FORBIDDEN_IMPORTS, ModuleInfo, dotted, escape_violations, forward_violations

PUBLIC = frozenset("load_kernels i32 u32 i64 u64 f32 f64".split())
FORBIDDEN = FORBIDDEN_IMPORTS | {"kz_triton"}
OTHER_GPU_PATHS = {
    "cupy": "cupy",
    "numba": "numba",
    "pycuda": "pycuda",
    "cuda": "cuda-python (launch through kz_cuda.load_kernels)",
    "triton": "Triton (this is the cuda language: write the kernels in CUDA C++)",
    "torch.utils.cpp_extension": "load_inline (the cuda-inline dialect, not this one)",
}


def _import_problems(node: ast.Import | ast.ImportFrom) -> list[str]:
    out = []
    if isinstance(node, ast.ImportFrom):
        modules = [node.module or ""]
        if node.module == "kz_cuda":
            out += [
                f"line {node.lineno}: `from kz_cuda import {a.name}`: only {', '.join(sorted(PUBLIC))} are public"
                for a in node.names
                if a.name not in PUBLIC
            ]
        elif node.module == "torch.utils" and any(a.name == "cpp_extension" for a in node.names):
            modules.append("torch.utils.cpp_extension")
    else:
        modules = [a.name for a in node.names]
    for name in modules:
        top = name.split(".")[0]
        if top in FORBIDDEN:
            out.append(f"line {node.lineno}: importing `{name}` is not allowed in a kernel module")
        elif top == "kz_cuda" and name != "kz_cuda":
            out.append(f"line {node.lineno}: import `kz_cuda` itself, not `{name}` (its internals are not public)")
        for bad, what in OTHER_GPU_PATHS.items():
            if name == bad or name.startswith(bad + "."):
                out.append(f"line {node.lineno}: importing `{name}` is not allowed: {what}")
    return out


def _kernel_problems(tree: ast.Module) -> list[str]:
    strings = [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    sources = [n for n in strings if is_kernel_source(n.value)]
    if not sources:
        return ['no CUDA kernel source: define a string holding `extern "C" __global__ void name(...)`']
    if not any(sig.extern_c for n in sources for sig in parse_kernels(n.value).values()):
        return [f'line {sources[0].lineno}: no kernel is declared extern "C" (the launcher finds kernels by name)']
    return []


def check_source(source: str) -> list[str]:
    """Violations of the CUDA candidate rules; [] when the source passes. A source that does not parse passes
    here and fails at load time as a compile error with its line number."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    mod = ModuleInfo(tree)
    problems = model_new_problems(mod) + _kernel_problems(tree)
    problems += walk_problems(
        tree,
        _import_problems,
        lambda path: path.startswith("kz_cuda.") and path.split(".")[1] not in PUBLIC,
        "reaches into PyTorch or kzcore internals",
    )
    return problems + escape_violations(tree) + forward_violations(mod)


def model_new_problems(mod: ModuleInfo) -> list[str]:
    if mod.model_new is None:
        return ["no `class ModelNew` defined"]
    if "forward" not in mod.methods:
        return ["`ModelNew` has no `forward` method"]
    return []


def walk_problems(tree: ast.Module, import_problems, also_internal, what: str) -> list[str]:
    """The module-wide checks both CUDA dialects share: no try/except, each import through
    ``import_problems(node)``, and no attribute path into FORBIDDEN_ATTRS or for which ``also_internal(path)``
    holds (one problem per line, ending in ``what``)."""
    problems: list[str] = []
    internals: dict[int, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Try):
            problems.append(f"line {node.lineno}: try/except is not allowed (no fallback paths)")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            problems += import_problems(node)
        elif isinstance(node, ast.Attribute):
            path = dotted(node)
            if any(bad in path for bad in FORBIDDEN_ATTRS) or also_internal(path):
                internals.setdefault(node.lineno, path)
    return problems + [f"line {line}: `{name}` {what}" for line, name in internals.items()]

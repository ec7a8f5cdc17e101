"""Static checks for cuda-inline candidates (KernelBench's load_inline modules), from the AST and the C++
text alone: nothing is imported or built.

Python side: the same forward-path allowlist and escape checks as Triton and the NVRTC dialect
(kzcore.evaluate.static), no try/except, no forbidden imports or internals, no other way onto the GPU, and
``load_inline`` as the only name taken from ``torch.utils.cpp_extension``. C++ side (the strings handed to
load_inline and any string defining a kernel, comments removed): at least one ``__global__`` kernel, and no
cuBLAS, cuDNN, CUTLASS, ``at::native`` or PyTorch compute (``torch::matmul``, ``at::mm``, ``x.sum()`` ...)
in host code. The runtime guard still sees every ATen operator the extension dispatches; this check names
them earlier.
"""

from __future__ import annotations

import ast
import re

from kz_cuda.runtime import is_kernel_source
from kz_cuda.static import model_new_problems, walk_problems
from kzcore import FORBIDDEN_IMPORTS, METHOD_COMPUTE, ModuleInfo, dotted, escape_violations, forward_violations

FORBIDDEN = FORBIDDEN_IMPORTS | {"kz_triton"}
OTHER_GPU_PATHS = {
    "cupy": "cupy",
    "numba": "numba",
    "pycuda": "pycuda",
    "cuda": "cuda-python",
    "triton": "Triton (this is the cuda-inline language: write the kernels in CUDA C++)",
    "kz_cuda": "the NVRTC launcher of the `cuda` language (here, build the kernels with load_inline)",
}
CPP_EXTENSION = "torch.utils.cpp_extension"
# C++ host code may allocate and query tensors, not compute with PyTorch or call vendor libraries.
CPP_COMPUTE = METHOD_COMPUTE | frozenset(
    "matmul mm bmm addmm addmv baddbmm mv linear conv1d conv2d conv3d conv_transpose2d einsum".split()
)
CPP_LIBRARY = re.compile(
    r"\b(cublas\w*|cublasLt\w*|cudnn\w*|cutlass|cute::)|at::native\b|at::cuda::blas|torch::nn::functional"
    r"|#\s*include\s*[<\"](?:cublas|cudnn|cutlass|ATen/native|ATen/cuda/CUDABlas|torch/nn)",
    re.I,
)
VENDOR_LIBRARY = re.compile(r"cublas|cudnn|cutlass|cusparse|cufft", re.I)
FLAG_ARGUMENTS = ("extra_cflags", "extra_cuda_cflags", "extra_ldflags", "extra_include_paths")
CPP_TORCH_CALL = re.compile(r"\b(?:torch|at)::(?:\w+::)*(\w+)\s*\(")
CPP_METHOD_CALL = re.compile(r"[\w\)\]]\s*(?:\.|->)\s*(\w+)\s*\(")
CPP_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def _blank_comments(text: str) -> str:
    """C++ comments replaced by spaces (newlines kept), so offsets still give line numbers."""
    return CPP_COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text)


def _assigned_strings(tree: ast.Module) -> dict[str, list[ast.Constant]]:
    """name -> string constants assigned to it (``src = "..."`` or ``srcs = ["...", "..."]``)."""
    out: dict[str, list[ast.Constant]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            out.setdefault(node.targets[0].id, []).extend(_strings_in(node.value, {}))
    return out


def _strings_in(node: ast.AST | None, names: dict[str, list[ast.Constant]]) -> list[ast.Constant]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [c for elt in node.elts for c in _strings_in(elt, names)]
    if isinstance(node, ast.Name):
        return names.get(node.id, [])
    if isinstance(node, ast.BinOp):  # "a" + "b"
        return _strings_in(node.left, names) + _strings_in(node.right, names)
    return []


def _load_inline_calls(tree: ast.Module) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and dotted(n.func).split(".")[-1] == "load_inline"]


def _call_argument(call: ast.Call, name: str, position: int | None) -> ast.AST | None:
    """The argument passed as ``name=`` or, when ``position`` is given, at that position."""
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    if position is not None and len(call.args) > position:
        return call.args[position]
    return None


def _extension_functions(calls: list[ast.Call]) -> set[str]:
    out = set()
    for call in calls:
        node = _call_argument(call, "functions", 3)
        for c in _strings_in(node, {}):
            out.add(c.value)
        if isinstance(node, ast.Dict):
            out |= {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    return out


def cpp_strings(tree: ast.Module) -> list[ast.Constant]:
    """String literals that are C++: handed to load_inline as cpp_sources/cuda_sources, or defining a kernel."""
    names = _assigned_strings(tree)
    found: dict[int, ast.Constant] = {}
    for call in _load_inline_calls(tree):
        for arg, pos in (("cpp_sources", 1), ("cuda_sources", 2)):
            for c in _strings_in(_call_argument(call, arg, pos), names):
                found[id(c)] = c
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and is_kernel_source(node.value):
            found[id(node)] = node
    return sorted(found.values(), key=lambda c: (c.lineno, c.col_offset))


def _cpp_problems(node: ast.Constant) -> list[str]:
    text = _blank_comments(node.value)
    mapped = node.end_lineno - node.lineno == node.value.count("\n")

    def where(offset: int) -> str:
        if mapped:
            return f"line {node.lineno + text.count(chr(10), 0, offset)}"
        return f"the C++ string at line {node.lineno}"

    out = []
    for m in CPP_LIBRARY.finditer(text):
        out.append(f"{where(m.start())}: `{m.group().strip()}`: no cuBLAS/cuDNN/CUTLASS or ATen internals")
    for m in CPP_TORCH_CALL.finditer(text):
        if m.group(1) in CPP_COMPUTE:
            out.append(f"{where(m.start())}: `{m.group().rstrip('( ')}` is PyTorch compute; write a kernel instead")
    for m in CPP_METHOD_CALL.finditer(text):
        if m.group(1) in CPP_COMPUTE:
            out.append(f"{where(m.start())}: tensor method `.{m.group(1)}()` is PyTorch compute; write a kernel")
    return out


def _flag_problems(calls: list[ast.Call]) -> list[str]:
    """Compiler and linker flags that bring in a vendor library (``-lcublas``, a cuDNN include path)."""
    out = []
    for call in calls:
        for arg in FLAG_ARGUMENTS:
            for c in _strings_in(_call_argument(call, arg, None), {}):
                if VENDOR_LIBRARY.search(c.value):
                    out.append(f"line {c.lineno}: `{c.value}` in {arg}: no cuBLAS/cuDNN/CUTLASS libraries")
    return out


def _import_problems(node: ast.Import | ast.ImportFrom) -> list[str]:
    out = []
    if isinstance(node, ast.ImportFrom):
        modules = [node.module or ""]
        if node.module == CPP_EXTENSION:
            out += [
                f"line {node.lineno}: `from {CPP_EXTENSION} import {a.name}`: only `load_inline` may be used"
                for a in node.names
                if a.name != "load_inline"
            ]
        elif node.module == "torch.utils" and any(a.name == "cpp_extension" for a in node.names):
            modules.append(CPP_EXTENSION)
    else:
        modules = [a.name for a in node.names]
    for name in modules:
        if name.split(".")[0] in FORBIDDEN:
            out.append(f"line {node.lineno}: importing `{name}` is not allowed in a kernel module")
        for bad, what in OTHER_GPU_PATHS.items():
            if name == bad or name.startswith(bad + "."):
                out.append(f"line {node.lineno}: importing `{name}` is not allowed: {what}")
    return out


def _forward_problems(mod: ModuleInfo, functions: set[str]) -> list[str]:
    """The shared forward-path check, except calls of the extension's own functions that happen to be
    named like tensor methods (``ext.relu(x)``)."""
    own = {f"calls tensor method `.{name}()`" for name in functions}
    return [v for v in forward_violations(mod) if not any(o in v for o in own)]


def check_source(source: str) -> list[str]:
    """Violations of the cuda-inline candidate rules; [] when the source passes. A source that does not
    parse passes here and fails at load time as a compile error with its line number."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    mod = ModuleInfo(tree)
    problems = model_new_problems(mod)
    calls = _load_inline_calls(tree)
    if not calls:
        problems.append("no `load_inline(...)` call: build the kernels with torch.utils.cpp_extension.load_inline")
    cpp = cpp_strings(tree)
    if not any(is_kernel_source(c.value) for c in cpp):
        problems.append("no CUDA kernel: cuda_sources must define at least one `__global__ void name(...)`")
    for c in cpp:
        problems += _cpp_problems(c)
    problems += _flag_problems(calls)
    problems += walk_problems(
        tree,
        _import_problems,
        lambda path: path.startswith(CPP_EXTENSION + ".") and path != CPP_EXTENSION + ".load_inline",
        "is not allowed here",
    )
    return problems + escape_violations(tree) + _forward_problems(mod, _extension_functions(calls))

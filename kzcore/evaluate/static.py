"""Forward-path analysis shared by kernel-language plugins, from the AST alone: what ``ModelNew.forward``
and the functions it reaches may call. Allowed: allocation, views and shape queries; not allowed: PyTorch
compute, ``nn`` submodule calls, the reference ``Model``, dynamic dispatch. Each language adds its own
kernel predicate and checks (kz_triton.static, kz_cuda.static)."""

from __future__ import annotations

import ast
from collections.abc import Callable

TORCH_ALLOWED = frozenset(
    """empty empty_like empty_strided zeros zeros_like ones ones_like full full_like arange
    device dtype Size float32 float16 bfloat16 float64 int32 int64 int8 uint8 bool is_tensor""".split()
)
METHOD_ALLOWED = frozenset(
    """view reshape contiguous permute transpose t size stride numel dim unsqueeze squeeze flatten expand
    new_empty new_zeros new_full empty_like data_ptr is_contiguous element_size item""".split()
)
# Tensor methods that compute; a call `x.<name>(...)` in the forward path is a violation.
METHOD_COMPUTE = frozenset(
    """abs add add_ addmm all amax amin any argmax argmin baddbmm bmm ceil clamp clamp_ clamp_min cos cumsum
    div div_ dot einsum eq exp exp_ expm1 float floor gather ge gelu gt half double bfloat16 index_select le log
    log1p log_softmax logsumexp lt masked_fill matmul max maximum mean min minimum mm mul mul_ mv ne neg norm
    pow prod reciprocal relu relu_ round rsqrt scatter sigmoid sign sin softmax sort sqrt square std sub sub_
    sum tanh topk tril triu var where conv1d conv2d conv3d linear layer_norm batch_norm""".split()
)
TORCH_NAMES = ("torch", "F", "nn", "functional")
# Modules a kernel module has no business importing: other threads/processes escape the timer and the
# runtime guard; the harness's own modules and ctypes/gc let a candidate tamper with the evaluator.
FORBIDDEN_IMPORTS = frozenset("threading _thread concurrent multiprocessing subprocess ctypes gc kzcore".split())
FORBIDDEN_ATTRS = ("sys.modules", "torch._C", "_python_dispatch", "torch.ops")


def dotted(node: ast.AST) -> str:
    """``a.b.c`` for a Name/Attribute chain, else ""."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


class ModuleInfo:
    """What a candidate module defines, and which of its functions are kernels (``is_kernel``)."""

    def __init__(self, tree: ast.Module, is_kernel: Callable[[ast.FunctionDef], bool] = lambda fn: False):
        self.functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        self.classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
        self.kernels = {name for name, fn in self.functions.items() if is_kernel(fn)}
        self.model_new = self.classes.get("ModelNew")
        self.methods = (
            {n.name: n for n in self.model_new.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
            if self.model_new
            else {}
        )
        self.submodules = self._submodule_attrs()

    def _submodule_attrs(self) -> dict[str, str]:
        """self.<attr> = nn.<Module>(...) assignments in ModelNew.__init__."""
        init = self.methods.get("__init__")
        out = {}
        for node in ast.walk(init) if init else ():
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                ctor = dotted(node.value.func)
                if ctor.startswith(("nn.", "torch.nn.")) and ctor.split(".")[-1] not in ("Parameter", "ParameterList"):
                    for t in node.targets:
                        if isinstance(t, ast.Attribute) and dotted(t.value) == "self":
                            out[t.attr] = ctor
        return out

    def forward_path(self) -> list[ast.FunctionDef]:
        """forward plus the module functions and ModelNew methods reachable from it (kernels excluded)."""
        start = self.methods.get("forward")
        if start is None:
            return []
        seen, stack, path = set(), [start], []
        while stack:
            fn = stack.pop()
            if id(fn) in seen:
                continue
            seen.add(id(fn))
            path.append(fn)
            for node in ast.walk(fn):
                # any reference counts, not only calls: Thread(target=helper) or map(helper, ...) run it too
                name = dotted(node) if isinstance(node, (ast.Name, ast.Attribute)) else ""
                if name in self.functions and name not in self.kernels:
                    stack.append(self.functions[name])
                elif name.startswith("self.") and name[5:] in self.methods:
                    stack.append(self.methods[name[5:]])
        return path


def violations_in(fn: ast.FunctionDef, mod: ModuleInfo) -> list[str]:
    """PyTorch compute, submodule calls, the reference Model and dynamic dispatch inside ``fn``."""
    out = []
    for node in ast.walk(fn):
        line = getattr(node, "lineno", "?")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            out.append(f"line {line}: `@` (matrix multiply) on tensors in the forward path")
        if not isinstance(node, ast.Call):
            if isinstance(node, ast.Name) and node.id == "Model":
                out.append(f"line {line}: uses the reference `Model` class")
            continue
        name = dotted(node.func)
        head, _, last = name.rpartition(".")
        if head and head.split(".")[0] in TORCH_NAMES and name.split(".")[0] in TORCH_NAMES:
            if head.split(".")[0] == "torch" and "." not in head and last in TORCH_ALLOWED:
                continue
            if head in ("torch.cuda",) or head.startswith("torch.cuda."):
                continue
            out.append(f"line {line}: calls `{name}` (PyTorch compute) in the forward path")
        elif name.startswith("self.") and name[5:] in mod.submodules:
            out.append(f"line {line}: calls submodule `{name}` ({mod.submodules[name[5:]]}) instead of a kernel")
        elif head and last in METHOD_COMPUTE and not head.startswith(("tl", "triton", "math")):
            out.append(f"line {line}: calls tensor method `.{last}()` (PyTorch compute) in the forward path")
        elif name in ("getattr", "eval", "exec", "__import__", "compile"):
            out.append(f"line {line}: calls `{name}` in the forward path (dynamic dispatch is not allowed)")
    return out


def forward_violations(mod: ModuleInfo) -> list[str]:
    """Violations in the whole forward path, each reported once."""
    out: list[str] = []
    for fn in mod.forward_path():
        out += [v for v in violations_in(fn, mod) if v not in out]
    return out


def common_violations(tree: ast.Module, forbidden_imports: frozenset[str] = FORBIDDEN_IMPORTS) -> list[str]:
    """try/except fallbacks, forbidden imports, and attribute paths into PyTorch or Python internals."""
    problems, internals = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Try):
            problems.append(f"line {node.lineno}: try/except is not allowed (no fallback paths)")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for name in names:
                if name.split(".")[0] in forbidden_imports:
                    problems.append(f"line {node.lineno}: importing `{name}` is not allowed in a kernel module")
        elif isinstance(node, ast.Attribute) and any(bad in dotted(node) for bad in FORBIDDEN_ATTRS):
            internals.setdefault(node.lineno, dotted(node))  # ast.walk meets the outermost attribute first
    return problems + [
        f"line {line}: `{name}` reaches into PyTorch or Python internals" for line, name in internals.items()
    ]

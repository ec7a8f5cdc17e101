"""Static checks for Triton candidates, from the AST alone (nothing is imported or run).

The forward path is ``ModelNew.forward`` plus every module-level function and ``ModelNew`` method it
reaches; ``@triton.jit`` kernels are not part of it. The shared analysis (kzcore.evaluate.static) allows
only allocation, views and shape queries there (documented in docs/plugins.md and in the prompt).
"""

from __future__ import annotations

import ast

from kzcore import FORBIDDEN_IMPORTS, ModuleInfo, common_violations, dotted, forward_violations

# what a kernel body may call by a bare name besides triton's names and the module's other kernels
KERNEL_BUILTINS = frozenset("range min max len int float bool abs print isinstance".split())


def kernel_violations(tree: ast.Module, mod: ModuleInfo) -> list[str]:
    """What a ``@triton.jit`` body may not do: call anything but ``triton`` / ``triton.language`` (and Python's
    ``math``), the module's other kernels, a few builtins and methods of its own values, or name any other
    imported module (``torch``, ``numpy``). A compiled kernel could not do either; under the CPU interpreter the
    body is plain Python and would run them outside the op guard's view."""
    triton_names, other_names = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                root = a.name.split(".")[0]
                (triton_names if root in ("triton", "math") else other_names).add(a.asname or root)
        elif isinstance(node, ast.ImportFrom):
            root = (node.module or "").split(".")[0]
            for a in node.names:
                (triton_names if root in ("triton", "math") else other_names).add(a.asname or a.name)
    module_level = {name for name in mod.functions if name not in mod.kernels} | set(mod.classes)
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            module_level |= {t.id for t in targets if isinstance(t, ast.Name)}
    bound = triton_names | other_names | module_level | set(mod.functions) | KERNEL_BUILTINS
    out: list[str] = []
    for name in sorted(mod.kernels):
        fn = mod.functions[name]
        where = f"inside @triton.jit kernel `{name}`"
        own = {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}
        own |= {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}
        known = bound | own
        for node in ast.walk(fn):
            line = getattr(node, "lineno", "?")
            problem = ""
            if isinstance(node, ast.Name) and node.id in other_names:
                problem = f"line {line}: `{node.id}` {where}: a kernel uses triton.language only"
            elif isinstance(node, ast.Name) and node.id not in known:
                # the interpreter runs the body in the module's namespace, where it adds names of its own (`np`)
                problem = f"line {line}: `{node.id}` {where} is bound nowhere in the module"
            elif isinstance(node, ast.Call):
                callee = node.func
                root = callee
                while isinstance(root, (ast.Attribute, ast.Subscript)):
                    root = root.value
                # a callee rooted in an expression is a method of a value the kernel computed (`tl.load(p).to(...)`)
                if not isinstance(root, ast.Name):
                    continue
                if isinstance(callee, ast.Subscript) or (root.id in module_level and callee is not root):
                    problem = f"line {line}: calls `{dotted(callee) or root.id + '[…]'}` {where}: a kernel may call only triton.language"
                elif isinstance(callee, ast.Name):
                    allowed = mod.kernels | KERNEL_BUILTINS | triton_names
                    if callee.id not in allowed:
                        problem = (
                            f"line {line}: calls `{callee.id}` {where}: a kernel may call only triton.language, "
                            "other @triton.jit kernels and basic builtins"
                        )
            if problem and problem not in out:
                out.append(problem)
    return out


def _is_jit(dec: ast.AST) -> bool:
    target = dec.func if isinstance(dec, ast.Call) else dec
    return dotted(target).split(".")[-1] == "jit"


def is_triton_kernel(fn: ast.FunctionDef) -> bool:
    """Decorated with ``triton.jit`` (alone or under autotune/heuristics)."""
    return any(_is_jit(d) for d in fn.decorator_list)


def check_source(source: str) -> list[str]:
    """Violations of the Triton candidate rules; [] when the source passes. A source that does not parse
    passes here and fails at load time as a compile error with the line number."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    mod = ModuleInfo(tree, is_triton_kernel)
    problems = []
    if mod.model_new is None:
        problems.append("no `class ModelNew` defined")
    elif "forward" not in mod.methods:
        problems.append("`ModelNew` has no `forward` method")
    if not mod.kernels:
        problems.append("no `@triton.jit` kernel defined")
    problems += common_violations(tree, FORBIDDEN_IMPORTS | {"kz_triton"})
    return problems + kernel_violations(tree, mod) + forward_violations(mod)

"""Static checks for Triton candidates, from the AST alone (nothing is imported or run).

The forward path is ``ModelNew.forward`` plus every module-level function and ``ModelNew`` method it
reaches; ``@triton.jit`` kernels are not part of it. The shared analysis (kzcore.evaluate.static) allows
only allocation, views and shape queries there (documented in docs/plugins.md and in the prompt).
"""

from __future__ import annotations

import ast

from kzcore import FORBIDDEN_IMPORTS, ModuleInfo, common_violations, dotted, forward_violations


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
    return problems + forward_violations(mod)

"""The Proposer's dedup key: a generated module hashes to the same key as one already in the pool when it is
the same module written with other variable names, docstrings, comments or whitespace — its normalized AST
(docstrings, imports, annotations and identifier names normalized away), its API set and its shapes.
propose.py and composer.py fail the ``duplicate`` gate (gates.py) of a module whose key they have seen."""

from __future__ import annotations

import ast
import builtins
import functools
import hashlib
import json
from collections.abc import Sequence

from kzcore.proposer.names import import_aliases, module_constants, qualified_name

_KEEP_NAMES = frozenset({"Model", "forward", "__init__", "get_inputs", "get_init_inputs", "KZ_SIZES"})


@functools.cache
def _library_attrs() -> frozenset[str]:
    """Attribute names that mean a library method (tensor or nn.Module), so renaming them would change the
    program: ``x.view`` stays ``view``; ``self.conv`` is the module's own name and is normalized."""
    import torch

    return frozenset(dir(torch.Tensor)) | frozenset(dir(torch.nn.Module))


def _strip_docstrings(tree: ast.Module) -> None:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                if isinstance(body[0].value.value, str):
                    node.body = body[1:] or [ast.Pass()]


class _Renamer(ast.NodeTransformer):
    """Renames user identifiers to _0, _1, … in order of first appearance, scope-aware (a function's
    parameters and assigned names are its own); import aliases become the dotted path they stand for."""

    def __init__(self, aliases: dict[str, str], module_names: set[str]):
        self.aliases = aliases
        self.module_names = module_names
        self.names: dict[tuple, str] = {}
        self.scopes: list[tuple[int, set[str]]] = []
        self.keep = _KEEP_NAMES | set(dir(builtins))

    def _canonical(self, key: tuple) -> str:
        if key not in self.names:
            self.names[key] = f"_{len(self.names)}"
        return self.names[key]

    def _var(self, name: str) -> str:
        for scope_id, local in reversed(self.scopes):
            if name in local:
                return self._canonical((scope_id, name))
        if name in self.aliases:
            return self.aliases[name]
        if name in self.keep:
            return name
        return self._canonical(("module", name))

    def visit_Import(self, node):
        return None

    visit_ImportFrom = visit_Import

    def visit_FunctionDef(self, node):
        if node.name not in self.keep:
            node.name = self._var(node.name)
        local = {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
        local |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        self.scopes.append((id(node), local))
        try:
            self.generic_visit(node)
        finally:
            self.scopes.pop()
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        if node.name not in self.keep:
            node.name = self._var(node.name)
        self.generic_visit(node)
        return node

    def visit_arg(self, node):
        node.arg = self._var(node.arg)
        node.annotation = None
        return node

    def visit_Name(self, node):
        node.id = self._var(node.id)
        return node

    def visit_Attribute(self, node):
        self.generic_visit(node)
        if (
            not getattr(node, "value_is_module", False)
            and node.attr not in _library_attrs()
            and not node.attr.startswith("__")
        ):
            node.attr = self._canonical(("attr", node.attr))
        return node

    def visit_Constant(self, node):
        # KZ_SIZES keys name module constants as strings: rename them with the constants.
        if isinstance(node.value, str) and node.value in self.module_names:
            node.value = self._var(node.value)
        return node


def _mark_module_attributes(tree: ast.AST, aliases: dict[str, str]) -> None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            node.value_is_module = qualified_name(node.value, aliases) is not None


def normalized_ast(code: str) -> str:
    """``ast.dump`` of the module with docstrings, imports, annotations and identifier names normalized away.
    Raises SyntaxError when ``code`` does not parse."""
    tree = ast.parse(code)
    _strip_docstrings(tree)
    aliases = import_aliases(tree)
    _mark_module_attributes(tree, aliases)
    tree = _Renamer(aliases, set(module_constants(tree)) - _KEEP_NAMES).visit(tree)
    return ast.dump(tree, annotate_fields=False, include_attributes=False)


def _values_only(value):
    # KZ_SIZES maps constant names to sizes; the names are not part of the shape.
    if isinstance(value, dict):
        return [_values_only(v) for v in value.values()]
    return value


def module_shapes(code: str) -> list:
    """The literal values of the module's constants in order (names dropped, KZ_SIZES included): its sizes."""
    tree = ast.parse(code)
    values = []
    for node in tree.body:
        if isinstance(node, ast.Assign):
            try:
                values.append(_values_only(ast.literal_eval(node.value)))
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                continue
    return values


def dedup_key(code: str, apis: Sequence[str]) -> str:
    """sha256 over the normalized AST, the sorted API set and the shapes: equal for the same module written
    with other variable names, docstrings, comments or whitespace."""
    payload = json.dumps([normalized_ast(code), sorted(apis), module_shapes(code)], default=repr)
    return hashlib.sha256(payload.encode()).hexdigest()

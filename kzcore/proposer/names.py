"""What a problem module's names stand for, alias-aware: the dotted paths its imports bind (``F`` →
``torch.nn.functional``), the path a ``Name``/``Attribute`` chain resolves to through them, and its module
constants. Read by the Proposer's AST gate (gates.py), its dedup key (dedup.py) and decontamination's
fingerprints (kzcore/fingerprints.py)."""

from __future__ import annotations

import ast


def import_aliases(tree: ast.AST) -> dict[str, str]:
    """Local name → dotted module path bound by the module's imports (``F`` → ``torch.nn.functional``,
    ``Conv2d`` → ``torch.nn.Conv2d``, ``torch`` → ``torch``)."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    aliases[a.asname] = a.name
                else:
                    root = a.name.split(".")[0]
                    aliases[root] = root
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                if a.name != "*":
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    return aliases


def qualified_name(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """``F.conv2d`` → ``torch.nn.functional.conv2d`` when ``F`` is an import alias; None otherwise."""
    if isinstance(node, ast.Name):
        return aliases.get(node.id)
    if isinstance(node, ast.Attribute):
        base = qualified_name(node.value, aliases)
        return f"{base}.{node.attr}" if base else None
    return None


def module_constants(tree: ast.Module) -> list[str]:
    """The names the module's top-level assignments bind, in order."""
    return [t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)]

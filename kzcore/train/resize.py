"""Smaller copies of a problem module, for the size variants of kzcore/train/variants.py: which of its
``KZ_SIZES`` constants to scale by how much (`smaller_sizes`), and the module rewritten with them
(`resize_source`). Source text in, source text out; no language knows of it.

The constants a size variant scales are the module constants its ``KZ_SIZES`` profiles name (the ones that feed
``get_inputs``/``get_init_inputs``). They are scaled down (1/2, 1/4, 3/4; never up; a constant divisible by 16
stays so), the profiles are scaled along (never above the new full size) and the docstring states the new
sizes."""

from __future__ import annotations

import ast

SMALL_FLOOR = 8  # a scaled "small" size stays at least this (or its original value, if smaller)


def _int_constants(tree: ast.Module) -> dict[str, ast.Constant]:
    out = {}
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant)
            and type(node.value.value) is int
        ):
            out[node.targets[0].id] = node.value
    return out


def _profiles(tree: ast.Module) -> tuple[ast.Assign | None, dict[str, dict[str, int]]]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "KZ_SIZES" for t in node.targets):
            try:
                return node, ast.literal_eval(node.value)
            except ValueError:
                return node, {}
    return None, {}


def _scaled(value: int, factor: float) -> int | None:
    new = int(value * factor)
    if new < 1 or new == value or (value % 16 == 0 and new % 16):
        return None
    return new


def _size_plans(names: list[str]) -> list[dict[str, float]]:
    """Which constants each variant scales by how much: all by 1/2, the first by 1/4, the last by 3/4, the
    first by 3/4 and the rest by 1/2."""
    first, last, rest = names[0], names[-1], names[1:]
    return [
        dict.fromkeys(names, 0.5),
        {first: 0.25},
        {last: 0.75},
        {first: 0.75, **dict.fromkeys(rest, 0.5)},
    ]


def _size_names(tree: ast.Module) -> list[str]:
    _node, profiles = _profiles(tree)
    constants = _int_constants(tree)
    names: list[str] = []
    for sizes in profiles.values():
        names += [k for k in sizes if k in constants and k not in names]
    return names


def smaller_sizes(source: str) -> list[dict[str, int]]:
    """The new values of the scaled constants, one dict per size variant of ``source`` (at most four, no two
    alike); [] when its ``KZ_SIZES`` profiles name no integer module constant."""
    tree = ast.parse(source)
    names = _size_names(tree)
    if not names:
        return []
    constants = _int_constants(tree)
    out: list[dict[str, int]] = []
    for plan in _size_plans(names):
        new = {k: v for k, f in plan.items() if (v := _scaled(constants[k].value, f)) is not None}
        if new and new not in out:
            out.append(new)
    return out


def _render_profiles(profiles: dict[str, dict[str, int]]) -> str:
    lines = ["KZ_SIZES = {"]
    for profile, sizes in profiles.items():
        inner = ", ".join(f'"{k}": {v}' for k, v in sizes.items())
        lines.append(f'    "{profile}": {{{inner}}},')
    return "\n".join(lines + ["}"])


def _replace_lines(source: str, start: int, end: int, text: str) -> str:
    lines = source.split("\n")
    return "\n".join(lines[: start - 1] + text.split("\n") + lines[end:])


def resize_source(source: str, new: dict[str, int]) -> str:
    """``source`` with the integer constants in ``new`` set, its ``KZ_SIZES`` profiles kept at or below the
    new sizes (and scaled like them, not below ``SMALL_FLOOR``), and the sizes stated in the docstring."""
    tree = ast.parse(source)
    constants = _int_constants(tree)
    names = _size_names(tree)
    lines = source.split("\n")
    for name, value in new.items():  # same-line edits: the line numbers below stay valid
        const = constants[name]
        line = lines[const.lineno - 1]
        lines[const.lineno - 1] = line[: const.col_offset] + str(value) + line[const.end_col_offset :]
    source = "\n".join(lines)
    node, profiles = _profiles(tree)
    if node is not None and profiles:
        fixed = {}
        for profile, sizes in profiles.items():
            fixed[profile] = {}
            for k, v in sizes.items():
                if k in new:
                    factor = new[k] / constants[k].value
                    v = min(new[k], max(min(v, SMALL_FLOOR), round(v * factor)))
                fixed[profile][k] = v
        if "alt" in fixed and fixed["alt"] == fixed.get("small"):
            del fixed["alt"]  # no second shape left to try
        source = _replace_lines(source, node.lineno, node.end_lineno, _render_profiles(fixed))
    resized = _int_constants(ast.parse(source))
    return _state_sizes(source, {k: resized[k] for k in names})


def _state_sizes(source: str, constants: dict[str, ast.Constant]) -> str:
    sizes = ", ".join(f"{k}={c.value}" for k, c in constants.items())
    tree = ast.parse(source)
    doc = tree.body[0] if tree.body else None
    if not (isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant) and isinstance(doc.value.value, str)):
        return f'"""Sizes: {sizes}."""\n\n{source}'
    lines = source.split("\n")
    end = lines[doc.end_lineno - 1]
    cut = end.rfind('"""')
    if cut < 0:
        return source
    lines[doc.end_lineno - 1] = end[:cut].rstrip() + f" Sizes: {sizes}." + end[cut:]
    return "\n".join(lines)

"""Size profiles for problems that do not name them: KernelBench's own files have no ``KZ_SIZES``, so on a
CPU they would run at GPU size (a 4096 x 393216 softmax) and never get a second shape. From the module's
integer constants that feed ``get_inputs`` / ``get_init_inputs`` this derives a ``small`` profile (the
size constants shrunk until their product fits a budget) and an ``alt`` one (each size constant moved up
to the next odd multiple of 16 where the full size is a multiple of 16, so Triton's divisibility
specialisation is kept and masks are still exercised; of 1 elsewhere).

Neighbours: `pipeline.Evaluation` and `problem_check` call `apply_profile`; a profile the problem writes
itself (``KZ_SIZES``) always wins (`problems.apply_size_profile`)."""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import attrs

from kzcore.problems import apply_size_profile

DERIVED = " (derived)"  # suffix of a derived profile's name in results ("small (derived)")
SIZE_FLOOR = 16  # size constants below this (kernel sizes, strides, reduction dims, channels of 3) stay put
SMALL_BUDGET = 1 << 15  # the product of the small profile's size constants
SMALL_MAX = 256  # and each of them (one constant can stand for several dimensions: an N x N matmul)
ALT_GROWTH = 4.0  # the alt profile's product may be at most this many times the base profile's
# constants that shape layers rather than data: changing them breaks the model or says nothing new
HYPER = re.compile(r"kernel|stride|pad|dilation|group|head|pool|axis", re.IGNORECASE)
_OPS: dict[type, Callable[[int, int], int]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
    ast.Pow: lambda a, b: a**b,
}


class _NotInt(Exception):
    pass


@attrs.frozen
class Constant:
    """A module-level integer (or tuple/list of integers) constant: its value, and the expression it is
    computed from when it depends on other constants (recomputed when they change)."""

    name: str
    value: int | tuple | list
    expr: ast.expr | None = None  # set only for constants computed from other names


def _evaluate(node: ast.expr, env: dict) -> int | tuple | list:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Name) and node.id in env:
        return env[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _evaluate(node.left, env), _evaluate(node.right, env)
        if isinstance(left, int) and isinstance(right, int):
            if isinstance(node.op, ast.Pow) and not 0 <= right <= 64:
                raise _NotInt
            return _OPS[type(node.op)](left, right)
    if isinstance(node, (ast.Tuple, ast.List)):
        items = [_evaluate(e, env) for e in node.elts]
        if all(isinstance(i, int) for i in items):
            return tuple(items) if isinstance(node, ast.Tuple) else items
    raise _NotInt


def _uses_names(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Name) for n in ast.walk(node))


def module_constants(tree: ast.Module) -> dict[str, Constant]:
    """Integer constants assigned at module level, in source order (the last assignment wins)."""
    env: dict = {}
    found: dict[str, Constant] = {}
    for stmt in tree.body:
        if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
            continue
        target, value = stmt.targets[0], stmt.value
        pairs = [(target, value)]
        if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts):
            pairs = list(zip(target.elts, value.elts))  # depth, height, width = 16, 64, 64
        for t, v in pairs:
            if not isinstance(t, ast.Name):
                continue
            try:
                result = _evaluate(v, env)
            except _NotInt:
                found.pop(t.id, None)
                env.pop(t.id, None)
                continue
            env[t.id] = result
            found[t.id] = Constant(t.id, result, v if _uses_names(v) else None)
    return found


def _names_feeding_inputs(tree: ast.Module, constants: dict[str, Constant]) -> set[str]:
    """Constants read by get_inputs / get_init_inputs, directly or through constants computed from them."""
    used: set[str] = set()
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name in ("get_inputs", "get_init_inputs"):
            used |= {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and n.id in constants}
    todo = list(used)
    while todo:
        c = constants[todo.pop()]
        if c.expr is not None:
            for n in ast.walk(c.expr):
                if isinstance(n, ast.Name) and n.id in constants and n.id not in used:
                    used.add(n.id)
                    todo.append(n.id)
    return used


@attrs.frozen
class Slot:
    """One integer that a derived profile may change: constant ``name``, element ``index`` of a tuple/list
    constant (None for a plain int)."""

    name: str
    index: int | None
    full: int  # the value in the source
    step: int  # every derived value is a multiple of this (keeps divisibility by 16 and by other constants)


def _lcm(values) -> int:
    out = 1
    for v in values:
        out = out * v // math.gcd(out, v)
    return out


def size_slots(source: str) -> tuple[dict[str, Constant], list[Slot]]:
    """The constants of ``source`` and the size slots a derived profile may change."""
    tree = ast.parse(source)
    constants = module_constants(tree)
    feeding = _names_feeding_inputs(tree, constants)
    roots = [c for c in constants.values() if c.name in feeding and c.expr is None and not HYPER.search(c.name)]
    kept = {c.value for c in constants.values() if isinstance(c.value, int) and c.value >= 2}
    slots = []
    for c in roots:
        values = [(None, c.value)] if isinstance(c.value, int) else list(enumerate(c.value))
        for index, value in values:
            if value < SIZE_FLOOR:
                continue
            # the other constants it is a multiple of (groups, heads, ...) and 16 where it is one
            divisors = [d for d in kept if d < value and value % d == 0 and d <= SIZE_FLOOR]
            step = _lcm(divisors + ([16] if value % 16 == 0 else []))
            slots.append(Slot(c.name, index, value, step))
    return constants, slots


def _round_down(value: int, step: int) -> int:
    return max(step, value // step * step)


def _small_values(slots: list[Slot]) -> dict[Slot, int]:
    """Halve the largest slot until each is at most SMALL_MAX and their product fits SMALL_BUDGET (or nothing
    can shrink further)."""
    values = {s: s.full for s in slots}
    while math.prod(values.values()) > SMALL_BUDGET or max(values.values()) > SMALL_MAX:
        shrinkable = [s for s in slots if values[s] > max(SIZE_FLOOR, s.step)]
        if not shrinkable:
            break
        s = max(shrinkable, key=lambda s: values[s])
        values[s] = max(_round_down(values[s] // 2, s.step), SIZE_FLOOR if s.step < SIZE_FLOOR else s.step)
    return values


def _alt_value(base: int, step: int) -> int:
    """The next odd multiple of ``step`` above ``base`` (so not a multiple of the block sizes above ``step``).
    Larger, not smaller: a kernel that hard-codes the tested size then leaves part of the output unwritten
    (a clean wrong answer) rather than writing past the end of smaller buffers."""
    m = base // step + 1
    while m % 2 == 0:
        m += 1
    return m * step


def _alt_values(slots: list[Slot], base: dict[Slot, int]) -> dict[Slot, int]:
    alt = {s: _alt_value(base[s], s.step) for s in slots}
    limit = ALT_GROWTH * math.prod(base.values())
    # undo the largest growths first until the alt shape costs at most ALT_GROWTH times the base shape
    for s in sorted(slots, key=lambda s: alt[s] / base[s], reverse=True):
        if math.prod(alt.values()) <= limit:
            break
        if alt[s] > base[s]:
            alt[s] = base[s]
    return alt


def _assemble(constants: dict[str, Constant], slots: list[Slot], values: dict[Slot, int]) -> dict[str, object]:
    """The constants to set for ``values``: the changed ones, plus every constant computed from them."""
    env = {name: (list(c.value) if isinstance(c.value, (tuple, list)) else c.value) for name, c in constants.items()}
    for s in slots:
        if s.index is None:
            env[s.name] = values[s]
        else:
            env[s.name][s.index] = values[s]
    for name, c in constants.items():  # source order: dependents after what they read
        if c.expr is not None:
            env[name] = _evaluate(c.expr, env)
    out = {}
    for name, c in constants.items():
        value = env[name]
        if isinstance(c.value, tuple):
            value = tuple(value)
        if value != c.value:
            out[name] = value
    return out


def derive_profile(source: str, profile: str, base: dict | None = None) -> tuple[dict[str, object], str]:
    """``(constants to set, "")`` for a derived ``profile`` ("small" or "alt") of ``source``, or ``({}, why
    not)``. ``alt`` starts from ``base`` (the small profile's constants, e.g. the problem's own
    ``KZ_SIZES["small"]``) or else from the derived small profile."""
    try:
        constants, slots = size_slots(source)
    except SyntaxError as exc:
        return {}, f"cannot parse the problem ({exc.msg})"
    if not slots:
        return {}, "no integer size constant >= 16 feeds get_inputs()/get_init_inputs()"
    small = _small_values(slots)
    if profile == "small":
        return _assemble(constants, slots, small), ""
    if profile != "alt":
        return {}, f"no rule derives a {profile!r} profile"
    if base:
        for s in slots:
            given = base.get(s.name)
            if given is not None:
                small[s] = given if s.index is None else list(given)[s.index]
    alt = _alt_values(slots, small)
    if alt == small:
        return {}, "no size constant can change within the memory allowed"
    start = {s: small[s] for s in slots}
    return _assemble(constants, slots, {s: alt.get(s, start[s]) for s in slots}), ""


def module_source(module: ModuleType) -> str:
    return Path(module.__file__).read_text()


def apply_profile(module: ModuleType, profile: str) -> tuple[str, str]:
    """Set ``module``'s constants for ``profile``: its own ``KZ_SIZES[profile]`` when it has one, else a
    derived one for "small" and "alt". Returns ``(the profile used, why none was derived)``: the profile is
    "full" when nothing changed, and ends in `DERIVED` when derived."""
    own = getattr(module, "KZ_SIZES", None) or {}
    if profile == "full" or profile in own:
        return apply_size_profile(module, profile), ""
    if profile not in ("small", "alt"):
        return "full", f"the problem has no KZ_SIZES[{profile!r}]"
    values, why = derive_profile(module_source(module), profile, base=own.get("small"))
    if not values:
        return "full", why
    for name, value in values.items():
        setattr(module, name, value)
    return profile + DERIVED, ""


def describe(values: dict[str, object]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in values.items())

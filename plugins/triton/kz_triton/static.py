"""Static checks for Triton candidates, from the AST alone (nothing is imported or run).

The forward path is ``ModelNew.forward`` plus every module-level function and ``ModelNew`` method it
reaches; ``@triton.jit`` kernels are not part of it. The shared analysis (kzcore.evaluate.static) allows
only allocation, views and shape queries there (documented in docs/plugins.md and in the prompt).

Under the CPU interpreter a kernel body is plain Python run with the op guard suspended (kz_triton.runtime), so
the kernel rules here (`kernel_violations`) keep that body to what a compiled kernel could do, and the module
rules keep the candidate from changing what the interpreter runs: no kernel made by calling ``triton.jit``
(`jit_by_call_violations`), no module-level binding of a name the interpreter puts in the kernel's module
(`interpreter_name_violations`). The runtime checks the same at each launch (kz_triton.runtime).
"""

from __future__ import annotations

import ast
import functools

from kzcore import (
    FORBIDDEN_IMPORTS,
    KERNEL_IMPORTS,
    ModuleInfo,
    ast_walk,
    common_violations,
    dotted,
    forward_violations,
)

# what a kernel body may call by a bare name besides triton's names and the module's other kernels
KERNEL_BUILTINS = frozenset("range min max len int float bool abs print isinstance".split())

# The methods and attributes Triton's language gives the values a kernel handles (tl.tensor, tl.constexpr,
# tl.dtype and pointer types, Triton 3.x): a method call in a kernel body on anything but `tl` / `triton` must
# name one of these (tests/test_interpreter_escapes checks this list against the installed Triton).
TENSOR_METHODS = frozenset(
    """T abs advance argmax argmin associative_scan atomic_add atomic_and atomic_cas atomic_load atomic_max
    atomic_min atomic_or atomic_poll atomic_store atomic_xchg atomic_xor broadcast_to cast cdiv ceil cos cumprod
    cumsum erf exp exp2 expand_dims flip floor gather histogram item log log2 logical_and logical_or max min
    permute ravel reduce reduce_or reshape rsqrt sigmoid sin softmax sort split sqrt sqrt_rn store sum to trans
    view xor_sum""".split()
)
DTYPE_METHODS = frozenset(
    """get_int_max_value get_int_min_value is_bf16 is_block is_bool is_const is_dtype is_floating is_fp16 is_fp32
    is_fp64 is_fp8 is_fp8e4b15 is_fp8e4b8 is_fp8e4nv is_fp8e5 is_fp8e5b16 is_int is_int1 is_int16 is_int32
    is_int64 is_int8 is_int_signed is_int_unsigned is_ptr is_standard_floating is_uint16 is_uint32 is_uint64
    is_uint8 is_void with_element_ty""".split()
)
# a tensor descriptor's (`tl.make_tensor_descriptor`, a host TensorDescriptor argument): `desc.load([...])`
DESCRIPTOR_METHODS = frozenset("load store gather scatter block_shape block_type".split())
# attributes read on the way to such a method (`x_ptr.dtype.element_ty`, `acc.type.scalar`)
VALUE_ATTRIBUTES = frozenset("dtype type element_ty scalar shape numel value primitive_bitwidth".split())
KERNEL_METHODS = TENSOR_METHODS | DTYPE_METHODS | DESCRIPTOR_METHODS

# the decorators that make or wrap a kernel: applied only by decorator, on a module-level function
KERNEL_MAKERS = frozenset(("jit", "autotune", "heuristics"))

# names the interpreter's rewritten kernel refers to; the fallback when the interpreter's source is not found
_INTERPRETER_FALLBACK = ("interpreter_semantic", "interpreter_builder", "_InterpreterComparison")
INTERPRETER_PREFIXES = ("_Interpreter", "interpreter_")


@functools.cache
def interpreter_globals() -> frozenset[str]:
    """The names the CPU interpreter's rewritten kernel body looks up in the kernel's module: those its
    ``ASTTransformer`` writes into the body (``interpreter_semantic.to_tensor(...)``, ``_InterpreterComparison``),
    which `FunctionRewriter._compile_and_exec` copies from its own globals into the module only where the module
    has none, and every global of the interpreter named like them (`INTERPRETER_PREFIXES`). Read from the
    interpreter's source (triton is not imported here); a fixed list where it cannot be read."""
    import importlib.util
    from pathlib import Path

    try:
        spec = importlib.util.find_spec("triton")
        roots = list(spec.submodule_search_locations or []) if spec else []
        tree = ast.parse((Path(roots[0]) / "runtime" / "interpreter.py").read_text())
    except (ImportError, IndexError, OSError, SyntaxError, ValueError):
        return frozenset(_INTERPRETER_FALLBACK)
    emitted, parameters = set(), set()
    for node in ast_walk(tree):
        if isinstance(node, ast.Call) and dotted(node.func) in ("ast.Name", "ast.arg"):
            for kw in node.keywords:
                if kw.arg in ("id", "arg") and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
                    (emitted if kw.arg == "id" else parameters).add(kw.value.value)
    prefixed = {name for name, _line, _path in _module_bindings(tree) if name.startswith(INTERPRETER_PREFIXES)}
    return frozenset(_INTERPRETER_FALLBACK) | (emitted - parameters) | prefixed


def _import_path(node: ast.ImportFrom, package: str) -> str:
    """The absolute module of ``from <module> import ...`` (``package`` resolves a relative one)."""
    if not node.level:
        return node.module or ""
    base = package.split(".")
    base = base[: len(base) - node.level + 1] if node.level > 1 else base
    return ".".join([*base, *([node.module] if node.module else [])])


def _module_bindings(tree: ast.Module, package: str = "") -> list[tuple[str, int, str | None]]:
    """(name, line, imported dotted path or None) for every binding of a module-level name: assignments, for and
    with targets, walrus, def, class and imports at module level (function and class bodies excluded), and every
    name any function or class declares ``global``."""
    out: list[tuple[str, int, str | None]] = []

    def visit(node: ast.AST) -> None:
        line = getattr(node, "lineno", 0)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.append((node.name, line, None))
            for part in (*node.decorator_list, *getattr(node, "bases", ()), *getattr(node, "keywords", ())):
                visit(part)
            if not isinstance(node, ast.ClassDef):
                for default in (*node.args.defaults, *node.args.kw_defaults):
                    if default is not None:
                        visit(default)
            return
        if isinstance(node, ast.Lambda):
            return  # its parameters are its own
        if isinstance(node, ast.Import):
            for a in node.names:
                out.append((a.asname, line, a.name) if a.asname else (a.name.split(".")[0], line, a.name.split(".")[0]))
            return
        if isinstance(node, ast.ImportFrom):
            module = _import_path(node, package)
            for a in node.names:
                out.append((a.asname or a.name, line, f"{module}.{a.name}"))
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.append((node.id, line, None))
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            out.append((node.name, line, None))
        elif isinstance(node, ast.MatchMapping) and node.rest:
            out.append((node.rest, line, None))
        for child in ast.iter_child_nodes(node):
            visit(child)

    for stmt in tree.body:
        visit(stmt)
    for node in ast_walk(tree):
        if isinstance(node, ast.Global):
            out += [(name, node.lineno, None) for name in node.names]
    return out


def interpreter_name_violations(tree: ast.Module) -> list[str]:
    """Bindings and uses of the names Triton's interpreter puts in a kernel's module for its rewritten body
    (`interpreter_globals`, and any name starting with `INTERPRETER_PREFIXES`): the interpreter adds its own only
    where the module has none, so a binding of the candidate's (assignment, def, class, import, ``global``) would
    run instead, inside the suspended launch; the candidate has no business naming them either."""
    injected = interpreter_globals()

    def theirs(name: str) -> bool:
        return name in injected or name.startswith(INTERPRETER_PREFIXES)

    out: list[str] = []
    bound: set[str] = set()
    for name, line, _path in _module_bindings(tree):
        if theirs(name):
            bound.add(name)
            problem = (
                f"line {line}: binds `{name}` at module level, a name Triton's interpreter puts in the kernel's "
                "module (the interpreter would run this instead of its own)"
            )
            if problem not in out:
                out.append(problem)
    for node in ast_walk(tree):
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
        if name and name not in bound and theirs(name):
            problem = f"line {node.lineno}: `{name}` is a name of Triton's interpreter, not the candidate's"
            if problem not in out:
                out.append(problem)
    return out


def _kernel_maker(node: ast.AST, triton_names: set[str]) -> str:
    """``triton.jit`` for a Name/Attribute that names one of `KERNEL_MAKERS` through a triton import, else ""."""
    path = dotted(node)
    parts = path.split(".")
    if not path or parts[-1] not in KERNEL_MAKERS:
        return ""
    return path if parts[0] in triton_names else ""


def jit_by_call_violations(tree: ast.Module, triton_names: set[str]) -> list[str]:
    """``triton.jit`` / ``autotune`` / ``heuristics`` anywhere but as a decorator of a module-level function:
    ``kernel = triton.jit(fn)`` makes a kernel whose body the kernel rules never saw (they know kernels by their
    decorators), and a decorator on a nested function or a method makes one the runtime does not know."""
    allowed: set[int] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for dec in node.decorator_list:
                allowed.add(id(dec.func if isinstance(dec, ast.Call) else dec))
    out: list[str] = []
    seen_inner: set[int] = set()
    for node in ast_walk(tree):
        if not isinstance(node, (ast.Name, ast.Attribute)) or id(node) in seen_inner:
            continue
        inner = node.value if isinstance(node, ast.Attribute) else None
        while isinstance(inner, ast.Attribute):  # `triton.jit` met first: its inner parts are not separate uses
            seen_inner.add(id(inner))
            inner = inner.value
        path = _kernel_maker(node, triton_names)
        if path and id(node) not in allowed:
            problem = (
                f"line {node.lineno}: `{path}` used other than as the decorator of a module-level function: a "
                "kernel is made only by decorating it (`@triton.jit`), so the kernel rules see its body"
            )
            if problem not in out:
                out.append(problem)
    return out


def _triton_imports(tree: ast.Module) -> tuple[set[str], set[str]]:
    """(names bound by importing triton or math, names bound by importing anything else)."""
    triton_names, other_names = set(), set()
    for node in ast_walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                root = a.name.split(".")[0]
                (triton_names if root in ("triton", "math") else other_names).add(a.asname or root)
        elif isinstance(node, ast.ImportFrom):
            root = (node.module or "").split(".")[0]
            for a in node.names:
                (triton_names if root in ("triton", "math") else other_names).add(a.asname or a.name)
    return triton_names, other_names


def _triton_paths(tree: ast.Module) -> dict[str, str]:
    """Name -> the dotted path a triton or math import binds it to (``tl`` -> ``triton.language``, ``libdevice`` ->
    ``triton.language.extra.libdevice``)."""
    paths = {}
    for name, _line, path in _module_bindings(tree):
        if path is not None and path.split(".")[0] in ("triton", "math"):
            paths[name] = path
    return paths


# where a name a kernel reaches through triton's imports may lead: the language (and Python's math on scalars);
# triton.runtime, triton.testing and the interpreter hold NumPy, os, importlib and the interpreter's own internals
KERNEL_PATH_PREFIXES = ("triton.language", "math")
# triton's own host helpers that a kernel body may call on constexpr values
KERNEL_TRITON_HELPERS = frozenset(("triton.cdiv", "triton.next_power_of_2"))


def kernel_path_problem(path: str) -> str:
    """Why a kernel body may not reach ``path`` (a triton- or math-rooted dotted path), or ""."""
    parts = path.split(".")
    if any(part.startswith("_") for part in parts[1:]):
        return "a private name"
    if path in KERNEL_TRITON_HELPERS or any(path == p or path.startswith(p + ".") for p in KERNEL_PATH_PREFIXES):
        return ""
    return "outside triton.language"


def triton_internal_problem(path: str) -> str:
    """Why a candidate module may not reach ``path`` (a triton-rooted dotted path) anywhere, or "": Triton's
    interpreter module (raw loads and stores at any address, its NumPy) and any private part of triton."""
    parts = path.split(".")
    if parts[0] != "triton":
        return ""
    if parts[:3] == ["triton", "runtime", "interpreter"]:
        return "Triton's interpreter is not part of a kernel module"
    if any(part.startswith("_") for part in parts[1:]):
        return "a private part of triton"
    return ""


def triton_internal_violations(tree: ast.Module) -> list[str]:
    """Imports and attribute paths, anywhere in the module, into Triton's interpreter or a private part of triton
    (`triton_internal_problem`): its extension module loads and stores raw addresses, from host code as well."""
    paths = _triton_paths(tree)
    inner = {id(n.value) for n in ast_walk(tree) if isinstance(n, ast.Attribute)}  # a longer path holds these
    out = []
    for node in ast_walk(tree):
        found = []
        if isinstance(node, ast.Import):
            found = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            found = [f"{module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Attribute) and id(node) not in inner:
            root, chain = _chain(node)
            if isinstance(root, ast.Name) and root.id in paths:
                found = [".".join([paths[root.id], *chain])]
        for path in found:
            why = triton_internal_problem(path)
            problem = f"line {node.lineno}: `{path}`: {why}" if why else ""
            if problem and problem not in out:
                out.append(problem)
    return out


def shadow_violations(tree: ast.Module) -> list[str]:
    """Module-level names that the kernel rules trust by name but that the module binds again: a name imported
    from triton or math bound some other way too (``from triton.language import maximum`` then ``def
    maximum``), or a builtin a kernel may call (`KERNEL_BUILTINS`: ``def max``). The interpreted body looks names
    up in the module, so the candidate's binding would run as Python in the launch."""
    bindings = _module_bindings(tree)
    triton = {name for name, _line, path in bindings if path is not None and path.split(".")[0] in ("triton", "math")}
    out = []
    for name, line, path in bindings:
        other = path is None or path.split(".")[0] not in ("triton", "math")
        if (name in triton and other) or name in KERNEL_BUILTINS:
            problem = (
                f"line {line}: binds `{name}`, which a @triton.jit kernel calls as "
                f"{'triton' if name in triton else 'a builtin'}'s own: the module may not rebind it"
            )
            if problem not in out:
                out.append(problem)
    return out


def _literal(node: ast.AST) -> bool:
    """A constant, a negated one, or a tuple of those."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return isinstance(node.operand, ast.Constant) and not isinstance(node.operand.value, (str, bytes))
    return isinstance(node, ast.Tuple) and all(_literal(e) for e in node.elts)


def module_constants(tree: ast.Module, triton_names: set[str]) -> set[str]:
    """Module-level names whose only binding is ``NAME = <literal>`` or ``NAME = tl.constexpr(<literal>)``."""
    literal_lines: dict[str, set[int]] = {}
    for node in tree.body:
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if value is None or len(targets) != 1 or not isinstance(targets[0], ast.Name):
            continue
        wrapped = (
            isinstance(value, ast.Call)
            and dotted(value.func).split(".")[-1] == "constexpr"
            and dotted(value.func).split(".")[0] in triton_names
            and len(value.args) == 1
            and not value.keywords
        )
        if _literal(value.args[0] if wrapped else value):
            literal_lines.setdefault(targets[0].id, set()).add(node.lineno)
    constants = set(literal_lines)
    for name, line, _path in _module_bindings(tree):
        if name in constants and line not in literal_lines[name]:
            constants.discard(name)  # bound some other way too
    return constants


def _body_nodes(fn: ast.FunctionDef | ast.AsyncFunctionDef):
    """Every node of a kernel's own code: its parameters (annotations, defaults) and body, not its decorators
    (module code, checked by the module rules)."""
    for part in (fn.args, *fn.body, *([fn.returns] if fn.returns else [])):
        yield from ast_walk(part)


def kernel_violations(tree: ast.Module, mod: ModuleInfo) -> list[str]:
    """What a ``@triton.jit`` body may not do: call anything but ``triton`` / ``triton.language`` (and Python's
    ``math``), the module's other kernels, a few builtins and Triton's own methods of its values (`KERNEL_METHODS`),
    or name any other imported module (``torch``, ``numpy``) or module-level value but another kernel, a literal
    constant and triton's modules. A compiled kernel could do none of that; under the CPU interpreter the body is
    plain Python and would run them outside the op guard's view."""
    triton_names, other_names = _triton_imports(tree)
    paths = _triton_paths(tree)
    module_level = {name for name in mod.functions if name not in mod.kernels} | set(mod.classes)
    module_level |= {name for name, _line, path in _module_bindings(tree) if path is None}
    constants = module_constants(tree, triton_names)
    rebound = {name for name, _line, _path in _module_bindings(tree) if name in mod.kernels}
    rebound = {name for name in rebound if sum(n == name for n, _l, _p in _module_bindings(tree)) > 1}
    named_ok = (mod.kernels - rebound) | constants | triton_names
    bound = triton_names | other_names | module_level | set(mod.functions) | KERNEL_BUILTINS
    out: list[str] = []
    for name in sorted(mod.kernels):
        fn = mod.functions[name]
        where = f"inside @triton.jit kernel `{name}`"
        own = {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}
        own |= {a.arg for a in (fn.args.vararg, fn.args.kwarg) if a is not None}
        for node in _body_nodes(fn):
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                own.add(node.id)
            elif isinstance(node, ast.Lambda):  # a lambda's parameters are bound inside it
                args = node.args
                own |= {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg) if a}
        known = bound | own
        call_roots = set()  # a callee's root name: the call rule below says what is wrong with it
        for node in _body_nodes(fn):
            if isinstance(node, ast.Call):
                root = node.func
                while isinstance(root, (ast.Attribute, ast.Subscript)):
                    root = root.value
                call_roots.add(id(root))
        inner = set()  # every part of an attribute chain but the outermost attribute, its root name included
        for node in _body_nodes(fn):
            if isinstance(node, ast.Attribute):
                part = node.value
                while isinstance(part, (ast.Attribute, ast.Subscript)):
                    inner.add(id(part))
                    part = part.value
                inner.add(id(part))
        for node in _body_nodes(fn):
            line = getattr(node, "lineno", "?")
            problem = ""
            outermost = id(node) not in inner
            if (
                outermost
                and isinstance(node, ast.Name)
                and node.id in paths
                and node.id not in own
                and kernel_path_problem(paths[node.id])
            ):
                why = kernel_path_problem(paths[node.id])
                problem = f"line {line}: `{node.id}` ({paths[node.id]}) {where}: {why}"
            elif isinstance(node, ast.Name) and node.id in other_names:
                problem = f"line {line}: `{node.id}` {where}: a kernel uses triton.language only"
            elif isinstance(node, ast.Name) and node.id not in known:
                # the interpreter runs the body in the module's namespace, where it adds names of its own (`np`)
                problem = f"line {line}: `{node.id}` {where} is bound nowhere in the module"
            elif (
                isinstance(node, ast.Name)
                and id(node) not in call_roots
                and node.id not in own | named_ok | KERNEL_BUILTINS
            ):
                problem = (
                    f"line {line}: `{node.id}` {where} is a module-level value: a kernel may name only triton, "
                    "other @triton.jit kernels and module constants assigned a literal"
                )
            elif isinstance(node, ast.Attribute) and outermost:
                problem = _attribute_problem(node, where, own, triton_names, paths)
            if not problem and isinstance(node, ast.Call):
                problem = _call_problem(node, where, own, module_level, mod, triton_names)
            if problem and problem not in out:
                out.append(problem)
    return out


def _chain(node: ast.AST) -> tuple[ast.AST, list[str]]:
    """(the root of an attribute or subscript chain, its attribute names in order): ``tl.math.exp`` -> (``tl``,
    ["math", "exp"])."""
    chain: list[str] = []
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Attribute):
            chain.append(node.attr)
        node = node.value
    return node, chain[::-1]


def _attribute_problem(node: ast.Attribute, where: str, own: set[str], triton_names: set[str], paths) -> str:
    """An attribute read in a kernel body: along a triton- or math-rooted path, only into triton.language (or
    math), no private name (`kernel_path_problem`); on any other value, only the attributes and methods Triton's
    language gives its values (`KERNEL_METHODS`, `VALUE_ATTRIBUTES`: not ``x.handle.data``, the interpreter's
    NumPy array)."""
    root, chain = _chain(node)
    if isinstance(root, ast.Name) and root.id in triton_names and root.id not in own:
        path = ".".join([paths.get(root.id, root.id), *chain])
        why = kernel_path_problem(path)
        return f"line {node.lineno}: reaches `{path}` {where}: {why}" if why else ""
    if node.attr not in KERNEL_METHODS | VALUE_ATTRIBUTES:
        return (
            f"line {node.lineno}: reads `.{node.attr}` {where}: a kernel's values have only the attributes and "
            "methods of triton.language's (`.dtype`, `.to()`, ...)"
        )
    return ""


def _call_problem(node: ast.Call, where: str, own: set[str], module_level: set[str], mod, triton_names) -> str:
    line = node.lineno
    callee = node.func
    root, chain = _chain(callee)
    if isinstance(root, ast.Name) and root.id in triton_names and root.id not in own:
        return ""  # tl.load(...), triton.cdiv(...): triton's own
    if isinstance(callee, ast.Subscript) or (
        isinstance(root, ast.Name) and root.id in module_level and root.id not in own and callee is not root
    ):
        shown = dotted(callee) or (root.id + "[…]" if isinstance(root, ast.Name) else "…")
        return f"line {line}: calls `{shown}` {where}: a kernel may call only triton.language"
    if not isinstance(callee, (ast.Name, ast.Attribute)):
        return f"line {line}: calls the value of an expression {where}: a kernel may call only named functions"
    if isinstance(callee, ast.Name):
        allowed = mod.kernels | KERNEL_BUILTINS | triton_names
        if callee.id not in allowed or callee.id in own:
            return (
                f"line {line}: calls `{callee.id}` {where}: a kernel may call only triton.language, "
                "other @triton.jit kernels and basic builtins"
            )
        return ""
    # a method of a value the kernel holds (an argument, a local, a computed value): Triton's own methods only
    method, via = chain[-1], chain[:-1]
    if method not in KERNEL_METHODS or any(a not in KERNEL_METHODS | VALUE_ATTRIBUTES for a in via):
        shown = dotted(callee) or f"….{method}"
        return (
            f"line {line}: calls `{shown}` {where}: a method call on a kernel's values may only be one of "
            "triton.language's (`.to()`, `.sum()`, ...)"
        )
    return ""


def _is_jit(dec: ast.AST) -> bool:
    target = dec.func if isinstance(dec, ast.Call) else dec
    return dotted(target).split(".")[-1] == "jit"


def is_triton_kernel(fn: ast.FunctionDef) -> bool:
    """Decorated with ``triton.jit`` (alone or under autotune/heuristics)."""
    return any(_is_jit(d) for d in fn.decorator_list)


def checked_kernels(source: str) -> dict[tuple[str, int], tuple[int, set[str]]]:
    """For a source that passed `check_source`: (kernel name, its first line as Python counts it, the first
    decorator's) -> (its last line, the module-level names its body may name: other kernels, constants)."""
    tree = ast.parse(source)
    mod = ModuleInfo(tree, is_triton_kernel)
    out = {}
    for name in mod.kernels:
        fn = mod.functions[name]
        first = min([fn.lineno, *(d.lineno for d in fn.decorator_list)])
        names = {n.id for n in _body_nodes(fn) if isinstance(n, ast.Name)}
        out[(name, first)] = (fn.end_lineno or fn.lineno, names)
    return out


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
    problems += common_violations(tree, FORBIDDEN_IMPORTS | {"kz_triton"}, KERNEL_IMPORTS)
    triton_names, _ = _triton_imports(tree)
    module_rules = jit_by_call_violations(tree, triton_names) + interpreter_name_violations(tree)
    module_rules += shadow_violations(tree) + triton_internal_violations(tree)
    return problems + module_rules + kernel_violations(tree, mod) + forward_violations(mod)
